"""Regenerate keeps versions, any user message edits in place: the window over the fake pair."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from helpers.app_driver import send, wait_idle
from helpers.fakes import EOT, FakeSpec


@pytest.fixture(autouse=True)
def _no_qt_warnings(qtlog):
    yield
    bad = [r.message for r in qtlog.records if r.type_name in ("QtWarningMsg", "QtCriticalMsg", "QtFatalMsg")
           and "propagateSizeHints" not in r.message]
    assert not bad, bad


def answer_length(app, tokens: int) -> None:
    """The loaded fake pair answers with ``tokens`` tokens from now on (the worker is idle)."""
    pair = app.factory.pairs[-1]
    for model in (pair.target, pair.draft):
        model.spec = replace(model.spec, answer_tokens=tokens)


def prompt_text(app) -> str:
    """What the fake target read last: its context as text, the end of a turn as <|im_end|>."""
    return "".join("<|im_end|>" if t == EOT else chr(t) if t < 256 else "<|im_start|>"
                   for t in app.factory.pairs[-1].target.tokens)


def user_widgets(pane):
    return [w for w in pane.conversation.messages if w.role == "user"]


def page(w, number: int) -> None:
    w.footer_label.linkActivated.emit(f"version:{number}")  # what a click on ‹ or › sends


def test_regenerate_twice_pages_back_to_the_first_answer_and_goes_on_from_it(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=30))
    chat = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Question.")
    wait_idle(qtbot, s)
    answers = [s.store.messages(chat)[-1].content]
    for tokens in (50, 70):
        answer_length(app, tokens)
        qtbot.mouseClick(pane.regen_button, Qt.MouseButton.LeftButton)
        wait_idle(qtbot, s)
        answers.append(s.store.messages(chat)[-1].content)
    assert [len(a) for a in answers] == [30, 50, 70]
    question = user_widgets(pane)[0]
    assert question.version == (3, 3) and "3/3" in question.footer_label.text()
    assert pane.conversation.messages[-1].content == answers[2]

    page(question, 2)
    page(user_widgets(pane)[0], 1)
    question = user_widgets(pane)[0]
    assert question.version == (1, 3) and "1/3" in question.footer_label.text()
    assert [w.content for w in pane.conversation.messages] == ["Question.", answers[0]]
    assert [m.content for m in s.store.messages(chat)] == ["Question.", answers[0]]

    answer_length(app, 20)
    send(qtbot, pane, "And then?")
    wait_idle(qtbot, s)
    context = prompt_text(app)
    assert f"{answers[0]}<|im_end|>" in context  # the answer on screen went to the model
    assert answers[2] not in context and answers[1] not in context
    assert [w.content for w in pane.conversation.messages][:3] == ["Question.", answers[0], "And then?"]


def test_editing_the_first_of_three_questions_in_place_keeps_the_old_conversation(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=30))
    chat = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    for text in ("First?", "Second?", "Third?"):
        send(qtbot, pane, text)
        wait_idle(qtbot, s)
    before = s.store.messages(chat)
    first = user_widgets(pane)[0]
    first.footer_label.linkActivated.emit("edit")  # the Edit link under the first question
    assert first.editor is not None and first.editor.toPlainText() == "First?"
    assert not first.markdown_view.isVisible()  # the editor stands where the text was
    first.editor.setPlainText("First, rephrased?")
    qtbot.mouseClick(first.save_button, Qt.MouseButton.LeftButton)
    assert pane.generating  # asked again at once
    wait_idle(qtbot, s)
    now = s.store.messages(pane.chat_id)
    assert [(m.role, m.content) for m in now[:1]] == [("user", "First, rephrased?")]
    assert len(now) == 2 and now[1].state == "done" and len(now[1].content) == 30
    assert pane.conversation.messages[-1].content == now[1].content  # the new answer, streamed and shown
    first = user_widgets(pane)[0]
    assert first.version == (2, 2) and first.editor is None

    page(first, 1)
    assert s.store.messages(chat) == before  # the whole old conversation, as it was
    assert [w.content for w in pane.conversation.messages] == [m.content for m in before]
    page(user_widgets(pane)[0], 2)
    assert [m.content for m in s.store.messages(chat)] == [m.content for m in now]


def test_a_long_message_edits_wrapped_to_the_pane(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=10))
    app.add_chat()
    s = app.start(qtbot)
    s.window.resize(1920, 1080)
    pane = s.window.pane
    long_text = " ".join(f"word{i}" for i in range(400))  # about 3,000 characters on one line
    send(qtbot, pane, long_text)
    wait_idle(qtbot, s)
    pane.edit_button.click()  # "Edit last": the same editor, in place
    w = user_widgets(pane)[0]
    editor = w.editor
    assert editor is not None
    qtbot.waitUntil(lambda: editor.document().size().height() > 5)
    s.window.resize(1280, 720)  # narrower while editing: the text wraps again to the new width
    qtbot.waitUntil(lambda: editor.document().size().height() > 5)  # laid out: wrapped into lines
    assert editor.lineWrapMode() == editor.LineWrapMode.WidgetWidth
    assert not editor.horizontalScrollBar().isVisible() and editor.horizontalScrollBar().maximum() == 0
    assert editor.width() <= pane.conversation.viewport().width()
    qtbot.waitUntil(lambda: editor.height() > 10 * editor.fontMetrics().lineSpacing())
    assert editor.document().size().width() <= editor.viewport().width()  # no line runs past the edge
    one_line = editor.fontMetrics().lineSpacing()
    assert editor.height() > 10 * one_line  # it grew with its text...
    assert editor.height() < 16 * one_line  # ...up to a limit, then scrolls
    assert editor.verticalScrollBar().maximum() > 0


def test_esc_cancels_ctrl_enter_saves(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=10))
    chat = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Original.")
    wait_idle(qtbot, s)
    w = user_widgets(pane)[0]
    w.start_edit()
    w.editor.setPlainText("Changed.")
    qtbot.keyClick(w.editor, Qt.Key.Key_Escape)
    assert w.editor is None and w.markdown_view.isVisibleTo(w)
    assert [m.content for m in s.store.messages(chat)][0] == "Original." and not pane.generating
    w.start_edit()
    w.editor.setPlainText("Changed.")
    qtbot.keyClick(w.editor, Qt.Key.Key_Return)  # a plain Enter is a new line in the editor
    assert w.editor.toPlainText().count("\n") == 1 and not pane.generating
    qtbot.keyClick(w.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, s)
    assert [m.content for m in s.store.messages(chat)][0] == "Changed."
    assert user_widgets(pane)[0].version == (2, 2)


def test_edit_and_the_pager_are_off_while_the_chat_generates(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=10))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "One.")
    wait_idle(qtbot, s)
    pane.regenerate()
    wait_idle(qtbot, s)
    pair = app.factory.pairs[-1]
    for model in (pair.target, pair.draft):
        model.spec = replace(model.spec, answer_tokens=200, decode_s=0.003)  # long enough to act mid-stream
    user_widgets(pane)[0].start_edit()  # an editor open when the chat starts generating
    send(qtbot, pane, "Two.")
    assert pane.generating
    first = user_widgets(pane)[0]
    assert not first.actions_enabled and not first.save_button.isEnabled()
    first.editor.setPlainText("sneaky")
    qtbot.keyClick(first.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # refused
    qtbot.keyClick(first.editor, Qt.Key.Key_Escape)  # cancel still works
    assert first.editor is None
    assert "href='version:" not in first.footer_label.text() and "2/2" in first.footer_label.text()
    assert "href='edit'" not in first.footer_label.text() + user_widgets(pane)[1].footer_label.text()
    page(first, 1)  # a stale click changes nothing
    assert [m.content for m in s.store.messages(pane.chat_id)][:1] == ["One."] and first.version == (2, 2)
    assert pane.generating
    wait_idle(qtbot, s)
    assert first.actions_enabled
    assert "href='version:1'" in first.footer_label.text() and "href='edit'" in user_widgets(pane)[1].footer_label.text()
    assert [m.content for m in s.store.messages(pane.chat_id)][:1] == ["One."]
    assert s.store.version_counts(pane.chat_id) == {user_widgets(pane)[0].message_id: 2}


def test_switching_chats_mid_edit_loses_nothing_stored(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=10))
    b = app.add_chat("chat B")
    a = app.add_chat("chat A")
    s = app.start(qtbot)
    w, pane = s.window, s.window.pane
    send(qtbot, pane, "Keep me.")
    wait_idle(qtbot, s)
    before = s.store.messages(a)
    user_widgets(pane)[0].start_edit()
    user_widgets(pane)[0].editor.setPlainText("half-typed")
    w.open_chat(b)
    w.open_chat(a)
    assert s.store.messages(a) == before and s.store.version_counts(a) == {}
    assert user_widgets(pane)[0].editor is None and user_widgets(pane)[0].content == "Keep me."
