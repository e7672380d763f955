"""The chat list shows its titles (elided, tooltips, no sideways scrolling, width remembered) and
the standard shortcuts do what their menu entries say, pressed as keys."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import QApplication, QSplitter, QWidget

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.ui.theme import DARK, LIGHT, apply_theme, current

SLOW = FakeSpec(answer_tokens=300, decode_s=0.004)  # over a second: long enough to stop mid-answer
LONG_TITLE = "A very long title about speculative decoding on small machines, drafts, targets and acceptance"


def started(qtbot, fake_app, spec: FakeSpec | None = None, **kw):
    app = fake_app(spec or FakeSpec(answer_tokens=40))
    chat = app.add_chat()
    s = app.start(qtbot, **kw)
    s.window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is s.window, timeout=5_000)
    return app, s, chat


def press(qtbot, window, key: QKeySequence | str) -> None:
    qtbot.keySequence(window, QKeySequence(key))


def test_a_long_title_is_elided_with_its_tooltip_and_no_horizontal_scrollbar(qtbot, fake_app):
    app = fake_app()
    app.add_chat(LONG_TITLE)
    s = app.start(qtbot)
    chats = s.window.chats
    item = chats.list.item(0)
    assert item.toolTip().startswith(LONG_TITLE)
    assert chats.list.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    assert not chats.list.horizontalScrollBar().isVisible()
    assert chats.list.textElideMode() in (Qt.TextElideMode.ElideRight, Qt.TextElideMode.ElideMiddle)
    # the title is wider than the list: it is drawn elided inside the row, not scrolled to
    assert chats.list.fontMetrics().horizontalAdvance(LONG_TITLE) > chats.list.viewport().width()
    assert chats.list.visualItemRect(item).right() <= chats.list.viewport().width()


def test_the_chat_list_width_is_remembered_after_a_restart(qtbot, fake_app, tmp_path):
    ini = str(tmp_path / "window.ini")
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot, window_state=QSettings(ini, QSettings.Format.IniFormat))
    s.window.telemetry.hide()  # room beside the chat pane's minimum width
    s.window.resize(1200, 800)  # wider than the first window on the offscreen screen (800 px)
    qtbot.waitUntil(lambda: sum(s.window.splitter.sizes()) > 1100, timeout=5_000)
    before = s.window.splitter.sizes()
    s.window.splitter.setSizes([before[0] + 80, before[1] - 80])  # as a drag of the handle does
    width = s.window.splitter.sizes()[0]
    assert width > before[0]
    app.stop()
    saved = QSettings(ini, QSettings.Format.IniFormat).value("window/splitter")
    restored = []
    real = QSplitter.restoreState
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(QSplitter, "restoreState", lambda self, state: restored.append(bytes(state)) or real(self, state))
        s = app.start(qtbot, window_state=QSettings(ini, QSettings.Format.IniFormat))
    assert restored == [bytes(saved)]
    # the offscreen screen is 800 px wide, so the restarted window is narrower than the one that
    # saved the width: a splitter with the room shows what was saved
    probe = QSplitter()
    qtbot.addWidget(probe)
    probe.addWidget(QWidget())
    probe.addWidget(QWidget())
    probe.resize(sum(before) + probe.handleWidth(), 100)
    assert probe.restoreState(saved) and abs(probe.sizes()[0] - width) <= 2


def test_every_shortcut_is_shown_in_its_menu(qtbot, fake_app):
    _app, s, _chat = started(qtbot, fake_app)
    shown = {slot: a.shortcut().toString() for slot, a in s.window.actions_by_slot.items()}
    for slot in ("new_chat", "search_chats", "stop_answer", "copy_last_answer", "regenerate"):
        assert shown[slot], slot
    assert shown["stop_answer"] == "Ctrl+." and "Esc" in [k.toString() for k in
                                                         s.window.actions_by_slot["stop_answer"].shortcuts()]


def test_ctrl_n_makes_a_new_chat(qtbot, fake_app):
    _app, s, chat = started(qtbot, fake_app)
    press(qtbot, s.window, QKeySequence.StandardKey.New)
    assert s.window.chat_id != chat and len(s.store.list_chats()) == 2


def test_ctrl_f_focuses_the_chat_search_and_typing_filters(qtbot, fake_app):
    app, s, _chat = started(qtbot, fake_app)
    app.add_chat("pelicans and herons")
    s.window.chats.refresh()
    s.window.pane.composer.setFocus()
    press(qtbot, s.window, QKeySequence.StandardKey.Find)
    assert QApplication.focusWidget() is s.window.chats.search
    qtbot.keyClicks(QApplication.focusWidget(), "pelican")
    assert [t for _, t in s.window.chats.items()] == ["pelicans and herons"]


def test_esc_and_ctrl_dot_stop_a_streaming_answer(qtbot, fake_app):
    _app, s, chat = started(qtbot, fake_app, SLOW)
    for key in ("Esc", "Ctrl+."):
        send(qtbot, s.window.pane, "Go on for a while.")
        qtbot.waitUntil(lambda: s.answers.answer(chat) is not None and len(s.answers.answer(chat).content) > 20,
                        timeout=10_000)
        press(qtbot, s.window, key)
        wait_idle(qtbot, s, timeout=5_000)
        last = s.store.messages(chat)[-1]
        assert last.state == "stopped" and last.stats.stop_reason == "cancelled", key
    assert not s.window.actions_by_slot["stop_answer"].isEnabled()  # idle: Esc is the widgets' again


def test_ctrl_shift_c_copies_the_last_answer(qtbot, fake_app):
    _app, s, chat = started(qtbot, fake_app)
    send(qtbot, s.window.pane, "Say something.")
    wait_idle(qtbot, s)
    QGuiApplication.clipboard().setText("")
    press(qtbot, s.window, "Ctrl+Shift+C")
    answer = s.store.messages(chat)[-1]
    assert answer.role == "assistant" and answer.content
    assert QGuiApplication.clipboard().text() == answer.content


def test_ctrl_r_regenerates_the_last_answer(qtbot, fake_app):
    _app, s, chat = started(qtbot, fake_app)
    send(qtbot, s.window.pane, "Question.")
    wait_idle(qtbot, s)
    first = s.store.messages(chat)[-1]
    press(qtbot, s.window, "Ctrl+R")
    wait_idle(qtbot, s)
    again = s.store.messages(chat)
    assert [m.role for m in again] == ["user", "assistant"] and again[-1].id != first.id
    assert again[-1].state == "done"


def test_view_theme_menu_saves_the_choice_and_restyles(qtbot, fake_app):
    app, s, _chat = started(qtbot, fake_app)
    try:
        s.window.actions_by_slot["set_theme:dark"].trigger()
        assert current() is DARK and s.window.config["theme"] == "dark"
        assert s.window.actions_by_slot["set_theme:dark"].isChecked()
        assert not s.window.actions_by_slot["set_theme:light"].isChecked()
        app.stop()
        s = app.start(qtbot)
        assert s.window.config["theme"] == "dark" and s.window.actions_by_slot["set_theme:dark"].isChecked()
    finally:
        apply_theme("light")
    assert current() is LIGHT
