"""Every menu of the window, declared in one place.

A menu is a title and a list of entries; an entry names the window method it calls
(so the table stays plain data), or an action the window already has (the telemetry
dock's show/hide), or a separator.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow


@dataclass(frozen=True, slots=True)
class Entry:
    text: str
    slot: str  # the window method to call, or "action:NAME" for one of the window's own QActions
    shortcut: QKeySequence.StandardKey | None = None
    checkable: bool = False  # checkable entries call slot(checked) and start as the window says


SEPARATOR = Entry("", "")

MENUS: tuple[tuple[str, tuple[Entry, ...]], ...] = (
    ("&File", (
        Entry("New chat", "new_chat", QKeySequence.StandardKey.New),
        SEPARATOR,
        Entry("Export this chat's telemetry…", "export_telemetry"),
        SEPARATOR,
        Entry("Quit", "close", QKeySequence.StandardKey.Quit),
    )),
    ("&Models", (
        Entry("Download a pair…", "open_downloads"),
        Entry("Import GGUF files…", "import_files"),
        Entry("Manage models…", "open_models"),
    )),
    ("&Settings", (
        Entry("App settings…", "edit_app_settings"),
        Entry("Servers…", "open_servers"),
    )),
    ("&View", (
        Entry("Telemetry panel", "action:telemetry"),
        Entry("Speculation by task…", "show_task_table"),
        Entry("Colour accepted draft tokens", "set_tint", checkable=True),
        Entry("Dark theme", "set_dark", checkable=True),
    )),
    ("&Help", (
        Entry("About SpecChat", "about"),
    )),
)


def build_menus(window: QMainWindow, own_actions: dict[str, QAction], checked: dict[str, bool]) -> dict[str, QAction]:
    """Add :data:`MENUS` to ``window``'s menu bar; return the actions by slot name."""
    actions: dict[str, QAction] = {}
    for title, entries in MENUS:
        menu = window.menuBar().addMenu(title)
        for e in entries:
            if not e.slot:
                menu.addSeparator()
                continue
            if e.slot.startswith("action:"):
                action = own_actions[e.slot[len("action:"):]]
                action.setText(e.text)
                menu.addAction(action)
            else:
                action = menu.addAction(e.text)
                if e.checkable:
                    action.setCheckable(True)
                    action.setChecked(checked.get(e.slot, False))
                    action.toggled.connect(getattr(window, e.slot))
                else:
                    action.triggered.connect(lambda _checked=False, slot=e.slot: getattr(window, slot)())
            if e.shortcut is not None:
                action.setShortcut(e.shortcut)
            actions[e.slot] = action
    return actions
