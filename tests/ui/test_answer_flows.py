"""The window's answer flows on the fake pair: an answer belongs to nobody's widget.

Each test drives the real window, the real AnswerService, the real generation thread and
the real generation loop; only the model is a table (tests/helpers/fakes.py), so a flow takes
a fraction of a second.  Qt warnings are captured and must be empty: "Internal C++
object already deleted" and friends are exactly the faults these flows used to hit.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.services.answers import Phase

SLOW = FakeSpec(answer_tokens=200, decode_s=0.003)  # about half a second per answer: long enough to catch mid-stream


@pytest.fixture(autouse=True)
def _no_qt_warnings(qtlog):
    yield
    bad = [r.message for r in qtlog.records if r.type_name in ("QtWarningMsg", "QtCriticalMsg", "QtFatalMsg")
           and "propagateSizeHints" not in r.message]  # the offscreen platform's own note, not ours
    assert not bad, bad


def streamed(session, chat_id: int) -> str:
    live = session.answers.answer(chat_id)
    return live.content if live is not None else ""


def test_send_streams_an_answer_stores_it_done_with_a_footer(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=60))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Explain speculative decoding.")
    assert pane.send_button.text() == "Stop"
    wait_idle(qtbot, s)
    msgs = s.store.messages(pane.chat_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    answer = msgs[-1]
    assert answer.state == "done" and len(answer.content) == 60 and answer.stats.tokens == 60
    shown = pane.conversation.messages[-1]
    assert shown.content == answer.content
    assert "tok/s" in shown.footer and "draft accepted" in shown.footer and "stop: the model finished" in shown.footer  # the stop reason in words
    assert pane.send_button.text() == "Send"
    assert s.window.chats.items()[0][1] == "Explain speculative decoding."  # titled, no badge any more


def test_an_answer_goes_on_while_another_chat_is_open_and_is_whole_when_you_come_back(qtbot, fake_app):
    app = fake_app(SLOW)
    b = app.add_chat("chat B")
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    w, pane = s.window, s.window.pane
    assert pane.chat_id == a
    send(qtbot, pane, "A long answer please.")
    qtbot.waitUntil(lambda: len(streamed(s, a)) > 20, timeout=10_000)
    w.open_chat(b)
    assert pane.chat_id == b and pane.send_button.text() == "Send"
    assert pane.regen_button.isEnabled() is False or not s.store.messages(b)  # nothing to regenerate in B
    badges = dict(w.chats.items())
    assert badges[a].startswith("● ") and not badges[b].startswith("● ")
    at_switch = len(streamed(s, a))
    qtbot.waitUntil(lambda: len(streamed(s, a)) > at_switch + 20, timeout=10_000)  # it kept streaming
    w.open_chat(a)
    live = pane.conversation.messages[-1]
    assert live.role == "assistant" and len(live.content) >= at_switch + 20  # from where it is now
    assert pane.send_button.text() == "Stop"
    wait_idle(qtbot, s)
    stored = s.store.messages(a)[-1]
    assert stored.state == "done" and len(stored.content) == 200
    assert pane.conversation.messages[-1].content == stored.content
    assert pane.send_button.text() == "Send"
    assert not dict(w.chats.items())[a].startswith("● ")


def test_twenty_switches_during_one_answer_lose_nothing(qtbot, fake_app):
    app = fake_app(SLOW)
    b = app.add_chat("chat B")
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    send(qtbot, s.window.pane, "Go.")
    for i in range(20):
        s.window.open_chat(b if i % 2 == 0 else a)
        qtbot.wait(15)
    assert s.answers.answer(a) is not None, "the answer must still be running after the switches"
    wait_idle(qtbot, s)
    stored = s.store.messages(a)[-1]
    assert stored.state == "done" and len(stored.content) == 200 and stored.stats.tokens == 200
    s.window.open_chat(a)
    assert s.window.pane.conversation.messages[-1].content == stored.content


def test_deleting_a_generating_chat_stops_its_answer_first(qtbot, fake_app):
    app = fake_app(SLOW)
    b = app.add_chat("chat B")
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    send(qtbot, s.window.pane, "Go.")
    qtbot.waitUntil(lambda: len(streamed(s, a)) > 10, timeout=10_000)
    s.window.delete_chat(a)
    assert [c.id for c in s.store.list_chats()] == [b]
    assert s.window.pane.chat_id == b
    wait_idle(qtbot, s, timeout=5_000)  # the stop took effect within a round
    assert s.store.messages(b) == []
    # the app goes on: an answer in B
    send(qtbot, s.window.pane, "Now here.")
    wait_idle(qtbot, s)
    assert s.store.messages(b)[-1].state == "done"


def test_stop_keeps_the_partial_answer(qtbot, fake_app):
    app = fake_app(SLOW)
    a = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Go.")
    qtbot.waitUntil(lambda: len(streamed(s, a)) > 20, timeout=10_000)
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, s, timeout=5_000)
    last = s.store.messages(a)[-1]
    assert last.state == "stopped" and 20 < len(last.content) < 200
    assert last.stats.stop_reason == "cancelled"
    assert pane.conversation.messages[-1].content == last.content
    assert pane.send_button.text() == "Send"


def test_a_second_chat_waits_in_line_then_answers(qtbot, fake_app):
    app = fake_app(SLOW)
    b = app.add_chat("chat B")
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    w, pane = s.window, s.window.pane
    send(qtbot, pane, "First.")
    qtbot.waitUntil(lambda: len(streamed(s, a)) > 5, timeout=10_000)
    w.open_chat(b)
    send(qtbot, pane, "Second.")
    assert s.answers.busy_chats() == {a: Phase.STREAMING, b: Phase.WAITING}
    assert pane.send_button.text() == "Cancel"
    assert "waiting for the answer in another chat" in pane.conversation.messages[-1].footer
    assert dict(w.chats.items())[b].startswith("… ")
    assert [m.role for m in s.store.messages(b)] == ["user"]  # nothing stored for a waiting answer
    wait_idle(qtbot, s)
    assert s.store.messages(a)[-1].state == "done" and s.store.messages(b)[-1].state == "done"
    assert len(s.store.messages(b)[-1].content) == 200
    assert pane.conversation.messages[-1].content == s.store.messages(b)[-1].content


def test_cancelling_a_waiting_answer_stores_nothing(qtbot, fake_app):
    app = fake_app(SLOW)
    b = app.add_chat("chat B")
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    send(qtbot, s.window.pane, "First.")
    s.window.open_chat(b)
    send(qtbot, s.window.pane, "Second.")
    qtbot.mouseClick(s.window.pane.send_button, Qt.MouseButton.LeftButton)  # "Cancel"
    assert b not in s.answers.busy_chats()
    assert s.window.pane.conversation.messages[-1].role == "user"
    wait_idle(qtbot, s)
    assert [m.role for m in s.store.messages(b)] == ["user"]
    assert s.store.messages(a)[-1].state == "done"


def test_closing_mid_answer_keeps_the_partial_answer_and_a_restart_shows_it(qtbot, fake_app):
    app = fake_app(SLOW)
    a = app.add_chat()
    s = app.start(qtbot)
    send(qtbot, s.window.pane, "Go.")
    qtbot.waitUntil(lambda: len(streamed(s, a)) > 20, timeout=10_000)
    shown = streamed(s, a)
    app.stop()
    s = app.start(qtbot)
    last = s.store.messages(a)[-1]
    assert last.state == "stopped" and last.content.startswith(shown) and len(last.content) >= len(shown)
    assert s.window.pane.conversation.messages[-1].content == last.content
    assert s.window.pane.send_button.text() == "Send"


def test_regenerate_and_edit_replace_the_last_answer(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=40))
    a = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Question one.")
    wait_idle(qtbot, s)
    first = s.store.messages(a)[-1]
    qtbot.mouseClick(pane.regen_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, s)
    msgs = s.store.messages(a)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[-1].id != first.id
    assert msgs[-1].state == "done" and len(pane.conversation.messages) == 2
    pane.edit_last("Question two.")
    wait_idle(qtbot, s)
    msgs = s.store.messages(a)
    assert [m.content for m in msgs[:1]] == ["Question two."] and msgs[-1].state == "done"
    assert len(msgs) == 2 and len(pane.conversation.messages) == 2


def test_a_pair_that_fails_to_load_says_why_in_the_chat(qtbot, fake_app):
    app = fake_app(FakeSpec(fail_load="fake-target.gguf: not enough memory for the KV cache"))
    a = app.add_chat()
    s = app.start(qtbot)
    send(qtbot, s.window.pane, "Hello?")
    wait_idle(qtbot, s)
    last = s.store.messages(a)[-1]
    assert last.role == "assistant" and last.state == "error"
    assert "not enough memory" in s.window.pane.conversation.messages[-1].footer
    assert "not enough memory" in s.window.pane.notice.text()
    assert s.window.pane.send_button.text() == "Send"


def test_switching_chats_never_loads_another_pair_while_an_answer_streams(qtbot, fake_app):
    app = fake_app(SLOW)
    other_target = app.root / "other-target.gguf"
    other_target.touch()
    b = app.add_chat("chat B", target=other_target)
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    qtbot.waitUntil(lambda: len(app.factory.loads) == 1, timeout=5_000)  # chat A's pair, preloaded
    send(qtbot, s.window.pane, "Go.")
    qtbot.waitUntil(lambda: len(streamed(s, a)) > 5, timeout=10_000)
    s.window.open_chat(b)
    qtbot.wait(100)
    assert len(app.factory.loads) == 1, "opening B must not load its pair under A's answer"
    wait_idle(qtbot, s)
    assert s.store.messages(a)[-1].state == "done"
    qtbot.waitUntil(lambda: len(app.factory.loads) == 2, timeout=5_000)  # idle now: B's pair loads
    assert app.factory.loads[-1].target == other_target


def test_the_draft_tint_survives_a_restart(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=120, miss_every=5))
    a = app.add_chat()
    s = app.start(qtbot)
    send(qtbot, s.window.pane, "Tint me.")
    wait_idle(qtbot, s)
    live_segments = s.window.pane.conversation.messages[-1].segments
    assert any(d for _, d in live_segments) and not all(d for _, d in live_segments)
    app.stop()
    s = app.start(qtbot)
    s.window.set_tint(True)
    shown = s.window.pane.conversation.messages[-1]
    assert shown.segments == s.store.messages(a)[-1].content_segments()
    assert "".join(t for t, _ in shown.segments) == shown.content
    assert [d for _, d in shown.segments] == [d for _, d in _merge(live_segments)]
    assert "background:" in shown.body.text()  # painted tinted


def _merge(segments):
    out = []
    for text, draft in segments:
        if out and out[-1][1] == draft:
            out[-1] = (out[-1][0] + text, draft)
        else:
            out.append((text, draft))
    return out
