"""A keyboard user can get everywhere: Tab leaves the composer and the message editor (Ctrl+Tab types a
tab), the editor's buttons say their keys, focus is drawn so it shows in both themes, and Help →
Keyboard shortcuts lists every key the window has, from the same table the keys are made from."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QLineEdit, QPushButton, QVBoxLayout, QWidget

from specchat.ui.menus import key_text
from specchat.ui.theme import DARK, LIGHT, apply_theme


@pytest.fixture(autouse=True)
def _light_again():
    yield
    apply_theme("light")


def started(qtbot, fake_app, *messages: tuple[str, str]):
    app = fake_app()
    chat = app.add_chat("Keys")
    s = app.start(qtbot)
    for role, text in messages:
        s.store.add_message(chat, role, text)
    s.window.open_chat(chat)
    s.window.pane.show_chat(chat)
    qtbot.waitExposed(s.window)

    def active() -> bool:
        s.window.activateWindow()  # asked again: a window closed by the test before can take the first ask
        return QApplication.activeWindow() is s.window

    qtbot.waitUntil(active, timeout=10_000)
    return s


def test_tab_leaves_the_composer_and_ctrl_tab_types_a_tab(qtbot, fake_app):
    s = started(qtbot, fake_app)
    composer = s.window.pane.composer
    composer.setFocus()
    qtbot.waitUntil(composer.hasFocus, timeout=5_000)
    composer.setPlainText("hello")
    qtbot.keyClick(composer, Qt.Key.Key_Tab)
    qtbot.waitUntil(lambda: not composer.hasFocus(), timeout=5_000)
    assert composer.toPlainText() == "hello"  # no tab typed
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(composer.hasFocus, timeout=5_000)
    composer.moveCursor(composer.textCursor().MoveOperation.End)
    qtbot.keyClick(composer, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert composer.toPlainText() == "hello\t" and composer.hasFocus()


def test_the_message_editor_says_its_keys_and_tab_leaves_it(qtbot, fake_app):
    s = started(qtbot, fake_app, ("user", "first question"), ("assistant", "an answer"))
    w = next(m for m in s.window.pane.conversation.messages if m.role == "user")
    w.start_edit()
    editor = w.editor
    assert editor is not None
    buttons = {b.text() for b in w.findChildren(QPushButton)}
    assert "Save && resend (Ctrl+Enter)" in buttons and "Cancel (Esc)" in buttons
    qtbot.waitUntil(editor.hasFocus, timeout=5_000)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    qtbot.waitUntil(lambda: not editor.hasFocus(), timeout=5_000)
    assert editor.toPlainText() == "first question"  # Tab moved on, typed nothing
    editor.setFocus()
    qtbot.waitUntil(editor.hasFocus, timeout=5_000)
    qtbot.keyClick(editor, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert "\t" in editor.toPlainText()
    qtbot.keyClick(editor, Qt.Key.Key_Escape)  # the table's Esc cancels
    qtbot.waitUntil(lambda: w.editor is None, timeout=5_000)


def keys_of_window(window) -> set[str]:
    """The text of every key of every action and shortcut the window has (menus, lists, dialogs' parents)."""
    keys: set[str] = set()
    for action in window.findChildren(QAction):
        keys.update(key_text([seq]) for seq in action.shortcuts() if not seq.isEmpty())
    for shortcut in window.findChildren(QShortcut):
        keys.update(key_text([seq]) for seq in shortcut.keys() if not seq.isEmpty())  # noqa: SIM118 (QShortcut.keys, not a dict)
    return keys


def listed_keys(dialog) -> set[str]:
    return {k for keys, _does, _where in dialog.rows() for k in keys.split(", ")}


def test_help_keyboard_shortcuts_lists_every_key_the_window_has(qtbot, fake_app):
    s = started(qtbot, fake_app)
    help_entry = s.window.actions_by_slot["show_shortcuts"]
    assert help_entry.shortcut().toString() == "Ctrl+/"
    help_entry.trigger()
    dialog = s.window._shortcuts
    assert dialog is not None and dialog.isVisible()
    window_keys = keys_of_window(s.window)
    assert {"Ctrl+F", "Ctrl+/", "Del", "Ctrl+Shift+C"} <= window_keys  # the walk found the menus and the list
    assert window_keys - listed_keys(dialog) == set()
    rows = {(keys, does) for keys, does, _where in dialog.rows()}
    # the keys that are no action's: the composer's and the editor's
    assert ("Ctrl+Enter", "Save & resend") in rows and ("Esc", "Cancel the edit") in rows
    assert ("Enter, Ctrl+Enter", "Send the message") in rows and ("Ctrl+Tab", "Type a tab") in rows
    assert ("Tab", "Next field") in rows


def test_a_key_added_outside_the_table_is_caught(qtbot, fake_app):
    """The check above is not vacuous: an action with a key of its own is missing from the list."""
    s = started(qtbot, fake_app)
    stray = QAction("stray", s.window)
    stray.setShortcut(QKeySequence("Ctrl+Alt+J"))
    s.window.addAction(stray)
    dialog = s.window.show_shortcuts()
    assert "Ctrl+Alt+J" in keys_of_window(s.window) - listed_keys(dialog)


def ring_pixels(widget: QWidget, colour: str) -> int:
    """How many of the widget's pixels are the focus colour."""
    image = widget.grab().toImage()
    rgb = QColor(colour).rgb()
    return sum(1 for x in range(image.width()) for y in range(image.height()) if image.pixel(x, y) == rgb)


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=["light", "dark"])
def test_keyboard_focus_is_ringed_in_the_themes_focus_colour(qtbot, theme):
    apply_theme(theme.name)
    host = QWidget()
    qtbot.addWidget(host)
    field, button = QLineEdit("text"), QPushButton("A button")
    layout = QVBoxLayout(host)
    layout.addWidget(field)
    layout.addWidget(button)
    host.show()
    host.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is host, timeout=5_000)
    assert ring_pixels(button, theme.focus) == 0
    field.setFocus()
    qtbot.waitUntil(field.hasFocus, timeout=5_000)
    width = field.width()
    assert ring_pixels(field, theme.focus) >= 2 * width  # two px along the top and the bottom at least
    qtbot.keyClick(field, Qt.Key.Key_Tab)  # the keyboard moves focus: the button shows it
    qtbot.waitUntil(button.hasFocus, timeout=5_000)
    assert ring_pixels(button, theme.focus) >= 2 * button.width()
    assert ring_pixels(field, theme.focus) == 0
