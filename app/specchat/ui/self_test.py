"""``specchat --self-test [--target T.gguf]``: start the real app headless, check it, exit.

For a packaged build (does the bundle carry Qt's platform plugins, pyqtgraph and
llama.cpp's shared libraries?) and for a user's troubleshooting.  It opens the main
window offscreen on a throw-away database, with the telemetry dock, and checks that
llama.cpp loads; given a model, it also loads it through the generation thread and
streams a short answer into the window.  One line per check; exit 0 when all pass.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path


def run_self_test(argv: list[str]) -> int:
    model: Path | None = None
    if argv[:1] == ["--target"] and len(argv) == 2:
        model = Path(argv[1])
    elif argv:
        print("usage: specchat --self-test [--target MODEL.gguf]", file=sys.stderr)
        return 2
    if model is not None and not model.is_file():
        print(f"specchat: {model}: no such file", file=sys.stderr)
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from specchat import native_loaded_first
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.workers.generation import backend_info, cpu_kernel_verdict

    from .session import AppSession

    results: list[tuple[bool, str]] = []

    def check(ok: bool, what: str) -> None:
        results.append((ok, what))
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)

    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="specchat-selftest-"))
    existing = QApplication.instance()  # typed QCoreApplication: the window needs a QApplication
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0]])
    check(True, f"Qt {app.platformName()} platform plugin")
    info = backend_info()
    check(True, f"llama.cpp loaded: {info['backend']} backend")
    kernels = cpu_kernel_verdict()  # a child process decodes a batch (once per build and CPU): never this one
    check(kernels.state != "broken", kernels.line())
    check(native_loaded_first(), "llama.cpp's library loaded before numpy (numpy first crashes a CUDA model load)")
    store = open_store(Profile.at(tmp).database)
    if model is not None:
        store.create_chat("self-test", ChatSettings(target=model, draft=model, speculation="draft", max_tokens=8))
    profile = Profile.at(tmp)
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile)
    window = session.window
    failed: list[str] = []
    session.answers.pairFailed.connect(failed.append)
    window.show()
    window.telemetry.show()  # the app collapses it until an answer has rounds; the bundle's plots are checked here
    deadline = time.monotonic() + 120

    def step() -> None:
        app.processEvents()
        if not any("window" in what for _, what in results):
            check(window.isVisible() and window.telemetry.isVisible(), "window and telemetry panel shown")
        if model is None:
            app.quit()
            return
        if session.answers.pair_info is None:
            if failed or time.monotonic() > deadline:
                check(False, f"load {model.name}: {failed[0] if failed else 'timed out'}")
                app.quit()
                return
            QTimer.singleShot(100, step)
            return
        if not results[-1][1].startswith("loaded"):
            check(True, f"loaded {model.name} as target and draft")
            window.pane.composer.setPlainText("Say hello.")
            window.pane.send()
        if window.pane.generating and time.monotonic() < deadline:
            QTimer.singleShot(100, step)
            return
        messages = store.messages(window.chat_id) if window.chat_id is not None else []
        if not messages:
            check(False, "streamed an answer: no chat shown")
            app.quit()
            return
        answer = messages[-1]
        check(answer.role == "assistant" and answer.state == "done" and bool(answer.content.strip()),
              f"streamed an answer: {answer.stats.tokens if answer.stats else 0} tokens, state {answer.state}")
        app.quit()

    QTimer.singleShot(0, step)
    app.exec()
    window.close()
    session.close()
    ok = all(r[0] for r in results)
    print(f"self-test {'passed' if ok else 'FAILED'} in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1
