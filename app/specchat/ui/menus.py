"""Every menu of the window, declared in one place.

A menu is a title and a list of entries; an entry names the window method it calls
(so the table stays plain data), or an action the window already has (the telemetry
dock's show/hide), or a separator, or a choice of values (a submenu of exclusive
entries calling the method with the value).  Shortcuts are Qt's standard keys where
one exists (they follow the platform), else portable sequences; the first one of an
entry is the one its menu shows.

:data:`BINDINGS` holds the keys that are no menu entry's (the composer's Enter, the message
editor's Ctrl+Enter and Esc, Tab out of a text box): the widgets that handle them ask it
(:func:`matches`, :func:`keys_of`), and Help → Keyboard shortcuts lists :data:`MENUS` and it
(:func:`shortcut_rows`), so the list cannot say other keys than the window has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from PySide6.QtCore import QKeyCombination, Qt
from PySide6.QtGui import QAction, QActionGroup, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QMainWindow

Key = QKeySequence.StandardKey | str


@dataclass(frozen=True, slots=True)
class Entry:
    text: str
    slot: str  # the window method to call, or "action:NAME" for one of the window's own QActions
    keys: tuple[Key, ...] = ()
    checkable: bool = False  # checkable entries call slot(checked) and start as the window says
    choices: tuple[tuple[str, str], ...] = ()  # (text, value): a submenu calling slot(value)


SEPARATOR = Entry("", "")
THEME_CHOICES = (("System", "system"), ("Light", "light"), ("Dark", "dark"))

MENUS: tuple[tuple[str, tuple[Entry, ...]], ...] = (
    ("&File", (
        Entry("New chat", "new_chat", (QKeySequence.StandardKey.New,)),
        SEPARATOR,
        Entry("Export all chats…", "export_all_chats"),
        Entry("Import chats…", "import_chats", ("Ctrl+Shift+I",)),
        Entry("Restore a backup…", "restore_backup"),
        SEPARATOR,
        Entry("Export this chat's telemetry…", "export_telemetry"),
        SEPARATOR,
        Entry("Quit", "close", (QKeySequence.StandardKey.Quit,)),
    )),
    ("&Chat", (
        Entry("Search chats", "search_chats", (QKeySequence.StandardKey.Find,)),
        Entry("Next match", "find_next", (QKeySequence.StandardKey.FindNext,)),
        Entry("Previous match", "find_previous", (QKeySequence.StandardKey.FindPrevious,)),
        Entry("Stop the answer", "stop_answer", ("Ctrl+.", "Esc")),
        Entry("Copy the last answer", "copy_last_answer", ("Ctrl+Shift+C",)),
        Entry("Regenerate the last answer", "regenerate", ("Ctrl+R",)),
        Entry("Presets…", "open_presets", ("Ctrl+Shift+P",)),
        Entry("Export this chat…", "export_chat", ("Ctrl+Shift+E",)),
        SEPARATOR,
        Entry("Delete this chat", "delete_chat", ("Ctrl+Shift+Backspace",)),
        Entry("Undo delete", "undo_delete", (QKeySequence.StandardKey.Undo,)),
    )),
    ("&Models", (
        Entry("Download a pair…", "open_downloads"),
        Entry("Import GGUF files…", "import_files"),
        Entry("Manage models…", "open_models"),
        SEPARATOR,
        Entry("Serve the API", "set_api", checkable=True),  # the loaded pair, OpenAI-compatible
    )),
    ("&Settings", (
        Entry("App settings…", "edit_app_settings"),
        Entry("Servers…", "open_servers"),
    )),
    ("&View", (
        Entry("Telemetry panel", "action:telemetry"),
        Entry("Chat list", "set_chat_list", ("Ctrl+Shift+L",), checkable=True),
        Entry("Speculation by task…", "show_task_table"),
        Entry("API requests…", "show_api_requests"),
        Entry("Colour accepted draft tokens", "set_tint", checkable=True),
        Entry("Theme", "set_theme", choices=THEME_CHOICES),
    )),
    ("&Help", (
        Entry("Keyboard shortcuts", "show_shortcuts", ("Ctrl+/",)),
        Entry("About SpecChat", "about"),
    )),
)


@dataclass(frozen=True, slots=True)
class Binding:
    """A key that is no menu entry's: where it works, what it does, and its keys (the first is shown
    first).  The widget that handles it asks :func:`matches` or :func:`keys_of` by ``name``."""

    name: str
    where: str
    text: str
    keys: tuple[Key, ...]


BINDINGS: tuple[Binding, ...] = (
    Binding("composer.send", "Message box", "Send the message", ("Return", "Enter", "Ctrl+Return", "Ctrl+Enter")),
    Binding("composer.newline", "Message box", "New line", ("Shift+Return", "Shift+Enter")),
    Binding("focus.next", "Everywhere, text boxes too", "Next field", ("Tab",)),
    Binding("focus.previous", "Everywhere, text boxes too", "Previous field", ("Shift+Tab",)),
    Binding("text.tab", "Message box, message editor", "Type a tab", ("Ctrl+Tab",)),
    Binding("editor.save", "Message editor (Edit)", "Save & resend", ("Ctrl+Return", "Ctrl+Enter")),
    Binding("editor.cancel", "Message editor (Edit)", "Cancel the edit", ("Esc",)),
    Binding("search.next", "Search field", "Next match in the chat", ("Return", "Enter")),
    Binding("chat_list.delete", "Chat list", "Delete the selected chat", (QKeySequence.StandardKey.Delete,)),
)
_BINDINGS = {b.name: b for b in BINDINGS}


def keys_of(name: str) -> list[QKeySequence]:
    """A binding's keys (KeyError for a name not in :data:`BINDINGS`)."""
    return [seq for k in _BINDINGS[name].keys for seq in _sequences(k)]


def _sequences(key: Key) -> list[QKeySequence]:
    """A key as an action takes it (a standard key: the platform's first; none where it has none)."""
    seq = QKeySequence(key)
    return [seq] if not seq.isEmpty() else []


def matches(event: QKeyEvent, name: str) -> bool:
    """Whether a key press is one of binding ``name``'s keys (the keypad's Enter is Enter)."""
    mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
    pressed = QKeySequence(QKeyCombination(mods, Qt.Key(event.key())))
    return any(seq == pressed for seq in keys_of(name))


def key_text(keys: list[QKeySequence]) -> str:
    """Keys as the user reads them: "Ctrl+Enter" (Qt says Return for the big key, Enter for the
    keypad's: both read Enter), each once, in order."""
    seen: list[str] = []
    for seq in keys:
        text = seq.toString(QKeySequence.SequenceFormat.NativeText).replace("Return", "Enter")
        if text and text not in seen:
            seen.append(text)
    return ", ".join(seen)


def binding_text(name: str) -> str:
    """A binding's keys as the user reads them ("Ctrl+Enter"), for a button's text or tooltip."""
    return key_text(keys_of(name))


def shortcut_rows() -> list[tuple[str, str, str]]:
    """(keys, what it does, where) of every key the window has: the menus' entries, then the rest."""
    rows: list[tuple[str, str, str]] = []
    for title, entries in MENUS:
        for e in entries:
            keys = [s for k in e.keys for s in _sequences(k)]
            if keys:
                rows.append((key_text(keys), e.text.rstrip("…"),
                             f"{title.replace('&', '')} menu"))
    rows.extend((binding_text(b.name), b.text, b.where) for b in BINDINGS)
    return rows


def build_menus(window: QMainWindow, own_actions: dict[str, QAction],
                checked: Mapping[str, bool | str]) -> dict[str, QAction]:
    """Add :data:`MENUS` to ``window``'s menu bar; return the actions by slot name (a choice's
    by "slot:value").  ``checked``: how checkable entries start, and which value a choice has."""
    actions: dict[str, QAction] = {}
    for title, entries in MENUS:
        menu = window.menuBar().addMenu(title)
        for e in entries:
            if not e.slot:
                menu.addSeparator()
                continue
            if e.choices:
                sub = menu.addMenu(e.text)
                group = QActionGroup(sub)
                for text, value in e.choices:
                    choice = sub.addAction(text)
                    choice.setCheckable(True)
                    choice.setChecked(checked.get(e.slot) == value)
                    group.addAction(choice)
                    choice.triggered.connect(lambda _checked=False, slot=e.slot, v=value: getattr(window, slot)(v))
                    actions[f"{e.slot}:{value}"] = choice
                continue
            if e.slot.startswith("action:"):
                action = own_actions[e.slot[len("action:"):]]
                action.setText(e.text)
                menu.addAction(action)
            else:
                action = menu.addAction(e.text)
                if e.checkable:
                    action.setCheckable(True)
                    action.setChecked(bool(checked.get(e.slot, False)))
                    action.toggled.connect(getattr(window, e.slot))
                else:
                    action.triggered.connect(lambda _checked=False, slot=e.slot: getattr(window, slot)())
            if e.keys:
                action.setShortcuts([s for k in e.keys for s in _sequences(k)])
            actions[e.slot] = action
    return actions
