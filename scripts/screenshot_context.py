"""Render issue 38 item 5 in the app, light and dark, at 1280x720 and 1920x1080:
the context error under "Stop at the limit" with its remedy in place (switch this chat to a rolling
window, or open Chat settings at "Past the context"), and a rolling-window chat whose transcript dims
the messages its latest answer's prompt left out.

    python scripts/screenshot_context.py docs

writes docs/screenshot-context-remedy-<w>x<h>-<theme>.png and docs/screenshot-context-marks-<w>x<h>-<theme>.png.
The chats run on the fake pair of the tests (no model is loaded; its context holds 512 tokens, one per
byte), in a temporary profile: no path of this machine shows.
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

SIZES = ((1280, 720), (1920, 1080))
LONG = "Here is the log of last night's run:\n" + "worker 3 restarted after a timeout on the queue\n" * 14


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs")
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from helpers.fakes import FakePairFactory, FakeSpec
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.ui.session import AppSession

    app = QApplication([])
    tmp = Path(tempfile.mkdtemp())

    def wait(until, timeout_s: float) -> None:  # noqa: ANN001
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not until():
            app.processEvents()
            time.sleep(0.02)

    profile = Profile.at(tmp / "profile")
    target, draft = tmp / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", tmp / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    target.touch()
    draft.touch()
    store = open_store(profile.database)
    base = ChatSettings(target=target, draft=draft, speculation="draft", reasoning=False, max_tokens=80)
    stop = store.create_chat("Why did the workers restart?", base.replaced(context_policy="stop")).id
    rolling = store.create_chat("Notes on the draft loop", base.replaced(context_policy="rolling_window",
                                                                          system_prompt="Be brief.")).id
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                         pair_factory=FakePairFactory(FakeSpec(answer_tokens=40, n_ctx=512)), nice=0)
    window = session.window
    pane = window.pane

    def send(chat: int, text: str) -> None:
        window.open_chat(chat)
        pane.composer.setPlainText(text)
        QTest.keyClick(pane.composer, Qt.Key.Key_Return)
        wait(lambda: not session.answers.busy_chats(), 30)

    window.resize(*SIZES[0])
    window.show()
    for i, q in enumerate(("How does the draft model propose tokens?", "And how are they verified?",
                           "What happens when a draft token is rejected?", "Why does acceptance drop in prose?",
                           "How is K chosen each round?", "What does the lookup drafter do?",
                           "When does auto turn speculation off?")):
        send(rolling, f"{i + 1}. {q}")
    send(stop, "Which worker restarted first?")
    send(stop, LONG)
    wait(lambda: pane.notice.isVisible(), 10)
    remedy = (pane._notice_text, pane._notice_links)  # the line as the error left it (a switch of chats clears it)

    for w, h in SIZES:
        window.resize(w, h)
        for theme in ("light", "dark"):
            window.set_theme(theme)
            window.open_chat(stop)
            pane.show_notice(remedy[0], error=True, links=remedy[1])
            wait(lambda: False, 0.6)
            window.grab().save(str(out / f"screenshot-context-remedy-{w}x{h}-{theme}.png"))
            window.open_chat(rolling)
            wait(lambda: False, 0.4)
            first_sent = next((m for m in pane.conversation.messages if not m.not_sent), None)
            marked = [m for m in pane.conversation.messages if m.not_sent]
            if marked:  # the boundary between what was left out and what was sent
                pane.conversation.show_message(marked[max(0, len(marked) - 3)])
            wait(lambda: False, 0.6)
            assert first_sent is not None and marked, "the rolling window left nothing out"
            window.grab().save(str(out / f"screenshot-context-marks-{w}x{h}-{theme}.png"))
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
