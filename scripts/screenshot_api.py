"""Render the window serving its pair through the OpenAI-compatible API while a client streams (issue 35).

    python scripts/screenshot_api.py docs/screenshot-api-server.png [docs/screenshot-api-requests.png]

Over the tests' fake pair (tests/helpers/fakes.py: the real loop and telemetry, no model file), offscreen at
1280x720: a chat answered in the window, then Models → Serve the API, five requests from the ``openai``
package (three in baseline mode first, so the panel has its plain rate), and one more streaming when the
picture is taken: the status bar's API line, the telemetry plots of the API's answer.  The second file
is View → API requests… after it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy)


def main() -> int:
    window_png = sys.argv[1]
    requests_png = sys.argv[2] if len(sys.argv) > 2 else ""
    import openai
    from PySide6.QtWidgets import QApplication

    from helpers.fakes import FakePairFactory, FakeSpec
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.ui.session import AppSession

    app = QApplication([])
    tmp = Path(tempfile.mkdtemp())

    def wait(until, timeout_s: float) -> bool:  # noqa: ANN001
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not until():
            app.processEvents()
            time.sleep(0.01)
        return until()

    profile = Profile.at(tmp / "profile")
    target, draft = tmp / "qwen2.5-7b-instruct-q4_k_m.gguf", tmp / "qwen2.5-0.5b-instruct-q8_0.gguf"
    target.touch()
    draft.touch()
    store = open_store(profile.database)
    chat = store.create_chat("Speculative decoding, briefly", ChatSettings(target=target, draft=draft,
                                                                          speculation="auto", max_tokens=400))
    store.add_message(chat.id, "user", "What does speculative decoding do?")
    store.close()
    # every decode takes 8 ms, and the calibration says so: plain decoding runs at the rate the load measured,
    # so "x plain" means what it means with a real pair
    spec = FakeSpec(answer_tokens=3000, decode_s=0.008, n_ctx=8192,
                    costs={1: 0.0085, 2: 0.0087, 3: 0.0089, 5: 0.0093, 9: 0.0101})
    session = AppSession(open_store(profile.database), AppConfig(profile.config_file), Registry(profile.registry),
                         profile=profile, pair_factory=FakePairFactory(spec), nice=0)
    window = session.window
    window.resize(1280, 720)
    window.show()
    wait(lambda: session.answers.pair_info is not None, 30)
    session.answers.ask(chat.id)
    wait(lambda: not session.answers.busy_chats(), 60)
    window.open_chat(chat.id)

    window.actions_by_slot["set_api"].trigger()
    if not session.api.running:
        print("the API did not start:", window.statusBar().currentMessage(), file=sys.stderr)
        session.close()
        return 2
    client = openai.OpenAI(base_url=session.api.url, api_key="none", max_retries=0, timeout=120,
                           default_headers={"User-Agent": "notebook/0.3"})
    # three plain answers first: the panel's plain line and "x plain" rest on them
    asks = [(f"Summarise paragraph {i} in one line.", "baseline", 150) for i in range(3)]
    asks += [("Write a haiku about drafts.", None, 300), ("List three uses of prompt lookup.", "lookup", 300)]
    for text, mode, limit in asks:
        done = threading.Event()

        def ask(text=text, mode=mode, limit=limit, done=done) -> None:
            try:
                client.chat.completions.create(model="x", messages=[{"role": "user", "content": text}],
                                               max_tokens=limit,
                                               extra_body={"specchat": {"mode": mode}} if mode else None)
            finally:
                done.set()

        threading.Thread(target=ask, daemon=True).start()
        wait(done.is_set, 60)
    wait(lambda: session.api.requests == len(asks), 10)

    chunks = [0]

    def stream() -> None:
        for chunk in client.chat.completions.create(
                model="x", stream=True, max_tokens=3000,
                messages=[{"role": "user", "content": "Explain the verify step in detail."}]):
            if chunk.choices and chunk.choices[0].delta.content:
                chunks[0] += 1

    threading.Thread(target=stream, daemon=True).start()
    wait(lambda: chunks[0] >= 120, 60)  # the plots follow the API's answer a while; it still streams
    if session.answers.external is None:
        print("the streamed answer ended before the picture", file=sys.stderr)
    window.grab().save(window_png)
    print("saved", window_png)
    if requests_png:
        wait(lambda: session.api.requests == len(asks) + 1, 120)
        window.show_api_requests()
        dialog = window._api_requests
        dialog.resize(1100, 300)
        wait(lambda: False, 0.5)
        dialog.grab().save(requests_png)
        print("saved", requests_png)
        dialog.close()
    window.close()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
