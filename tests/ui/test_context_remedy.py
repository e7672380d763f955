"""A chat past its context, in the window (issue 38, item 5).

Under "Stop at the limit" the error names the chat setting "Past the context" and offers its remedy in
place: one click switches this chat to a rolling window (stored) and the next question is answered.
Under a rolling window the transcript marks the messages the latest answer's prompt left out, as the
backend's own fit left them out (checked against the text the fake pair was actually sent), and the
marks come back after a switch of chats and after a restart.
"""

from __future__ import annotations

import re

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.ui.message_widget import NOT_SENT
from specchat.ui.settings_dialogs import ChatSettingsDialog

N_CTX = 512
LONG = "paste: " + "lorem ipsum dolor " * 40  # 727 bytes: the fake pair's tokens are bytes, past 512


def _links(label) -> dict[str, str]:
    """The notice's links: {text: href}."""
    return {text: href for href, text in re.findall(r"<a href='([^']*)'[^>]*>([^<]*)</a>", label.text())}


def test_the_context_error_names_the_setting_and_one_click_switches_the_chat_and_the_next_send_works(
        qtbot, fake_app, monkeypatch):
    app = fake_app(FakeSpec(answer_tokens=30, n_ctx=N_CTX))
    chat = app.add_chat(max_tokens=60, context_policy="stop")
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, LONG)
    wait_idle(qtbot, s)
    assert s.store.messages(chat)[-1].state == "error"
    qtbot.waitUntil(lambda: pane.notice.isVisible(), timeout=10_000)
    text = pane.notice.text()
    assert "“Past the context” is “Stop at the limit”" in text and f"the context holds {N_CTX}" in text
    links = _links(pane.notice)
    assert set(links) == {"Use “Rolling window” for this chat", "Chat settings… → Past the context"}
    other = s.window.commands.new_chat(s.store.get_chat(chat).settings).id  # away and back: offered again
    s.window.open_chat(other)
    assert not pane.notice.isVisible()
    s.window.open_chat(chat)
    assert _links(pane.notice) == links and "“Past the context” is “Stop at the limit”" in pane.notice.text()

    opened = []  # the window opens Chat settings… at "Past the context" (the dialog, not run modal here)
    monkeypatch.setattr(ChatSettingsDialog, "exec", lambda dialog: opened.append(dialog.focusWidget()) or 0)
    pane.notice.linkActivated.emit(links["Chat settings… → Past the context"])
    assert len(opened) == 1 and opened[0].toolTip().startswith("What is sent once the chat outgrows the context")

    pane.notice.linkActivated.emit(links["Use “Rolling window” for this chat"])  # the click
    assert s.store.get_chat(chat).settings.context_policy == "rolling_window"  # stored, for this chat
    assert "“Past the context” is now “Rolling window” for this chat" in pane.notice.text()
    send(qtbot, pane, "and a short question?")
    wait_idle(qtbot, s)
    last = s.store.messages(chat)[-1]
    assert last.state == "done" and last.stats.tokens == 30 and last.stats.left_out == 1  # the long question went (its failed answer had no text)

    app.stop()  # and it stays so
    s = app.start(qtbot)
    s.window.open_chat(chat)
    assert s.store.get_chat(chat).settings.context_policy == "rolling_window"
    assert not _links(s.window.pane.notice)  # nothing left to remedy


def test_the_remedy_is_offered_only_where_it_helps(qtbot, fake_app):
    """A question that alone cannot fit under a rolling window: the error says so, with no switch offered."""
    app = fake_app(FakeSpec(answer_tokens=30, n_ctx=N_CTX))
    app.add_chat(max_tokens=60, context_policy="rolling_window")
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, LONG)
    wait_idle(qtbot, s)
    qtbot.waitUntil(lambda: pane.notice.isVisible(), timeout=10_000)
    assert "too long" in pane.notice.text() and not _links(pane.notice)


def _marked(pane) -> dict[int, bool]:
    return {w.message_id: w.not_sent for w in pane.conversation.messages}


def test_a_rolling_window_marks_the_messages_it_did_not_send_and_the_marks_survive(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=60, n_ctx=N_CTX))
    chat = app.add_chat(max_tokens=80, context_policy="rolling_window", system_prompt="Be brief.")
    s = app.start(qtbot)
    pane = s.window.pane
    questions = [f"question {i}: tell me more about the draft model and the loop" for i in range(8)]
    for q in questions:
        send(qtbot, pane, q)
        wait_idle(qtbot, s)
    # what the fake target was sent for the last answer (its tokens are the prompt's bytes, then the answer's)
    sent = bytes(t for t in app.factory.pairs[-1].target.tokens if t < 256).decode()
    stored = s.store.messages(chat)
    users = [m for m in stored if m.role == "user"]
    left = {m.id for m in users if m.content not in sent}
    assert left and users[-1].id not in left  # some were left out; the question answered never is
    # an answer is left out with its question (whole turns)
    left |= {a.id for q, a in zip(stored[::2], stored[1::2], strict=True) if q.id in left}
    assert len(left) == stored[-1].stats.left_out

    def check(pane) -> None:
        marks = _marked(pane)
        assert marks == {m.id: m.id in left for m in stored}  # the left out marked, the sent not
        w = next(w for w in pane.conversation.messages if w.not_sent)
        assert not w.not_sent_label.isHidden() and w.not_sent_label.text() == NOT_SENT and w.graphicsEffect()

    check(pane)
    other = s.window.commands.new_chat(s.store.get_chat(chat).settings).id  # switch away and back
    s.window.open_chat(other)
    assert not any(_marked(pane).values())
    s.window.open_chat(chat)
    check(pane)
    app.stop()  # and after a restart, from what is stored
    s = app.start(qtbot)
    s.window.open_chat(chat)
    check(s.window.pane)
