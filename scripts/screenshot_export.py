"""Render the chats' Export, Import and Restore dialogs over the window at 1280x720, light and dark
(issue 36's screenshots).

    python scripts/screenshot_export.py docs/

writes docs/screenshot-export-{export,import,restore}-{light,dark}.png.  The window holds a few chats, one
of them imported from the tests' ChatGPT export; the dialog is drawn where Qt would centre it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy)

QUESTION = "How do I sort a list of dicts by a key, newest first?"
ANSWER = ("Use `sorted` with a `key` and `reverse=True`:\n\n```python\nrows = sorted(rows, key=lambda r: r[\"created\"], "
          "reverse=True)\n```\n\n`list.sort` does the same in place.")


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "docs"
    from PySide6.QtCore import QPoint, QRect, Qt
    from PySide6.QtGui import QPainter, QPalette
    from PySide6.QtWidgets import QApplication

    from helpers.fakes import FakePairFactory, FakeSpec
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, exchange, open_store
    from specchat.ui.session import AppSession
    from specchat.ui.theme import apply_theme

    app = QApplication([])
    apply_theme("light")
    root = Path(tempfile.mkdtemp())
    profile = Profile.at(root)
    store = open_store(profile.database)
    exchange.import_file(store, HERE.parent / "tests" / "store" / "data" / "chatgpt-conversations.json")
    chat = store.create_chat("Sorting dicts by date", ChatSettings(speculation="draft"))
    store.add_message(chat.id, "user", QUESTION)
    store.add_message(chat.id, "assistant", ANSWER, reasoning="They want newest first: reverse=True.")
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                         pair_factory=FakePairFactory(FakeSpec()), nice=0)
    window = session.window
    window.resize(1280, 720)
    window.show()
    window.open_chat(chat.id)
    window.commands.back_up(reason="manual")
    window.commands.back_up(reason="before-v6")

    def settle(seconds: float = 0.4) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    def shoot(name: str, theme: str) -> None:
        dialog = window.files.dialog
        assert dialog is not None
        settle()
        shot = window.grab()
        painter = QPainter(shot)
        picture = dialog.grab()
        bar = 30  # a title bar as a window manager would draw it (offscreen has none)
        x, y = (shot.width() - picture.width()) // 2, (shot.height() - picture.height()) // 3
        palette = dialog.palette()
        painter.fillRect(QRect(x, y - bar, picture.width(), bar), palette.color(QPalette.ColorRole.Mid))
        painter.setPen(palette.color(QPalette.ColorRole.WindowText))
        painter.drawText(QRect(x, y - bar, picture.width(), bar), Qt.AlignmentFlag.AlignCenter, dialog.windowTitle())
        painter.drawPixmap(QPoint(x, y), picture)
        painter.setPen(palette.color(QPalette.ColorRole.Dark))
        painter.drawRect(QRect(x - 1, y - bar - 1, picture.width() + 1, picture.height() + bar + 1))
        painter.end()
        path = out / f"screenshot-export-{name}-{theme}.png"
        shot.save(str(path))
        print(path)
        dialog.close()

    for theme in ("light", "dark"):
        window.set_theme(theme)
        settle()
        window.export_chat()
        shoot("export", theme)
        window.import_chats()
        window.files.dialog.path.setText(str(Path.home() / "Downloads" / "conversations.json"))
        shoot("import", theme)
        window.restore_backup()
        shoot("restore", theme)
    window.close()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
