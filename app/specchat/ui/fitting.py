"""Widgets that fit a small screen: a label that elides, a row that wraps, a status bar whose messages elide.

The window's minimum width is the sum of its parts' minimum widths, so one label sized to its
full text (a long model file name) made the window wider than a 1280 px screen.  An
:class:`ElidedLabel` asks for little room and shows what fits, the full text in its tooltip; a
:class:`FlowRow` lays its widgets out left to right and wraps them onto more rows when the
width runs out, so its minimum width is its widest item's, not the sum of them all.  A
:class:`StatusBar` ends a message too long for the room left of its permanent widgets in "…", the
whole message in its tooltip (Qt's own cuts it off mid-word under them).
"""

from __future__ import annotations

from PySide6.QtCore import QElapsedTimer, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLabel, QLayout, QLayoutItem, QSizePolicy, QStatusBar, QStyle, QWidget

ELIDED_MIN_CHARS = 12  # an elided label never asks for less than this many average characters
SLACK = 6  # px beyond the text's advance: elidedText rounds differently, and a full text must never elide
ELASTIC_WANT_CHARS = 40  # a row's elastic label is given this much before the items after it wrap


class ElidedLabel(QLabel):
    """A one-line plain-text label that shows as much of its text as fits, ending in "…";
    the full text is its tooltip whenever it does not fit (a tooltip set by hand is kept)."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._tip = ""
        self.setTextFormat(Qt.TextFormat.PlainText)
        # Preferred: a layout gives it its full text's width when there is room, and shrinks it down to
        # its minimumSizeHint (a few characters) when there is not
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def text(self) -> str:  # the full text, whatever is shown
        return self._full

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        self.updateGeometry()
        self._elide()

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt's name)
        self._tip = tip
        self._elide()

    def sizeHint(self) -> QSize:
        fm = self.fontMetrics()
        m = self.contentsMargins()
        return QSize(fm.horizontalAdvance(self._full) + m.left() + m.right() + SLACK, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        fm = self.fontMetrics()
        m = self.contentsMargins()
        width = min(fm.horizontalAdvance(self._full), ELIDED_MIN_CHARS * fm.averageCharWidth())
        return QSize(width + m.left() + m.right() + SLACK, super().minimumSizeHint().height())

    @property
    def elided(self) -> bool:
        return super().text() != self._full

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        m = self.contentsMargins()
        room = max(0, self.width() - m.left() - m.right())
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideMiddle, room)
        QLabel.setText(self, shown)
        tip = self._tip
        if shown != self._full:
            tip = self._full + (f"\n{tip}" if tip else "")
        QLabel.setToolTip(self, tip)


class FlowRow(QLayout):
    """Widgets left to right, wrapping onto more rows when the width runs out.

    ``elastic`` (a widget in the row, usually an :class:`ElidedLabel`) shrinks towards its
    minimum before anything wraps, and takes all the room left in its row (so what follows it
    sits at the right edge, as after a stretch).
    """

    def __init__(self, parent: QWidget | None = None, *, elastic: QWidget | None = None) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self.elastic = elastic

    # -- QLayout's interface -----------------------------------------------------------------

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 (Qt's name)
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 (Qt's name)
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 (Qt's name)
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802 (Qt's name)
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's name)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt's name)
        return self._place(QRect(0, 0, width, 0), apply=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802 (Qt's name)
        super().setGeometry(rect)
        self._place(rect, apply=True)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """Everything on one row."""
        items = self._visible()
        m = self.contentsMargins()
        width = sum(i.sizeHint().width() for i in items) + self._gap() * max(0, len(items) - 1)
        height = max((i.sizeHint().height() for i in items), default=0)
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def minimumSize(self) -> QSize:  # noqa: N802 (Qt's name)
        """The widest single item: everything else wraps."""
        m = self.contentsMargins()
        width = max((self._min_width(i) for i in self._visible()), default=0)
        return QSize(width + m.left() + m.right(), self.heightForWidth(width + m.left() + m.right()))

    # -- placing ---------------------------------------------------------------------------

    def _visible(self) -> list[QLayoutItem]:
        return [i for i in self._items if (w := i.widget()) is None or not w.isHidden()]

    def _gap(self) -> int:
        gap = self.spacing()
        if gap < 0:
            parent = self.parentWidget()
            gap = parent.style().pixelMetric(QStyle.PixelMetric.PM_LayoutHorizontalSpacing) if parent else 6
        return max(gap, 6)

    def _is_elastic(self, item: QLayoutItem) -> bool:
        return self.elastic is not None and item.widget() is self.elastic

    @staticmethod
    def _min_width(item: QLayoutItem) -> int:
        widget = item.widget()
        return max((widget.minimumSizeHint() if widget is not None else item.minimumSize()).width(), 0)

    def _elastic_want(self, item: QLayoutItem) -> int:
        widget = item.widget() or self.parentWidget()
        chars = ELASTIC_WANT_CHARS * (widget.fontMetrics().averageCharWidth() if widget is not None else 7)
        return max(self._min_width(item), min(item.sizeHint().width(), chars))

    def _place(self, rect: QRect, *, apply: bool) -> int:
        """Lay the items out in ``rect`` (when ``apply``); return the height they take."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        room, gap = max(1, area.width()), self._gap()
        rows: list[list[QLayoutItem]] = [[]]
        used = 0
        for item in self._visible():
            # an elastic item counts at a readable width while rows are filled; the rest at their hints
            want = self._elastic_want(item) if self._is_elastic(item) else item.sizeHint().width()
            want = min(want, room)
            extra = want + (gap if rows[-1] else 0)
            if rows[-1] and used + extra > room:
                rows.append([])
                used, extra = 0, want
            rows[-1].append(item)
            used += extra
        y = area.y()
        for row in rows:
            widths = [min(room, self._elastic_want(i) if self._is_elastic(i) else i.sizeHint().width()) for i in row]
            if sum(widths) + gap * max(0, len(row) - 1) > room:  # the elastic item alone cannot have its want
                widths = [min(room, self._min_width(i) if self._is_elastic(i) else i.sizeHint().width()) for i in row]
            left = room - sum(widths) - gap * max(0, len(row) - 1)
            for k, item in enumerate(row):
                if self._is_elastic(item) and left > 0:
                    widths[k] += left
                    left = 0
            height = max((i.sizeHint().height() for i in row), default=0)
            if apply:
                x = area.x()
                for item, width in zip(row, widths, strict=True):
                    h = item.sizeHint().height()
                    item.setGeometry(QRect(QPoint(x, y + (height - h) // 2), QSize(width, h)))
                    x += width + gap
            y += height + (self._vgap() if row is not rows[-1] else 0)
        return y - area.y() + m.top() + m.bottom()

    def _vgap(self) -> int:
        return 4


class StatusBar(QStatusBar):
    """A status bar whose temporary messages fit: one too long for the room left of the permanent
    widgets (the memory, the API) ends in "…" and is whole in the bar's tooltip, and is fitted again
    when the window is resized.  :meth:`currentMessage` is the whole message, as it was given."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._timeout = 0
        self._since = QElapsedTimer()
        self._permanent: list[QWidget] = []
        self.messageChanged.connect(self._changed)

    def addPermanentWidget(self, widget: QWidget, stretch: int | None = 0) -> None:  # noqa: N802 (Qt's name)
        self._permanent.append(widget)
        super().addPermanentWidget(widget, stretch or 0)

    def showMessage(self, text: str, timeout: int | None = 0) -> None:  # noqa: N802 (Qt's name)
        timeout = timeout or 0
        self._full, self._timeout = text, timeout
        self._since.start()
        self._show(timeout)

    def currentMessage(self) -> str:  # noqa: N802 (Qt's name)
        shown = super().currentMessage()
        return self._full if shown and self._full else shown

    def room(self) -> int:
        """The width a message is drawn in: left of the first permanent widget shown (as Qt lays it)."""
        right = self.width() - 12
        for widget in self._permanent:
            if widget.isVisible():
                right = min(right, widget.x() - 2)
        return max(0, right - 6 - SLACK)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self._full and super().currentMessage():
            left = self._timeout - self._since.elapsed() if self._timeout else 0
            if not self._timeout or left > 0:
                self._show(max(left, 1) if self._timeout else 0)

    def _show(self, timeout: int) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, self.room())
        super().showMessage(shown, timeout)
        self.setToolTip(self._full if shown != self._full else "")

    def _changed(self, shown: str) -> None:
        if not shown:  # the message timed out or was cleared
            self._full = ""
            self.setToolTip("")
