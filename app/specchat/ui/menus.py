"""Every menu of the window, declared in one place.

A menu is a title and a list of entries; an entry names the window method it calls
(so the table stays plain data), or an action the window already has (the telemetry
dock's show/hide), or a separator, or a choice of values (a submenu of exclusive
entries calling the method with the value).  Shortcuts are Qt's standard keys where
one exists (they follow the platform), else portable sequences; the first one of an
entry is the one its menu shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
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
        Entry("About SpecChat", "about"),
    )),
)


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
                action.setShortcuts([QKeySequence(k) for k in e.keys])
            actions[e.slot] = action
    return actions
