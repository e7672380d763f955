"""Walk issue 38's newcomer flow with the real recommended pair on a 1280x720 screen, no resizing:

1. a fresh profile's first window (no model): it fits the screen, the empty state's first button is the
   way to a pair, the plots are collapsed;
2. the two GGUF files imported as Models → Import GGUF files… does (``Registry.import_files``); the
   empty state then offers "Choose a pair…" first, and choosing the pair is what the Pair… dialog's
   ``pairChosen`` does;
3. a question typed into the composer and sent with its Send button (a mouse click), in ``auto``;
4. the answer streams, the plots open by themselves, and every control of the composer and the status
   bar stay inside the screen.

    python scripts/walk_newcomer.py TARGET.gguf DRAFT.gguf [--out docs] [--theme light]

prints each step with what it checked and the answer's stats line, and saves
``screenshot-newcomer-1280x720-THEME.png`` (the whole screen) in ``--out``.  It runs the real window on
Qt's offscreen platform with a screen of 1280x720 (a Qt config file), over llama.cpp on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WIDTH, HEIGHT = 1280, 720
QUESTION = "Write a Python function that returns the n-th Fibonacci number, with a docstring."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs"))
    ap.add_argument("--theme", choices=("light", "dark"), default="light")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return walk(args)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "screen.json"
        config.write_text(json.dumps({"screens": [{"name": f"{WIDTH}x{HEIGHT}", "x": 0, "y": 0, "width": WIDTH,
                                                    "height": HEIGHT, "logicalDpi": 96, "logicalBaseDpi": 96,
                                                    "dpr": 1}]}))
        home = Path(tmp) / "you"  # a newcomer's home: no config, no data, no models
        env = os.environ | {"QT_QPA_PLATFORM": f"offscreen:configfile={config}", "HOME": str(home)}
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
            env[var] = str(home / var.lower())
        argv = [sys.executable, __file__, str(args.target.resolve()), str(args.draft.resolve()),
                "--out", str(args.out.resolve()), "--theme", args.theme, "--child"]
        return subprocess.run(argv, env=env).returncode


def walk(args: argparse.Namespace) -> int:
    from PySide6.QtCore import QPoint, QRect, Qt
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QPushButton, QWidget

    import specchat  # noqa: F401  (llama.cpp's library before numpy)
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import open_store
    from specchat.ui.session import AppSession
    from specchat.ui.window_geometry import FRAME_ALLOWANCE
    from specchat.workers.generation import load_pair

    app = QApplication([])
    screen = app.primaryScreen().availableGeometry()
    assert (screen.width(), screen.height()) == (WIDTH, HEIGHT), "the screen's config file was not read"
    began = time.monotonic()

    def step(text: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {text}", flush=True)

    def wait(until, timeout_s: float) -> bool:  # noqa: ANN001
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not until():
            app.processEvents()
            time.sleep(0.02)
        return bool(until())

    def on_screen(widget: QWidget) -> bool:
        r = QRect(widget.mapToGlobal(QPoint(0, 0)), widget.size())
        return widget.isVisible() and screen.contains(r)

    profile = Profile.default()
    session = AppSession(open_store(profile.database), AppConfig(profile.config_file), Registry(profile.registry),
                         profile=profile, pair_factory=load_pair)
    window = session.window
    window.set_theme(args.theme)
    window.show()
    wait(lambda: False, 0.5)
    pane = window.pane

    def shown_buttons() -> list[str]:
        found = pane.empty_state.findChildren(QPushButton)
        return [b.text() for b in sorted(found, key=lambda b: (b.mapTo(pane.empty_state, QPoint(0, 0)).y(),
                                                                b.mapTo(pane.empty_state, QPoint(0, 0)).x()))
                if b.isVisible()]

    g = window.frameGeometry()
    step(f"first window {g.width()}x{g.height()} at ({g.x()}, {g.y()}) on a {WIDTH}x{HEIGHT} screen; "
         f"inside: {screen.contains(window.geometry())}; plots collapsed: {window.telemetry.isHidden()}")
    step(f"empty state shown: {pane.empty_state.isVisible()}; its buttons in order: {shown_buttons()}")

    report = session.registry.import_files([args.target, args.draft])
    step("imported: " + "; ".join(f"{Path(m.path).name} ({m.name}, {m.quant})" for m in report.added)
         + (f"; skipped {len(report.skipped)}" if report.skipped else ""))
    window._models_changed()
    wait(lambda: False, 0.3)
    step(f"empty state after the import: {shown_buttons()}")
    window._pair_chosen(args.target, args.draft)  # what Pair…'s dialog emits when the pair is chosen
    step("pair chosen; loading")
    if not wait(lambda: session.answers.pair_info is not None, 600):
        step("the pair did not load within 600 s")
        return 1
    step(f"loaded: {window.pair_status.text()}")

    composer = pane.composer
    composer.setFocus()
    QTest.keyClicks(composer, QUESTION)
    controls = {"Send": pane.send_button, "Edit last": pane.edit_button, "Regenerate": pane.regen_button,
                "Attach": pane.attach_button}
    outside = [name for name, w in controls.items() if not on_screen(w)]
    step(f"composer controls {sorted(controls)} inside the screen: {not outside} {outside or ''}; "
         f"status bar inside: {on_screen(window.statusBar())}")
    QTest.mouseClick(controls["Send"], Qt.MouseButton.LeftButton)
    step("sent with the Send button")
    chat = window.chat_id
    assert chat is not None, "no chat is open"
    if not wait(lambda: not session.answers.busy_chats() and session.store.messages(chat)[-1].role == "assistant",
                600):
        step("no answer within 600 s")
        return 1
    wait(lambda: False, 1.0)
    last = session.store.messages(chat)[-1]
    step(f"answer: {last.state}, {last.stats.tokens if last.stats else 0} tokens; "
         f"footer: {pane.conversation.messages[-1].footer}")
    step(f"plots shown by themselves: {window.telemetry.isVisible()}; window still {window.frameGeometry().width()}x"
         f"{window.frameGeometry().height()}, inside: {screen.contains(window.geometry())}; Send inside: "
         f"{on_screen(controls['Send'])}; status bar inside: {on_screen(window.statusBar())}")

    image = QImage(WIDTH, HEIGHT, QImage.Format.Format_RGB32)
    image.fill(QColor("#2e3440"))
    p = QPainter(image)
    g = window.geometry()  # the title bar drawn in the frame's allowance (offscreen windows have no frame)
    bar = QRect(g.x() - FRAME_ALLOWANCE.left(), g.y() - FRAME_ALLOWANCE.top(),
                g.width() + FRAME_ALLOWANCE.left() + FRAME_ALLOWANCE.right(), FRAME_ALLOWANCE.top())
    p.fillRect(bar, QColor("#dcdcdc" if args.theme == "light" else "#3a3a3a"))
    p.setPen(QColor("#1e1e1e" if args.theme == "light" else "#e6e6e6"))
    p.drawText(bar, Qt.AlignmentFlag.AlignCenter, window.windowTitle())
    p.drawImage(g.topLeft(), window.grab().toImage())
    p.end()
    args.out.mkdir(parents=True, exist_ok=True)
    shot = args.out / f"screenshot-newcomer-{WIDTH}x{HEIGHT}-{args.theme}.png"
    image.save(str(shot))
    step(f"saved {shot.name}")
    window.close()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
