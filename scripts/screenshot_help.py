"""Render what issue 38's items 6 and 7 changed, at 1280x720 and 1920x1080, light and dark:
Help → Keyboard shortcuts, a plot's tooltip, a search's matches in the chat, Copy's "Copied ✓", the
import of GGUF files' report, and the keyboard focus ring.

    python scripts/screenshot_help.py docs/

writes docs/screenshot-<topic>-<w>x<h>-<theme>.png for each.  Each size runs in a child process whose
offscreen screen is that size (Qt's offscreen platform reads its screens from a config file); the
window fills the screen, and its dialogs, message boxes and tooltips (windows of their own) are
painted over it where they opened.  No model: the answers stream from the fake pair of the tests
(tests/helpers/fakes.py) through the real generation thread, so the plots show real rounds; the
data folder and HOME are a new temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = ((1280, 720), (1920, 1080))
THEMES = ("light", "dark")
TOPICS = ("shortcuts", "plot-tooltip", "search", "copied", "copied-detail", "import", "focus")
MARK = ".made-by-screenshot_help"  # the temporary folder is this script's: removed when it is found again


def _wait(app, until=lambda: False, timeout_s: float = 0.3) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout_s
    while not until() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def render(out: Path, width: int, height: int) -> None:
    """One size, both themes, every topic (in this process: its offscreen screen is width x height)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    sys.path.insert(0, str(HERE))
    from PySide6.QtCore import QEvent, Qt
    from PySide6.QtGui import QColor, QHelpEvent, QImage, QPainter
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QToolTip, QWidget

    from helpers.fakes import FakePairFactory, FakeSpec
    from helpers.gguf_samples import write_gguf
    from screenshot_themes import ANSWER, QUESTION
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.ui.session import AppSession
    from specchat.ui.theme import apply_theme

    app = QApplication([])
    apply_theme("light")
    root = Path(os.environ["HOME"])
    models = root / "Models"
    models.mkdir()
    target, draft = models / "qwen2.5-coder-1.5b-fake.gguf", models / "qwen2.5-coder-0.5b-fake.gguf"
    for p in (target, draft):
        p.touch()
    profile = Profile.at(root / "data")
    store = open_store(profile.database)
    chat = store.create_chat("Python bank account", ChatSettings(target=target, draft=draft, speculation="draft",
                                                                  max_tokens=400))
    store.add_message(chat.id, "user", QUESTION)
    store.add_message(chat.id, "assistant", ANSWER)
    store.create_chat("Speculative decoding, explained", ChatSettings(target=target, draft=draft))
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                         pair_factory=FakePairFactory(FakeSpec(answer_tokens=180, decode_s=0.004)), nice=0)
    window = session.window
    window.show()
    window.setGeometry(0, 0, width, height)
    window.activateWindow()  # the keyboard focus is the active window's
    _wait(app, lambda: QApplication.activeWindow() is window, 5)
    window.open_chat(chat.id)
    pane = window.pane
    for prompt in ("And the balance after a refused withdrawal?", "How does the draft help?"):
        pane.composer.setPlainText(prompt)
        pane.send()
        _wait(app, lambda: not session.answers.busy_chats(), 60)
    window.telemetry.show()
    window.setGeometry(0, 0, width, height)
    window.telemetry.repaint_now()
    _wait(app, timeout_s=0.5)

    def save(topic: str, theme: str, *over: QWidget) -> None:
        """The window, with the windows ``over`` it painted where they are."""
        _wait(app, timeout_s=0.3)
        image = window.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
        painter = QPainter(image)
        for w in over:
            if w is not None and w.isVisible():
                at = w.geometry().topLeft() - window.geometry().topLeft()
                painter.drawPixmap(at, w.grab())
                if not w.inherits("QTipLabel"):  # no window frame offscreen: a line where it would be
                    painter.setPen(QColor("#8a8a8a"))
                    painter.drawRect(at.x() - 1, at.y() - 1, w.width() + 1, w.height() + 1)
        painter.end()
        path = out / f"screenshot-{topic}-{width}x{height}-{theme}.png"
        image.save(str(path), "PNG", 0)  # 0: the smallest file (zlib's highest compression)
        print(path, path.stat().st_size // 1024, "KiB")

    for theme in THEMES:
        window.set_theme(theme)
        window.telemetry.repaint_now()
        window.chats.search.clear()
        _wait(app, timeout_s=0.5)
        bar = pane.conversation.verticalScrollBar()

        # Help → Keyboard shortcuts
        dialog = window.show_shortcuts()
        dialog.move(window.geometry().center() - dialog.rect().center())
        save("shortcuts", theme, dialog)
        dialog.close()

        # a plot's tooltip, as hovering shows it
        view, plot = window.telemetry.plots, window.telemetry.p_acc
        at = view.mapFromScene(plot.sceneBoundingRect().center())
        QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, at, view.viewport().mapToGlobal(at)))
        _wait(app, QToolTip.isVisible, 5)
        tip = next((w for w in QApplication.topLevelWidgets() if w.inherits("QTipLabel") and w.isVisible()), None)
        save("plot-tooltip", theme, tip)
        QToolTip.hideText()

        # a search: its words highlighted in the open chat, the second match current and scrolled to
        window.search_chats()
        QTest.keyClicks(window.chats.search, "balance")
        _wait(app, lambda: bool(window.finder.matches), 5)
        window.find_next()
        save("search", theme)
        window.chats.search.clear()
        pane.composer.setFocus()

        # Copy: the footer's Copy says Copied, the status bar what was copied
        bar.setValue(bar.maximum())
        _wait(app)
        window.actions_by_slot["copy_last_answer"].trigger()
        save("copied", theme)
        last = pane.conversation.messages[-1]
        detail = last.grab().toImage()
        detail.save(str(out / f"screenshot-copied-detail-{width}x{height}-{theme}.png"), "PNG", 0)

        # Models → Import GGUF files…: what was added, and what was skipped and why
        window.statusBar().clearMessage()  # the copy's line: not this picture's
        folder = root / "Downloads"
        folder.mkdir()
        files = [write_gguf(folder / "qwen2.5-7b-instruct-q4_k_m.gguf", n_tensors=3),
                 write_gguf(folder / "qwen2.5-0.5b-instruct-q8_0.gguf", n_tensors=1),
                 folder / "notes.gguf"]
        files[2].write_text("not a model")
        models_dialog = window.models_dialog()
        models_dialog.show()
        models_dialog.move(window.geometry().center() - models_dialog.rect().center())
        models_dialog.tabs.setCurrentIndex(1)
        models_dialog.import_paths(files)
        _wait(app, lambda d=models_dialog: d.import_box is not None and d.import_box.isVisible(), 30)
        box = models_dialog.import_box
        if box is not None:
            box.move(models_dialog.geometry().center() - box.rect().center())
        save("import", theme, models_dialog, box)
        if box is not None:
            box.close()
        models_dialog.close()
        for f in files:
            session.registry.remove(f)
            f.unlink()
        folder.rmdir()

        # the keyboard focus ring: Tab from the message box onto the next field (a button)
        window.activateWindow()  # back from the dialogs
        _wait(app, lambda: QApplication.activeWindow() is window, 5)
        window.statusBar().clearMessage()
        pane.composer.setFocus(Qt.FocusReason.OtherFocusReason)
        _wait(app, pane.composer.hasFocus, 5)
        QTest.keyClick(pane.composer, Qt.Key.Key_Tab)
        _wait(app)
        save("focus", theme)
        focused = QApplication.focusWidget()
        print("focus on", type(focused).__name__, getattr(focused, "text", lambda: "")())
        pane.composer.setFocus()
    window.close()
    session.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default=None, help="WxH: render this size here (the parent runs one child each)")
    args = ap.parse_args()
    if args.size:
        width, height = (int(v) for v in args.size.split("x"))
        render(args.out, width, height)
        return 0
    for width, height in SIZES:
        # a fixed, neutral folder (the Models dialog shows where files are): /tmp/specchat-screens/you
        tmp = Path(tempfile.gettempdir()) / "specchat-screens"
        if (tmp / MARK).exists():
            shutil.rmtree(tmp)  # this script's own, from a run before
        tmp.mkdir()
        (tmp / MARK).touch()
        try:
            config = Path(tmp) / "screen.json"
            config.write_text(json.dumps({"windowFrameMargins": False, "screens": [
                {"name": "screen", "x": 0, "y": 0, "width": width, "height": height,
                 "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
            home = Path(tmp) / "you"
            home.mkdir()
            env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={config}", HOME=str(home),
                       XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local" / "share"),
                       XDG_CACHE_HOME=str(home / ".cache"), HF_HUB_OFFLINE="1")
            subprocess.run([sys.executable, __file__, str(args.out), "--size", f"{width}x{height}"], env=env,
                           check=True)
        finally:
            shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
