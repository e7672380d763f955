"""The chat list: search, new chat, rename, delete, and which chats have an answer running."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from specchat.chat_commands import ChatCommands
from specchat.services.answers import AnswerService, Phase
from specchat.store import Store, StoreError

from .menus import keys_of

ROLE = Qt.ItemDataRole.UserRole
BADGE = {Phase.STREAMING: "● ", Phase.LOADING: "● ", Phase.WAITING: "… "}
BADGE_TIP = {Phase.STREAMING: "generating an answer", Phase.LOADING: "loading the model pair for an answer",
             Phase.WAITING: "waiting for the answers before it to finish (another chat's, or an API request's)"}


class _FitWidth(QStyledItemDelegate):
    """Rows as wide as the list, not as their title.

    A list row is as wide as its widest title, so a long title ran past the edge, cut off
    mid-letter, and elision never happened; a row that asks for no width gets the list's
    width, and its title is elided with "…" in it (the full title is the tooltip).
    """

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        hint = super().sizeHint(option, index)
        return QSize(1, hint.height() + 6)  # and a little air between the titles


class ChatList(QObject):
    """Controller of the left column; the widgets are in ``self.widget``."""

    chatSelected = Signal(int)
    newChatRequested = Signal()
    deleteRequested = Signal(int)
    renameFailed = Signal(str)  # one line: the store refused the new title

    def __init__(self, store: Store, answers: AnswerService, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.answers = answers
        self.current: int | None = None
        self.widget = QWidget()
        self.widget.setMinimumWidth(200)  # the docked panel must not squeeze titles to a few letters
        v = QVBoxLayout(self.widget)
        v.setContentsMargins(6, 6, 6, 6)
        self.search = QLineEdit(placeholderText="Search chats…")
        self.search.textChanged.connect(lambda _t: self.refresh())
        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.newChatRequested)
        self.list = QListWidget()
        # long titles are elided at the right, never scrolled sideways
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setItemDelegate(_FitWidth(self.list))
        self.list.currentItemChanged.connect(self._on_current)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        rename = QAction("Rename…", self.list)
        rename.triggered.connect(self.rename_current)
        delete = QAction("Delete", self.list)
        delete.setShortcuts(keys_of("chat_list.delete"))  # on the list: the selected chat
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(lambda: self.current is not None and self.deleteRequested.emit(self.current))
        self.list.addActions([rename, delete])
        for w in (self.search, self.new_button, self.list):
            v.addWidget(w)
        answers.queueChanged.connect(self._queue_changed)
        self._badges: dict | None = None  # the busy chats the list shows badges for

    def _queue_changed(self) -> None:
        """The answer line changed: rebuild only if a chat's badge did (an API request in line changes none,
        and a flood of them must not rebuild the list a hundred times)."""
        if self.answers.busy_chats() != self._badges:
            self.refresh()

    def refresh(self) -> None:
        """Rebuild the list (newest activity first), keeping the selection, with busy badges."""
        busy = self.answers.busy_chats()
        self._badges = busy
        self.list.blockSignals(True)
        try:
            self.list.clear()
            for chat in self.store.list_chats(self.search.text()):
                phase = busy.get(chat.id)
                item = QListWidgetItem((BADGE[phase] if phase else "") + chat.title)
                item.setData(ROLE, chat.id)
                item.setToolTip(chat.title + (f"\n({BADGE_TIP[phase]})" if phase else ""))
                self.list.addItem(item)
                if chat.id == self.current:
                    self.list.setCurrentItem(item)
        finally:
            self.list.blockSignals(False)

    def select(self, chat_id: int) -> None:
        """Make ``chat_id`` the current chat (as a click would) and show it in the list."""
        self.current = chat_id
        self.refresh()
        self.chatSelected.emit(chat_id)

    def items(self) -> list[tuple[int, str]]:
        """(chat id, text) of every row, top to bottom."""
        return [(self.list.item(i).data(ROLE), self.list.item(i).text()) for i in range(self.list.count())]

    def _on_current(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        if item is not None and item.data(ROLE) != self.current:
            self.current = item.data(ROLE)
            self.chatSelected.emit(self.current)

    def rename_current(self, title: str | None = None) -> None:
        if self.current is None:
            return
        if title is None:
            title, ok = QInputDialog.getText(self.widget, "Rename chat", "Title:",
                                             text=self.store.get_chat(self.current).title)
            if not ok:
                return
        try:
            renamed = ChatCommands(self.store).rename(self.current, title)
        except StoreError as exc:
            self.renameFailed.emit(f"the chat keeps its name: {exc}")
            return
        if renamed is not None:
            self.refresh()
