"""Issue 33, item 2: a write the chat database refuses loses nothing on the screen.

Refused for real: another connection holds SQLite's write lock (what a second process does past the
busy timeout) or the file may not grow (``max_page_count``, what a full disk does).  Send keeps the
question in the composer, Undo keeps its offer, each says why in one line, and the same action works
once the store takes writes again.  An exception that escapes a slot is one line in the window."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

import pytest
from PySide6.QtCore import QObject, Qt, Signal

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.chat_commands import ChatCommands
from specchat.profile import Profile
from specchat.ui.slot_errors import SlotErrors


@contextlib.contextmanager
def write_lock_held(app, store) -> Iterator[None]:
    """Another connection holds the write lock; the store gives up after 50 ms instead of 5 s."""
    store.connection.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(Profile.at(app.root).database, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def started(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=12))
    chat_id = app.add_chat("herons")
    s = app.start(qtbot)
    s.window.open_chat(chat_id)
    return app, s, chat_id


def test_a_question_the_store_refuses_stays_in_the_composer_and_sends_once_it_can(qtbot, fake_app):
    app, s, chat_id = started(qtbot, fake_app)
    pane = s.window.pane
    with write_lock_held(app, s.store):
        send(qtbot, pane, "why do herons stand on one leg?")
        assert pane.composer.toPlainText() == "why do herons stand on one leg?"  # not lost
        assert pane.notice.isVisible() and "database is locked" in pane.notice.text()
        assert "still in the box" in pane.notice.text() and "\n" not in pane.notice.text()
        assert s.store.messages(chat_id) == [] and not s.answers.busy_chats()  # nothing half-done
        pane.clear_pair_notice()  # what a pair that finishes loading does: the refused write's line stays
        assert pane.notice.isVisible() and "database is locked" in pane.notice.text()
    qtbot.keyClick(pane.composer, Qt.Key.Key_Return)  # the same question, again
    wait_idle(qtbot, s)
    assert pane.composer.toPlainText() == ""
    assert [m.role for m in s.store.messages(chat_id)] == ["user", "assistant"]
    assert s.store.messages(chat_id)[0].content == "why do herons stand on one leg?"


def test_a_full_disk_keeps_the_question_too(qtbot, fake_app):
    _app, s, chat_id = started(qtbot, fake_app)
    pane = s.window.pane
    pages = s.store.connection.execute("PRAGMA page_count").fetchone()[0]
    s.store.connection.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: a full disk
    question = "herons " * 3000  # 21 kB: needs new pages
    send(qtbot, pane, question)
    assert pane.composer.toPlainText() == question  # exactly as typed
    assert "full" in pane.notice.text() and s.store.messages(chat_id) == []


def test_an_undo_the_store_refuses_keeps_its_offer_and_works_once_it_can(qtbot, fake_app):
    app, s, chat_id = started(qtbot, fake_app)
    w = s.window
    other = app.add_chat("gulls")
    w.chats.refresh()
    w.delete_chat(chat_id)
    bar = w.undo_bar
    assert bar.pending == [chat_id]
    with write_lock_held(app, s.store):
        qtbot.mouseClick(bar.undo_button, Qt.MouseButton.LeftButton)
        assert bar.isVisible() and bar.pending == [chat_id]  # the offer is still there
        assert "still deleted" in w.statusBar().currentMessage() and "locked" in w.statusBar().currentMessage()
        assert [c.id for c in s.store.trashed_chats()] == [chat_id]
    qtbot.mouseClick(bar.undo_button, Qt.MouseButton.LeftButton)
    assert s.store.trashed_chats() == [] and w.chat_id == chat_id and not bar.isVisible()
    assert other in [c.id for c in s.store.list_chats()]


def test_a_refused_new_chat_delete_or_rename_is_one_line_and_changes_nothing(qtbot, fake_app):
    app, s, chat_id = started(qtbot, fake_app)
    w = s.window
    before = [c.id for c in s.store.list_chats()]
    with write_lock_held(app, s.store):
        w.new_chat()
        assert [c.id for c in s.store.list_chats()] == before and "no new chat" in w.statusBar().currentMessage()
        w.delete_chat(chat_id)
        assert not w.undo_bar.isVisible() and "not deleted" in w.statusBar().currentMessage()
        w.chats.select(chat_id)
        w.chats.rename_current("egrets")
        assert s.store.get_chat(chat_id).title == "herons" and "keeps its name" in w.statusBar().currentMessage()
    assert [c.id for c in s.store.list_chats()] == before


def test_the_question_is_stored_before_the_title(tmp_path):
    from specchat.store import open_store

    store = open_store(tmp_path / "chats.db")
    try:
        chat = store.create_chat("New chat")
        sent = ChatCommands(store).send(chat.id, "  first line\nsecond line  ")
        assert sent.retitled and store.get_chat(chat.id).title == "first line"
        assert sent.message.content == "first line\nsecond line"
        again = ChatCommands(store).send(chat.id, "another")
        assert not again.retitled and store.get_chat(chat.id).title == "first line"
        with pytest.raises(ValueError):
            ChatCommands(store).send(chat.id, "   ")
    finally:
        store.close()


class Emitter(QObject):
    fired = Signal()


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_slot_is_one_line_in_the_window_and_a_logged_traceback(qtbot, tmp_path):
    shown: list[str] = []
    errors = SlotErrors(shown.append, tmp_path / "errors.log")
    emitter = Emitter()

    def broken() -> None:
        raise RuntimeError("a bug in a command\nwith a second line")

    emitter.fired.connect(broken)
    with errors.installed():
        emitter.fired.emit()  # PySide6 hands the exception to sys.excepthook and goes on
        emitter.fired.emit()
    assert errors.count == 2 and len(shown) == 2
    assert shown[0].startswith("Something went wrong: RuntimeError: a bug in a command") and "\n" not in shown[0]
    assert "The app keeps running; details in" in shown[0]
    log = (tmp_path / "errors.log").read_text()
    assert log.count("Traceback") == 2 and "in broken" in log
