"""Render issue 38's first window and wide code, light and dark, on a 1280x720 and a 1920x1080 screen:

* the first window of a newcomer (no model, no chat): sized to the screen, the empty state's way to a pair
  first, the telemetry plots collapsed;
* a chat whose question and answer hold a 300-character code line between paragraphs: the code scrolls
  sideways in its own block, the prose, footers and Copy links stay in the view.

    python scripts/screenshot_first_window.py docs

writes docs/screenshot-first-window-{1280x720,1920x1080}-{light,dark}.png and
docs/screenshot-wide-code-{1280x720,1920x1080}-{light,dark}.png.  Each screen is the offscreen platform's
own (a Qt config file gives it its size), so the window sizes itself as it does on a real one; the image is
the whole screen, the window drawn where it opened under a title bar as tall as the frame it allows for.
The chats run on the fake pair of the tests (no model is loaded); the answer is stored text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCREENS = ((1280, 720), (1920, 1080))
DESKTOP = "#2e3440"  # the screen around the window
TITLE_BAR = ("#dcdcdc", "#1e1e1e", "#3a3a3a", "#e6e6e6")  # light bar, its text; dark bar, its text

LINE = "config = load(" + ", ".join(f"option_{i}=value_{i}" for i in range(30))
LINE = (LINE + " " * 300)[:299] + ")"  # 300 characters, as tests/ui/test_wide_code.py
QUESTION = f"Why does this call take a second?\n\n```python\n{LINE}\n```"
ANSWER = f"""Most of the second goes into the thirty options: each one is parsed and checked on its own, the \
call below is on one line as your code has it.

```python
{LINE}
```

Load the options once and pass the loaded set around instead; the prose here wraps at the width of the \
view whatever the width of the code above it, and the code scrolls sideways in its own block."""


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--screen":
        return child(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs").resolve()
    for width, height in SCREENS:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "screen.json"
            config.write_text(json.dumps({"screens": [{"name": f"{width}x{height}", "x": 0, "y": 0,
                                                        "width": width, "height": height, "logicalDpi": 96,
                                                        "logicalBaseDpi": 96, "dpr": 1}]}))
            env = os.environ | {"QT_QPA_PLATFORM": f"offscreen:configfile={config}"}
            subprocess.run([sys.executable, __file__, "--screen", str(width), str(height), str(out)], env=env,
                           check=True)
    return 0


def child(width: int, height: int, out: Path) -> int:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtGui import QColor, QFont, QImage, QPainter
    from PySide6.QtWidgets import QApplication

    import specchat  # noqa: F401  (llama.cpp's library before numpy)
    from helpers.fakes import FakePairFactory, FakeSpec
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.ui.session import AppSession
    from specchat.ui.window_geometry import FRAME_ALLOWANCE

    app = QApplication([])
    assert app.primaryScreen().size().width() == width, "the screen's config file was not read"
    size = f"{width}x{height}"

    def wait(until, timeout_s: float) -> None:  # noqa: ANN001
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not until():
            app.processEvents()
            time.sleep(0.02)

    def shoot(window, name: str, theme: str) -> None:  # noqa: ANN001
        """The screen: the window where it opened, under a title bar in its frame's allowance."""
        screen = QImage(width, height, QImage.Format.Format_RGB32)
        screen.fill(QColor(DESKTOP))
        g = window.geometry()
        p = QPainter(screen)
        bar = QRect(g.x() - FRAME_ALLOWANCE.left(), g.y() - FRAME_ALLOWANCE.top(),
                    g.width() + FRAME_ALLOWANCE.left() + FRAME_ALLOWANCE.right(), FRAME_ALLOWANCE.top())
        back, text = TITLE_BAR[:2] if theme == "light" else TITLE_BAR[2:]
        p.fillRect(bar.adjusted(0, 0, 0, g.height() + FRAME_ALLOWANCE.bottom()), QColor(back))
        p.setPen(QColor(text))
        font = QFont(window.font())
        font.setBold(True)
        p.setFont(font)
        p.drawText(bar, Qt.AlignmentFlag.AlignCenter, window.windowTitle())
        p.drawImage(g.topLeft(), window.grab().toImage())
        p.end()
        screen.save(str(out / f"screenshot-{name}-{size}-{theme}.png"))

    # 1. a newcomer's first window: no model, no chat
    tmp = Path(tempfile.mkdtemp())
    profile = Profile.at(tmp / "newcomer")
    session = AppSession(open_store(profile.database), AppConfig(profile.config_file), Registry(profile.registry),
                         profile=profile, pair_factory=FakePairFactory(FakeSpec()), nice=0)
    window = session.window
    window.show()
    for theme in ("light", "dark"):
        window.set_theme(theme)
        wait(lambda: False, 0.6)
        assert window.pane.empty_state.isVisible() and window.telemetry.isHidden()
        shoot(window, "first-window", theme)
    session.close()
    window.close()

    # 2. a chat with a 300-character code line in the question and in the answer
    profile = Profile.at(tmp / "wide")
    target = tmp / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    draft = tmp / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    for f in (target, draft):
        f.touch()
    store = open_store(profile.database)
    chat = store.create_chat("Why is load() slow", ChatSettings(target=target, draft=draft, speculation="draft")).id
    store.add_message(chat, "user", QUESTION)
    store.add_message(chat, "assistant", ANSWER)
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                         pair_factory=FakePairFactory(FakeSpec(answer_tokens=10)), nice=0)
    window = session.window
    window.show()
    window.open_chat(chat)
    wait(lambda: session.answers.pair_info is not None, 20)
    for theme in ("light", "dark"):
        window.set_theme(theme)
        wait(lambda: False, 0.6)
        shoot(window, "wide-code", theme)
    session.close()
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
