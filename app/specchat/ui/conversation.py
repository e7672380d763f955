"""The conversation pane: a column of message widgets; only the streaming one re-renders.

Text arrives at token rate but is painted at frame rate: appends go into the
widget's buffer and a timer refreshes it at most 15 times a second; the widget
re-renders only the block being written (see :mod:`.markdown`).  A theme change
restyles every message.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QScrollArea, QVBoxLayout, QWidget

from .message_widget import MessageWidget
from .theme import Theme, controller

REPAINT_MS = 66


class ConversationView(QScrollArea):
    tintRequested = Signal(bool)  # a message's footer switch: turn the draft tint on or off everywhere

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget()
        self._layout = QVBoxLayout(inner)
        self._layout.setContentsMargins(12, 12, 12, 12)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(inner)
        self.messages: list[MessageWidget] = []
        self.placeholder: QWidget | None = None  # shown above no message (set_placeholder)
        self.tint = False
        self._dirty: MessageWidget | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(REPAINT_MS)
        self._timer.timeout.connect(self._repaint)
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self._stick = True
        controller().changed.connect(self.set_theme)

    def set_theme(self, theme: Theme) -> None:
        """Every message again in ``theme`` (once per change, not per frame)."""
        for w in self.messages:
            w.set_theme(theme)

    def set_placeholder(self, widget: QWidget) -> None:
        """A widget at the top of an empty conversation, centred (the empty state); hidden until
        :meth:`show_placeholder`, and by the first message added."""
        self.placeholder = QWidget()  # a row that centres it: an aligned item would lose its height for width
        row = QHBoxLayout(self.placeholder)
        row.setContentsMargins(0, 0, 0, 0)
        row.addStretch(1)
        row.addWidget(widget, 100)
        row.addStretch(1)
        self.placeholder.hide()
        self._layout.insertWidget(0, self.placeholder)

    def show_placeholder(self, on: bool) -> None:
        if self.placeholder is not None:
            self.placeholder.setVisible(on and not self.messages)

    @property
    def placeholder_shown(self) -> bool:
        return self.placeholder is not None and not self.placeholder.isHidden()

    def clear(self) -> None:
        for w in self.messages:
            w.setParent(None)
            w.deleteLater()
        self.messages.clear()
        self._dirty = None

    def add(self, role: str, content: str = "", reasoning: str = "", footer: str = "") -> MessageWidget:
        w = MessageWidget(role, content, reasoning, footer)
        w.tint = self.tint
        w.tintToggled.connect(self.tintRequested)
        self._layout.insertWidget(self._layout.count() - 1, w)
        self.messages.append(w)
        if self.placeholder is not None:
            self.placeholder.hide()
        self._stick = True
        return w

    def remove(self, w: MessageWidget) -> None:
        if w in self.messages:
            self.messages.remove(w)
            w.setParent(None)
            w.deleteLater()
        if self._dirty is w:
            self._dirty = None

    def mark_dirty(self, w: MessageWidget) -> None:
        """The widget's text changed; repaint it on the next frame, not now."""
        self._dirty = w
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        self._repaint()
        self._timer.stop()

    def _repaint(self) -> None:
        if self._dirty is not None:
            self._dirty.refresh()
            self._dirty = None
        else:
            self._timer.stop()

    def set_tint(self, on: bool) -> None:
        self.tint = on
        for w in self.messages:
            w.tint = on
            w.refresh()

    def show_message(self, w: MessageWidget) -> None:
        """Scroll to ``w`` (once laid out) instead of following the end (the pager's message stays put)."""
        self._stick = False
        QTimer.singleShot(0, lambda: self.ensureWidgetVisible(w) if w in self.messages else None)

    def show_point(self, w: QWidget, point: QPoint) -> None:
        """Scroll so that ``point`` of ``w`` (a widget in a message) is in view, a third down (once laid
        out), instead of following the end: a search's match."""
        self._stick = False

        def scroll() -> None:
            inner = self.widget()
            if inner is None:
                return
            try:
                at = w.mapTo(inner, point)
            except (RuntimeError, ValueError):  # the message went meanwhile (another chat opened)
                return
            margin = self.viewport().height() // 3
            self.ensureVisible(at.x(), at.y(), 0, margin)

        QTimer.singleShot(0, self, scroll)

    def _follow(self, _lo: int, hi: int) -> None:
        bar = self.verticalScrollBar()
        if self._stick:
            bar.setValue(hi)

    def wheelEvent(self, event) -> None:  # scrolling up stops following the stream
        super().wheelEvent(event)
        bar = self.verticalScrollBar()
        self._stick = bar.value() >= bar.maximum() - 4
