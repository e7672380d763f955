"""Undo a deleted chat: "Deleted “title”  [Undo]  ✕" over the bottom of the conversation for a while.

Delete moves a chat to the store's trash (:meth:`Store.trash_chat`); this bar offers it back, as a
mail client does.  Deleting more while it shows stacks them: Undo (its button, or Ctrl+Z) restores
the last one deleted, and the bar then offers the one before, each in turn, until none is left or
:data:`UNDO_MS` pass without an undo.  What it no longer offers stays in the trash until the app
starts again (the session purges it then).

Ctrl+Z is the window's (Chat → Undo delete) while the bar shows, even from the composer or the
search field, unless that field has typing of its own to undo: then Ctrl+Z undoes the typing, as
everywhere.  The bar floats over the window (no layout of the window changes for it), centred at
the bottom of the widget it is anchored to (the conversation, just above the composer: the chat
list may be hidden), and follows it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QToolButton,
    QWidget,
)

from .theme import Theme, controller, current

UNDO_MS = 10_000  # how long a deleted chat is offered back
MARGIN = 12  # from the anchor's bottom edge, and its sides at the least
TITLE_PX = 320  # a longer title is elided in the middle (the tooltip has it whole), less in a narrow window


class UndoBar(QFrame):
    """The deleted chats that can still be restored, newest last; see the module's docstring."""

    undoRequested = Signal(int)  # the chat to restore and open
    activeChanged = Signal(bool)  # whether an undo is offered (the window's Undo delete follows it)

    def __init__(self, window: QWidget, anchor: QWidget) -> None:
        super().__init__(window)
        self.setObjectName("undoBar")
        self.setAccessibleName("Undo delete")
        self.anchor = anchor
        self._pending: list[tuple[int, str]] = []  # (chat id, title), the last deleted last
        self.label = QLabel()
        self.undo_button = QPushButton("Undo")
        self.undo_button.setObjectName("undoButton")
        self.undo_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.undo_button.setToolTip(f"Restore the chat ({QKeySequence(QKeySequence.StandardKey.Undo).toString()})")
        self.undo_button.clicked.connect(self.undo)
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss (the chat stays deleted)")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self.dismiss)
        row = QHBoxLayout(self)
        row.setContentsMargins(14, 6, 6, 6)
        row.setSpacing(12)
        row.addWidget(self.label)
        row.addWidget(self.undo_button)
        row.addWidget(self.close_button)
        self._timer = QTimer(self, singleShot=True, interval=UNDO_MS)
        self._timer.timeout.connect(self.dismiss)
        anchor.installEventFilter(self)  # moved or resized (a dock shown, the window resized): follow it
        controller().changed.connect(self._restyle)
        self._restyle(current())
        self.hide()

    @property
    def pending(self) -> list[int]:
        """The chats it can still restore, the last deleted last."""
        return [chat_id for chat_id, _title in self._pending]

    def push(self, chat_id: int, title: str) -> None:
        """A chat was deleted (trashed): offer it back, for :data:`UNDO_MS` from now."""
        self._pending.append((chat_id, title))
        self._show_last()

    def undo(self) -> int | None:
        """Ask for the last deleted chat back (the window restores it, on ``undoRequested``, and calls
        :meth:`restored` once that is stored); its id, or None.  Until then the offer stays: a restore
        the store refused (a full disk) leaves it where it was, its time started again, to try again."""
        if not self._pending:
            return None
        chat_id = self._pending[-1][0]
        self._timer.start()  # a refused restore still has the whole time to be tried again
        self.undoRequested.emit(chat_id)
        return chat_id

    def restored(self, chat_id: int) -> None:
        """``chat_id`` is out of the trash: its offer goes; the one deleted before it shows, with its own time."""
        self._pending = [p for p in self._pending if p[0] != chat_id]
        if self._pending:
            self._show_last()
        else:
            self.dismiss()

    def dismiss(self) -> None:
        """No more undo: the chats stay in the trash (purged when the app starts next)."""
        self._timer.stop()
        self._pending.clear()
        if self.isVisible():
            self.hide()

    # -- showing -----------------------------------------------------------------------------

    def _show_last(self) -> None:
        self._timer.start()
        self.show()
        self._place()
        self.raise_()

    def _place(self) -> None:
        """Centred at the anchor's bottom, the title elided so that the bar fits in the anchor."""
        area = self.anchor.rect().translated(self.anchor.mapTo(self.window(), self.anchor.rect().topLeft()))
        room = area.width() - 2 * MARGIN
        title = self._pending[-1][1] if self._pending else ""
        self.label.setText("Deleted “”")
        fixed = self.sizeHint().width()  # the bar without the title
        shown = self.label.fontMetrics().elidedText(title, Qt.TextElideMode.ElideMiddle,
                                                    max(min(TITLE_PX, room - fixed), 0))
        self.label.setText(f"Deleted “{shown}”")
        self.label.setToolTip(title if shown != title else "")
        width, height = min(self.sizeHint().width(), max(room, 0)), self.sizeHint().height()
        self.setGeometry(area.center().x() - width // 2, area.bottom() - MARGIN - height, width, height)

    def _restyle(self, theme: Theme) -> None:
        # the colours of the text on its surface, swapped: it stands out on either theme, same contrast
        self.setStyleSheet(
            f"QFrame#undoBar {{ background: {theme.text}; border-radius: 6px; }}"
            f" QFrame#undoBar QLabel {{ color: {theme.base}; }}"
            f" QFrame#undoBar QToolButton {{ color: {theme.base}; border: none; padding: 2px 6px; }}"
            f" QPushButton#undoButton {{ color: {theme.text}; background: {theme.base}; border: none;"
            f" border-radius: 4px; padding: 4px 14px; font-weight: bold; }}")

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        app = QApplication.instance()
        if app is not None:
            app.installEventFilter(self)  # see eventFilter: Ctrl+Z from a text field
        self.activeChanged.emit(True)

    def hideEvent(self, event) -> None:  # noqa: N802
        super().hideEvent(event)
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self)
        self.activeChanged.emit(False)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        kind = event.type()
        if watched is self.anchor and kind in (QEvent.Type.Resize, QEvent.Type.Move) and self.isVisible():
            self._place()
        elif (kind == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent)
              and event.matches(QKeySequence.StandardKey.Undo) and isinstance(watched, QWidget)
              and watched.window() is self.window() and not _has_own_undo(watched)):
            return True  # left unaccepted: the field lets the window's Undo delete have the key
        return False


def _has_own_undo(widget: QWidget) -> bool:
    """Whether Ctrl+Z in this widget would undo something typed in it."""
    if isinstance(widget, QLineEdit):
        return widget.isUndoAvailable()
    if isinstance(widget, (QTextEdit, QPlainTextEdit)):
        return not widget.isReadOnly() and widget.document().isUndoAvailable()
    return False
