"""Issue 25, item 6: deleting a chat can be undone (a bar with an Undo button, and Ctrl+Z), the way a
mail client does; the app's next start purges what was deleted.  And Ctrl+N focuses the composer."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.ui import undo_bar

SLOW = FakeSpec(answer_tokens=300, decode_s=0.004)  # over a second: long enough to delete mid-answer


def started(qtbot, fake_app, spec: FakeSpec | None = None):
    """An app with three chats, oldest first: "pelicans", "herons" (two messages, own settings), "gulls"."""
    app = fake_app(spec or FakeSpec(answer_tokens=40))
    ids = {}
    for title in ("pelicans", "herons", "gulls"):
        ids[title] = app.add_chat(title, system_prompt=f"You know {title}.", max_tokens=350,
                                  speculation="lookup" if title == "herons" else "draft")
    s = app.start(qtbot)
    s.store.add_message(ids["herons"], "user", "tell me about herons")
    s.store.add_message(ids["herons"], "assistant", "Herons wade in shallow water.")
    s.window.chats.refresh()
    s.window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is s.window, timeout=5_000)
    return app, s, ids


def listed(window) -> list[int]:
    return [chat_id for chat_id, _text in window.chats.items()]


def press(qtbot, window, key: QKeySequence | QKeySequence.StandardKey | str) -> None:
    qtbot.keySequence(window, QKeySequence(key))


def test_delete_from_the_chat_list_then_undo_brings_the_chat_back_whole_and_opens_it(qtbot, fake_app):
    _app, s, ids = started(qtbot, fake_app)
    w, herons = s.window, ids["herons"]
    before_order = listed(w)
    assert before_order == [herons, ids["gulls"], ids["pelicans"]]
    before = (s.store.get_chat(herons).settings, [(m.role, m.content) for m in s.store.messages(herons)])
    w.open_chat(ids["gulls"])

    w.chats.select(herons)
    delete = next(a for a in w.chats.list.actions() if a.text() == "Delete")  # the list's context menu
    delete.trigger()
    assert herons not in listed(w) and herons not in [c.id for c in s.store.list_chats()]
    bar = w.undo_bar
    assert bar.isVisible() and bar.label.text() == "Deleted “herons”"
    assert bar.undo_button.isVisible() and bar.undo_button.text() == "Undo"
    composer = w.pane.composer
    typing_area = composer.rect().translated(composer.mapTo(w, composer.rect().topLeft()))
    assert w.rect().contains(bar.geometry()) and not bar.geometry().intersects(typing_area)  # above the composer
    assert w.actions_by_slot["undo_delete"].isEnabled()

    qtbot.mouseClick(bar.undo_button, Qt.MouseButton.LeftButton)
    assert listed(w) == before_order  # at its place, not on top
    assert w.chat_id == herons and w.chats.current == herons  # opened
    assert (s.store.get_chat(herons).settings, [(m.role, m.content) for m in s.store.messages(herons)]) == before
    assert [m.content for m in w.pane.conversation.messages] == ["tell me about herons",
                                                                 "Herons wade in shallow water."]
    assert not bar.isVisible() and not w.actions_by_slot["undo_delete"].isEnabled()


def test_ctrl_z_undoes_the_delete_even_from_the_composer_but_not_its_own_typing(qtbot, fake_app):
    _app, s, ids = started(qtbot, fake_app)
    w = s.window
    w.open_chat(ids["herons"])
    w.pane.composer.setFocus()
    press(qtbot, w, "Ctrl+Shift+Backspace")  # Chat → Delete this chat, from the composer
    assert ids["herons"] not in listed(w) and w.chat_id == ids["gulls"] and w.undo_bar.isVisible()

    w.pane.composer.setFocus()
    qtbot.keyClicks(w.pane.composer, "half a thought")
    press(qtbot, w.pane.composer, QKeySequence.StandardKey.Undo)  # undoes the typing, as everywhere
    assert w.pane.composer.toPlainText() == "" and ids["herons"] not in listed(w)

    assert QApplication.focusWidget() is w.pane.composer  # nothing left to undo in it: the delete is undone
    press(qtbot, w.pane.composer, QKeySequence.StandardKey.Undo)
    assert listed(w)[0] == ids["herons"] and w.chat_id == ids["herons"] and not w.undo_bar.isVisible()


def test_several_deletes_are_undone_one_at_a_time_the_last_first(qtbot, fake_app):
    _app, s, ids = started(qtbot, fake_app)
    w = s.window
    for title in ("herons", "gulls"):
        w.delete_chat(ids[title])
    assert listed(w) == [ids["pelicans"]] and w.undo_bar.pending == [ids["herons"], ids["gulls"]]
    assert w.undo_bar.label.text() == "Deleted “gulls”"

    w.chats.list.setFocus()
    press(qtbot, w, QKeySequence.StandardKey.Undo)
    assert listed(w) == [ids["gulls"], ids["pelicans"]] and w.chat_id == ids["gulls"]
    assert w.undo_bar.isVisible() and w.undo_bar.label.text() == "Deleted “herons”"  # the one before, next
    press(qtbot, w, QKeySequence.StandardKey.Undo)
    assert listed(w) == [ids["herons"], ids["gulls"], ids["pelicans"]] and w.chat_id == ids["herons"]
    assert not w.undo_bar.isVisible()


def test_the_delete_key_on_the_list_deletes_the_selected_chat_and_the_undo_goes_when_its_time_is_up(
        qtbot, fake_app, monkeypatch):
    monkeypatch.setattr(undo_bar, "UNDO_MS", 300)
    _app, s, ids = started(qtbot, fake_app)
    w = s.window
    w.chats.select(ids["pelicans"])
    w.chats.list.setFocus()
    qtbot.keyClick(w.chats.list, Qt.Key.Key_Delete)
    assert ids["pelicans"] not in listed(w) and w.undo_bar.isVisible()
    qtbot.waitUntil(lambda: not w.undo_bar.isVisible(), timeout=5_000)
    assert not w.actions_by_slot["undo_delete"].isEnabled()
    w.chats.list.setFocus()
    press(qtbot, w, QKeySequence.StandardKey.Undo)  # nothing offered: Ctrl+Z does nothing to the chats
    assert ids["pelicans"] not in listed(w)
    assert [c.id for c in s.store.trashed_chats()] == [ids["pelicans"]]  # still in the trash until a start


def test_search_does_not_find_a_deleted_chat_and_finds_it_again_once_undone(qtbot, fake_app):
    _app, s, ids = started(qtbot, fake_app)
    w = s.window
    w.chats.search.setText("heron")
    assert listed(w) == [ids["herons"]]
    w.delete_chat(ids["herons"])
    assert listed(w) == []
    w.undo_delete()
    assert listed(w) == [ids["herons"]]


def test_a_deleted_chat_is_purged_when_the_app_starts_again(qtbot, fake_app):
    app, s, ids = started(qtbot, fake_app)
    s.window.delete_chat(ids["herons"])
    assert s.window.undo_bar.isVisible()
    app.stop()  # the undo was not used
    s = app.start(qtbot)  # a new Store over the same file, and a new session
    assert listed(s.window) == [ids["gulls"], ids["pelicans"]]
    assert s.store.trashed_chats() == [] and s.store.messages(ids["herons"]) == []
    assert not s.window.undo_bar.isVisible() and not s.window.actions_by_slot["undo_delete"].isEnabled()
    assert [m for c in s.store.list_chats() for m in s.store.messages(c.id)] == []  # the others had none


def test_deleting_a_chat_that_generates_stops_its_answer_and_undo_restores_what_was_stored(qtbot, fake_app):
    _app, s, ids = started(qtbot, fake_app, SLOW)
    w, gulls = s.window, ids["gulls"]
    w.open_chat(gulls)
    send(qtbot, w.pane, "Go on about gulls.")
    qtbot.waitUntil(lambda: s.answers.answer(gulls) is not None and len(s.answers.answer(gulls).content) > 20,
                    timeout=10_000)
    w.delete_chat()
    assert gulls not in listed(w)
    wait_idle(qtbot, s, timeout=5_000)  # the answer stopped within a round
    stored = s.store.messages(gulls)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[-1].state == "stopped" and stored[-1].stats.stop_reason == "cancelled"
    assert 20 < len(stored[-1].content) < 300 * 4  # part of the answer, not all of it

    w.undo_delete()
    assert w.chat_id == gulls and listed(w)[0] == gulls
    shown = w.pane.conversation.messages
    assert [m.content for m in shown] == [m.content for m in stored]
    assert s.store.messages(gulls) == stored


def test_ctrl_n_and_new_chat_focus_the_composer(qtbot, fake_app):
    """Issue 25, item 6: ready to type at once, whichever field had the focus."""
    _app, s, _ids = started(qtbot, fake_app)
    w = s.window
    w.chats.search.setFocus()
    press(qtbot, w, QKeySequence.StandardKey.New)
    assert len(s.store.list_chats()) == 4 and QApplication.focusWidget() is w.pane.composer
    qtbot.keyClicks(QApplication.focusWidget(), "typed at once")
    assert w.pane.composer.toPlainText() == "typed at once"
    w.chats.list.setFocus()
    qtbot.mouseClick(w.chats.new_button, Qt.MouseButton.LeftButton)
    assert len(s.store.list_chats()) == 5 and QApplication.focusWidget() is w.pane.composer
