"""Chats to files and back, from the window: the Export, Import and Restore dialogs, and the scheduled backup.

The dialogs only ask; :class:`ChatFiles` runs the choice through the chats' command model
(:class:`~specchat.chat_commands.ChatCommands`: export, import, restore, all Qt-free) and says in one line
(:attr:`ChatFiles.said`, the status bar) where a file went or why not.  File → Export this chat… / Export all
chats… / Import chats… / Restore a backup…, and the chat list's context menu, call it.  The scheduled backup
(``backup_every_hours``, ``backup_keep``) runs on the session's task runner with a connection of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from specchat.chat_commands import ChatCommands, export_from, read_import
from specchat.config import AppConfig
from specchat.errors import UserError
from specchat.store import backup
from specchat.workers.tasks import TaskContext, TaskHandle, TaskRunner

STATUS_MS = 30_000  # a path in the status bar: long enough to read
CHECK_EVERY_MS = 10 * 60 * 1000  # how often the window asks whether a scheduled backup is due
FIRST_CHECK_MS = 60 * 1000  # the first time: a minute after the window opens, not in its way


def _path_row(edit: QLineEdit, choose: Callable[[], None]) -> QWidget:
    row = QWidget()
    h = QHBoxLayout(row)
    h.setContentsMargins(0, 0, 0, 0)
    h.addWidget(edit, 1)
    button = QPushButton("Choose…")
    button.clicked.connect(choose)
    h.addWidget(button)
    return row


class ExportDialog(QDialog):
    """Which chats, which format, with the reasoning or not, and where."""

    def __init__(self, parent: QWidget | None, *, chat_title: str | None, folder: Path) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export chats")
        self.folder = folder
        form = QFormLayout(self)
        self.this_chat = QRadioButton(f"This chat: {chat_title}" if chat_title else "This chat")
        self.all_chats = QRadioButton("All chats")
        scope = QButtonGroup(self)
        for b in (self.this_chat, self.all_chats):
            scope.addButton(b)
        (self.this_chat if chat_title else self.all_chats).setChecked(True)
        self.this_chat.setEnabled(chat_title is not None)
        scope_box = QWidget()
        sv = QVBoxLayout(scope_box)
        sv.setContentsMargins(0, 0, 0, 0)
        sv.addWidget(self.this_chat)
        sv.addWidget(self.all_chats)
        form.addRow("Chats:", scope_box)
        self.markdown = QRadioButton("Markdown: to read and share (the conversation as shown)")
        self.json = QRadioButton("SpecChat JSON: everything, versions and figures included (imports back)")
        formats = QButtonGroup(self)
        for b in (self.markdown, self.json):
            formats.addButton(b)
        self.markdown.setChecked(True)
        format_box = QWidget()
        fv = QVBoxLayout(format_box)
        fv.setContentsMargins(0, 0, 0, 0)
        fv.addWidget(self.markdown)
        fv.addWidget(self.json)
        form.addRow("Format:", format_box)
        self.reasoning = QCheckBox("Include the reasoning (as a collapsed block)")
        self.reasoning.setChecked(True)
        form.addRow("", self.reasoning)
        self.path = QLineEdit()
        form.addRow("File:", _path_row(self.path, self._choose))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.export_button = buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        for b in (self.markdown, self.json, self.this_chat, self.all_chats):
            b.toggled.connect(self._suggest)
        self._suggest()

    @property
    def fmt(self) -> str:
        return "json" if self.json.isChecked() else "markdown"

    def _suggest(self) -> None:
        """The file name follows the choices until the user picks one."""
        self.reasoning.setEnabled(self.fmt == "markdown")
        name = ("specchat-chat" if self.this_chat.isChecked() else "specchat-chats") + (
            ".json" if self.fmt == "json" else ".md")
        current = self.path.text()
        if not current or Path(current).name.startswith("specchat-chat"):
            self.path.setText(str((Path(current).parent if current else self.folder) / name))
        self.export_button.setEnabled(bool(self.path.text().strip()))

    def _choose(self) -> None:
        chosen, _ = QFileDialog.getSaveFileName(self, "Export to", self.path.text(),
                                                "JSON (*.json)" if self.fmt == "json" else "Markdown (*.md)")
        if chosen:
            self.path.setText(chosen)


class ImportDialog(QDialog):
    """Which file: a SpecChat, ChatGPT or Open WebUI export."""

    def __init__(self, parent: QWidget | None, folder: Path) -> None:
        super().__init__(parent)
        self.setWindowTitle("Import chats")
        self.folder = folder
        v = QVBoxLayout(self)
        about = QLabel("SpecChat reads its own JSON export, ChatGPT's <b>conversations.json</b> (Settings → Data "
                       "controls → Export) and Open WebUI's chat export. Every chat in the file is added as a new "
                       "chat: nothing is overwritten. The branch each app showed becomes the chat; other answers "
                       "and edits become versions you can page through. A file that cannot be read whole imports "
                       "nothing.")
        about.setWordWrap(True)
        about.setTextFormat(Qt.TextFormat.RichText)
        v.addWidget(about)
        self.path = QLineEdit(placeholderText="the export file (.json)")
        v.addWidget(_path_row(self.path, self._choose))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.import_button = buttons.addButton("Import", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        v.addWidget(buttons)
        self.path.textChanged.connect(lambda t: self.import_button.setEnabled(bool(t.strip())))
        self.import_button.setEnabled(False)
        self.resize(560, self.sizeHint().height())

    def _choose(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(self, "Import chats from", str(self.folder),
                                                "Chat exports (*.json);;All files (*)")
        if chosen:
            self.path.setText(chosen)


class RestoreDialog(QDialog):
    """The backups, newest first; the one to put back."""

    def __init__(self, parent: QWidget | None, found: list[backup.Backup]) -> None:
        super().__init__(parent)
        self.setWindowTitle("Restore a backup")
        v = QVBoxLayout(self)
        about = QLabel("Put the chats back as they were at a backup. What they are now is backed up first, "
                       "so this can be undone the same way." if found else
                       "No backups yet. One is made before every upgrade of the chat database and, while the "
                       "app runs, every backup_every_hours hours (Settings).")
        about.setWordWrap(True)
        v.addWidget(about)
        self.list = QListWidget()
        for b in found:
            item = QListWidgetItem(f"{b.when_text}   {_reason(b.reason)}   {b.size / 1e6:.1f} MB")
            item.setData(Qt.ItemDataRole.UserRole, str(b.path))
            item.setToolTip(str(b.path))
            self.list.addItem(item)
        if found:
            self.list.setCurrentRow(0)
        v.addWidget(self.list)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.restore_button = buttons.addButton("Restore", QDialogButtonBox.ButtonRole.AcceptRole)
        self.restore_button.setEnabled(bool(found))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        v.addWidget(buttons)
        self.resize(520, 360)

    def chosen(self) -> Path | None:
        item = self.list.currentItem()
        return Path(item.data(Qt.ItemDataRole.UserRole)) if item is not None else None


def _reason(reason: str) -> str:
    if reason.startswith("before-v"):
        return f"before the upgrade to schema {reason[len('before-v'):]}"
    return {"daily": "scheduled", "manual": "made by hand", "before-restore": "before a restore"}.get(reason, reason)


class ChatFiles(QObject):
    """The window's export, import, restore and scheduled backup; every outcome one line in :attr:`said`."""

    said = Signal(str)
    chatsChanged = Signal(list)  # chat ids imported (the list shows them), or [] after a restore (all changed)

    def __init__(self, parent: QWidget, commands: ChatCommands, *, config: Callable[[], AppConfig],
                 tasks: TaskRunner | None = None, busy: Callable[[], bool] = lambda: False,
                 folder: Path | None = None) -> None:
        super().__init__(parent)
        self.owner = parent
        self.commands = commands
        self.config = config
        self.tasks = tasks
        self.busy = busy  # whether an answer runs or waits: a restore waits for none
        self.folder = folder or Path.home()
        self.dialog: QDialog | None = None  # the one open (tests drive it)
        self._backup: TaskHandle | None = None
        self._handles: set[TaskHandle] = set()  # exports and imports under way
        if tasks is not None:
            self._timer = QTimer(self, interval=CHECK_EVERY_MS)
            self._timer.timeout.connect(self.back_up_if_due)
            self._timer.start()
            QTimer.singleShot(FIRST_CHECK_MS, self, self.back_up_if_due)

    def context_actions(self, parent: QObject, current: Callable[[], int | None]) -> list[QAction]:
        """The chat list's entries: export the chat under the cursor, export all, import."""
        actions = []
        for text, slot in (("Export…", lambda: self.export(current())), ("Export all chats…", lambda: self.export(None)),
                           ("Import chats…", self.import_chats)):
            action = QAction(text, parent)
            action.triggered.connect(lambda _checked=False, run=slot: run())
            actions.append(action)
        return actions

    # -- export and import ---------------------------------------------------------------------------

    def export(self, chat_id: int | None, *, ask: bool = True) -> ExportDialog:
        title = self.commands.store.get_chat(chat_id).title if chat_id is not None else None
        dialog = ExportDialog(self.owner, chat_title=title, folder=self.folder)
        self.dialog = dialog
        if chat_id is None:
            dialog.all_chats.setChecked(True)
        dialog.accepted.connect(lambda: self._export(dialog, chat_id))
        if ask:
            dialog.open()
        return dialog

    def _export(self, dialog: ExportDialog, chat_id: int | None) -> None:
        path = Path(dialog.path.text().strip()).expanduser()
        which = chat_id if dialog.this_chat.isChecked() else None
        fmt, reasoning = dialog.fmt, dialog.reasoning.isChecked()
        database = self.commands.database()

        def done(line: object) -> None:
            self.folder = path.parent
            self.said.emit(str(line))

        self._run(lambda: export_from(database, which, path, fmt, reasoning=reasoning), done, "not exported",
                  f"exporting to {path}…")

    def import_chats(self, *, ask: bool = True) -> ImportDialog:
        dialog = ImportDialog(self.owner, self.folder)
        self.dialog = dialog
        dialog.accepted.connect(lambda: self._import(Path(dialog.path.text().strip()).expanduser()))
        if ask:
            dialog.open()
        return dialog

    def _import(self, path: Path) -> None:
        def done(read: Any) -> None:
            try:
                chats, line = self.commands.store_import(read, path)
            except UserError as exc:
                self.said.emit(f"nothing imported: {exc}")
                return
            self.folder = path.parent
            self.said.emit(line)
            self.chatsChanged.emit([c.id for c in chats])

        self._run(lambda: read_import(path), done, "nothing imported", f"reading {path}…")

    def _run(self, work: Callable[[], object], done: Callable[[Any], None], refused: str, busy: str) -> None:
        """``work`` (reading or writing a file, no widget) on the task runner, then ``done`` with its result
        on the GUI thread; a refusal is one line after ``refused``.  Without a runner, at once."""
        if self.tasks is None:
            try:
                result = work()
            except UserError as exc:
                self.said.emit(f"{refused}: {exc}")
                return
            done(result)
            return
        self.said.emit(busy)
        handle = self.tasks.run_task(lambda _ctx: work(), name="chat files")
        self._handles.add(handle)
        handle.returned.connect(done)
        handle.failed.connect(lambda line, _cancelled: self.said.emit(f"{refused}: {line}"))
        handle.finished.connect(lambda: self._handles.discard(handle))

    @property
    def working(self) -> bool:
        """Whether an export or an import is under way."""
        return bool(self._handles)

    # -- backups ------------------------------------------------------------------------------------

    def restore(self, *, ask: bool = True) -> RestoreDialog:
        dialog = RestoreDialog(self.owner, self.commands.backups())
        self.dialog = dialog
        dialog.accepted.connect(lambda: self._restore(dialog.chosen()))
        if ask:
            dialog.open()
        return dialog

    def _restore(self, chosen: Path | None) -> None:
        if chosen is None:
            return
        if self.busy():
            self.said.emit("not restored: an answer is running or waiting; stop it first")
            return
        try:
            line = self.commands.restore(chosen, keep=int(self.config()["backup_keep"]))  # type: ignore[call-overload]
        except UserError as exc:
            self.said.emit(f"not restored: {exc}")
            return
        self.said.emit(line)
        self.chatsChanged.emit([])

    def back_up_if_due(self) -> None:
        """A backup on the task runner when the newest is older than ``backup_every_hours``."""
        config = self.config()
        database = self.commands.database()
        if self.tasks is None or self._backup is not None \
                or not backup.due(database, float(config["backup_every_hours"])):  # type: ignore[arg-type]
            return
        keep = int(config["backup_keep"])  # type: ignore[call-overload]

        def run(_ctx: TaskContext) -> Path:
            return backup.backup_file(database, reason="daily", keep=keep)

        self._backup = handle = self.tasks.run_task(run, name="backup")
        handle.failed.connect(lambda line, _cancelled: self.said.emit(f"the scheduled backup failed: {line}"))
        handle.finished.connect(self._backup_over)

    def _backup_over(self) -> None:
        self._backup = None
