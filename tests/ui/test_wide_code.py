"""Issue 38: one long code line no longer widens the whole transcript.

A word-wrapped QLabel's minimum width is its longest line that cannot wrap, and a ``<pre>`` line never
wraps: a 300-character code line made its label ~2,200 px wide at the least, the conversation's column
(a scroll area that never shrinks its widget below the widget's minimum, with no horizontal scroll bar)
took that width, and the prose, the footers, the Copy links and the inline editor's Save & resend lay past
the right edge.  Now each block scrolls sideways on its own (ui/block_view.py) and the rest keeps the
view's width, at 834 px (the window's least), 1280 and 1920.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

from specchat.ui.message_widget import MessageWidget

LINE = "config = load(" + ", ".join(f"option_{i}=value_{i}" for i in range(30))
LINE = (LINE + " " * 300)[:299] + ")"
PROSE = "The call below is on one line, as the tool printed it; the prose around it wraps at the view's width."
ANSWER = f"{PROSE}\n\n```python\n{LINE}\n```\n\nAfter the code, more prose that wraps as any paragraph does."
QUESTION = f"Why is this slow?\n\n```\n{LINE}\n```"


def right_edge_in(w: QWidget, viewport: QWidget) -> int:
    return w.mapTo(viewport, QPoint(w.width(), 0)).x()


def within(w: QWidget, viewport: QWidget) -> bool:
    """``w`` lies inside the view's width (its left edge at 0 or more, its right edge at most the view's)."""
    return w.mapTo(viewport, QPoint(0, 0)).x() >= 0 and right_edge_in(w, viewport) <= viewport.width()


def settle(qtbot, conversation) -> None:  # noqa: ANN001
    """Let the layout settle in the event loop (the window's resize, then the column's, then the messages'):
    until nothing has moved for a few frames.  (A check on the way can pass on a layout not done yet.)"""
    last, still = None, 0
    for _ in range(100):
        qtbot.wait(20)
        now = (conversation.widget().size(), tuple(m.geometry() for m in conversation.messages))
        still = still + 1 if now == last else 0
        if still >= 3:
            return
        last = now


def test_the_long_line_is_300_characters():
    assert len(LINE) == 300 and " " not in LINE.replace(", ", ",").replace(" = ", "=")[:20]


@pytest.mark.parametrize("width", [834, 1280, 1920])
def test_a_300_character_code_line_scrolls_in_its_block_and_nothing_else_is_wider_than_the_view(
        qtbot, fake_app, width):
    app = fake_app()
    chat = app.add_chat()
    s = app.start(qtbot)
    s.store.add_message(chat, "user", QUESTION)
    s.store.add_message(chat, "assistant", ANSWER)
    w = s.window
    w.open_chat(chat)
    w.telemetry.setVisible(width > 834)  # beside the chat where there is room, as once an answer has rounds
    w.resize(width, 720)
    qtbot.waitUntil(lambda: w.width() == width)
    conversation = w.pane.conversation
    viewport = conversation.viewport()
    assert len(conversation.messages) == 2
    settle(qtbot, conversation)
    assert conversation.widget().width() == viewport.width()
    for message in conversation.messages:
        assert within(message, viewport)
        assert within(message.footer_label, viewport) and "Copy" in message.footer_label.text()
        code = [v for v in message.markdown_view.views() if v.isVisibleTo(message) and "<pre" in v.text()]
        prose = [v for v in message.markdown_view.views() if v.isVisibleTo(message) and "<pre" not in v.text()]
        assert len(code) == 1 and prose
        for view in prose:  # prose wraps at the view's width: no scroll bar of its own
            assert within(view, viewport) and not view.scrolls and within(view.label, viewport)
        block = code[0]
        # the code block scrolls sideways on its own: its text is wider than the view, its block is not
        assert within(block, viewport) and block.scrolls and block.bar is not None
        assert block.label.width() > viewport.width() and block.bar.maximum() == block.label.width() - block.width()
        assert within(block.bar, viewport)
        assert block.copy_line is not None and within(block.copy_line, viewport)  # Copy stays in view
        assert "copy:0" in block.copy_line.text()
        block.bar.setValue(block.bar.maximum())  # to the end of the line
        assert block.label.x() == -block.bar.maximum()
    # the inline editor of the question: wraps the long line, its buttons in view
    question = conversation.messages[0]
    question.start_edit()
    qtbot.waitUntil(lambda: question.save_button is not None and question.save_button.isVisible())
    settle(qtbot, conversation)
    assert question.editor is not None and within(question.editor, viewport)
    assert within(question.save_button, viewport)


def test_a_code_blocks_copy_line_copies_its_code(qtbot):
    w = MessageWidget("assistant", ANSWER)
    qtbot.addWidget(w)
    w.resize(600, 400)
    copied: list[str] = []
    w.copyRequested.connect(copied.append)
    line = next(v.copy_line for v in w.markdown_view.views() if v.copy_line is not None)
    line.linkActivated.emit("copy:0")
    assert copied == [LINE + "\n"] and QGuiApplication.clipboard().text() == LINE + "\n"


def test_a_streaming_code_line_never_widens_the_message(qtbot):
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.resize(600, 400)
    w.show()
    w.streaming = True
    for n in range(0, len(LINE) + 1, 60):  # the line grows in the tail, a frame at a time
        w.content = f"{PROSE}\n\n```python\n{LINE[:n]}"
        w.refresh()
        assert w.minimumSizeHint().width() < 300
    qtbot.waitUntil(lambda: any(v.scrolls for v in w.markdown_view.views()))
    w.set_content(ANSWER)
    assert w.minimumSizeHint().width() < 300
    qtbot.waitUntil(lambda: any(v.scrolls for v in w.markdown_view.views()))


def test_a_long_url_in_prose_scrolls_its_paragraph_alone(qtbot):
    url = "https://example.org/" + "a" * 280
    w = MessageWidget("assistant", f"See {url} for the details.\n\nA short paragraph after it.")
    qtbot.addWidget(w)
    w.resize(600, 400)
    w.show()
    qtbot.waitUntil(lambda: any(v.scrolls for v in w.markdown_view.views()))
    views = [v for v in w.markdown_view.views() if v.isVisibleTo(w)]
    assert views[0].scrolls and not views[1].scrolls and w.minimumSizeHint().width() < 300


def test_files_with_long_names_wrap_and_shorten_their_chips_in_the_message(qtbot, fake_app):
    from specchat.store import NewAttachment
    from specchat.ui.attachment_chips import CHIP_NAME_CHARS, short_name

    names = [f"{'very-long-module-name-' * 5}{i}.py" for i in range(6)]
    assert len(short_name(names[0])) == CHIP_NAME_CHARS and short_name(names[0]).endswith("0.py")
    app = fake_app()
    chat = app.add_chat()
    s = app.start(qtbot)
    s.store.add_message(chat, "user", "What do these do?",
                        attachments=[NewAttachment(n, "text/x-python", b"x = 1\n") for n in names])
    w = s.window
    w.open_chat(chat)
    w.telemetry.hide()
    w.resize(834, 720)
    conversation = w.pane.conversation
    settle(qtbot, conversation)
    message = conversation.messages[0]
    viewport = conversation.viewport()
    assert len(message.file_chips.texts()) == 6 and within(message, viewport)
    assert all(within(chip, viewport) for chip in message.file_chips.findChildren(QWidget))
    assert names[0] in message.file_chips.findChildren(QWidget)[0].toolTip()  # the whole name


def test_a_search_match_at_the_end_of_a_long_code_line_is_scrolled_into_the_block(qtbot, fake_app):
    """Find in chat scrolls the conversation down to a match, and a code block that scrolls sideways across
    to it: a match in the hidden part of a long line is shown, not left past the block's right edge."""
    from specchat.ui.block_view import BlockView

    line = LINE[:-20] + " # zanzibar_marker )"
    app = fake_app()
    chat = app.add_chat()
    s = app.start(qtbot)
    s.store.add_message(chat, "assistant", f"{PROSE}\n\n```python\n{line}\n```")
    w = s.window
    w.open_chat(chat)
    w.telemetry.hide()
    w.resize(834, 720)
    settle(qtbot, w.pane.conversation)
    w.chats.search.setText("zanzibar_marker")
    qtbot.waitUntil(lambda: len(w.finder.matches) == 1, timeout=10_000)
    block = w.finder.matches[0].label.parent()
    assert isinstance(block, BlockView) and block.scrolls and block.bar is not None
    # the match is in the line's last 20 characters: showing it scrolls the block all the way across
    qtbot.waitUntil(lambda: block.bar.value() == block.bar.maximum() > 0, timeout=5_000)
