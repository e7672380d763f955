"""Closing the app returns within 2 s in every state, and keeps what was there."""

from __future__ import annotations

import time

import pytest
from app_driver import FakeApp, send, wait_idle

from fakes import SLOW_LATER, FakeSpec, TemplateFactory
from specchat.engine import chat
from specchat.profile import Profile
from specchat.store import open_store

CLOSE_S = 2.0  # the promise: the app's close returns within 2 s in every state


@pytest.fixture(autouse=True)
def _no_render_deadline(monkeypatch):
    """The render deadline (2 s) would end a looping template by itself: only a cancel may here."""
    monkeypatch.setattr(chat, "RENDER_SECONDS", 600.0)


def test_closing_the_app_while_a_template_renders(qtbot, tmp_path):
    """The whole app: the first answer streams, the second hangs in the template; closing the
    window returns within 2 s and the chat keeps the first exchange and the question."""
    app = FakeApp(tmp_path, TemplateFactory(SLOW_LATER, FakeSpec(answer_tokens=40)))
    chat_id = app.add_chat()
    try:
        s = app.start(qtbot)
        send(qtbot, s.window.pane, "First question.")
        wait_idle(qtbot, s)
        send(qtbot, s.window.pane, "Second question.")
        qtbot.waitUntil(lambda: s.answers.current is not None and s.answers.current.writer is not None,
                        timeout=5_000)
        qtbot.wait(300)  # rendering the looping template
        t0 = time.monotonic()
        app.stop()
        took = time.monotonic() - t0
    finally:
        app.stop()
    assert took < CLOSE_S, f"closing took {took:.1f} s"
    store = open_store(Profile.at(tmp_path).database)
    try:
        msgs = store.messages(chat_id)
        assert [(m.role, m.state) for m in msgs] == [("user", None), ("assistant", "done"), ("user", None),
                                                    ("assistant", "stopped")]
        assert len(msgs[1].content) == 40 and msgs[2].content == "Second question."
    finally:
        store.close()
