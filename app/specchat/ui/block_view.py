"""One rendered markdown block of a message, never wider than the transcript.

A word-wrapped rich-text :class:`QLabel` asks, as its minimum width, for its longest line that
cannot wrap: a code line (``<pre>`` never wraps), a wide table, a long URL.  The conversation is a
scroll area that resizes its column to the view but never below the column's minimum width, and
shows no horizontal scroll bar, so one 300-character code line (2,200 px) made the whole
transcript 2,200 px wide: every paragraph wrapped at that width, and the footers, the Copy links
and the inline editor's buttons lay past the right edge, out of reach.

A :class:`BlockView` holds the block's label as a child it places itself and asks for almost no
width.  At the width it is given, the label takes that width when its text fits (prose wraps as
before); when the block has something wider, the label is laid out at its own minimum width and
slides under a horizontal scroll bar of this block's own, while everything around it keeps the
view's width.  A code block's "Copy" line is a label of its own below the scroll bar, so it stays
at the view's right edge however wide the code is.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QLabel, QScrollBar, QSizePolicy, QStyle, QWidget

from .markdown import split_code_block

MIN_WIDTH_CHARS = 8  # what a block asks for, at the least: anything wider scrolls inside it
WHEEL_STEP_CHARS = 6  # characters a wheel notch moves the code sideways


def text_label(parent: QWidget | None = None) -> QLabel:
    """A selectable rich-text label whose links the message handles."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
    label.setOpenExternalLinks(False)
    return label


class BlockView(QWidget):
    """A block's label, scrolled sideways on its own when it is wider than the view (see the module)."""

    linkActivated = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = text_label(self)
        self.label.linkActivated.connect(self.linkActivated)
        self.bar: QScrollBar | None = None  # made the first time the block is wider than the view
        self.copy_line: QLabel | None = None  # a code block's "lang  Copy" line, made for the first one
        self._html = ""
        self._css = ""
        # the label's minimum width and its heights by width, until its text, style or font change: a
        # layout asks for them many times a pass, and each answer is a layout of the rich text
        self._min_width: int | None = None
        self._heights: dict[int, int] = {}
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    # -- content ---------------------------------------------------------------------------

    def set_html(self, html: str) -> None:
        """Show a block's HTML: a code block as its code (scrolling) and its Copy line (staying)."""
        if html == self._html:
            return
        self._html = html
        parts = split_code_block(html)
        code, copy = parts if parts is not None else (html, "")
        self.label.setText(code)
        if copy:
            line = self._copy_line()
            line.setText(copy)
            line.show()
        elif self.copy_line is not None:
            self.copy_line.hide()
            self.copy_line.setText("")
        self._changed()

    def text(self) -> str:
        """The block's HTML as given (code and Copy line together)."""
        return self._html

    def set_css(self, css: str) -> None:
        if css == self._css:
            return
        self._css = css
        for label in (self.label, self.copy_line):
            if label is not None:
                label.setStyleSheet(css)
        self._changed()

    def labels(self) -> list[QLabel]:
        """The labels that show text: the block's, and a code block's Copy line."""
        line = self.copy_line
        return [self.label] + ([line] if line is not None and not line.isHidden() else [])

    @property
    def scrolls(self) -> bool:
        """Whether the block is wider than its view now, and has its scroll bar."""
        return self.bar is not None and not self.bar.isHidden()

    def show_x(self, x: int) -> None:
        """Scroll the block sideways so that ``x`` of its label (a search's match) is in view, a third in;
        nothing where the block does not scroll."""
        if not self.scrolls or self.bar is None:
            return
        left = self.bar.value()
        if not left <= x < left + self.width():
            self.bar.setValue(max(0, x - self.width() // 3))

    def _copy_line(self) -> QLabel:
        if self.copy_line is None:
            self.copy_line = text_label(self)
            self.copy_line.setStyleSheet(self._css)
            self.copy_line.linkActivated.connect(self.linkActivated)
        return self.copy_line

    def _scroll_bar(self) -> QScrollBar:
        if self.bar is None:
            self.bar = QScrollBar(Qt.Orientation.Horizontal, self)
            self.bar.setObjectName("block-scroll")
            self.bar.valueChanged.connect(lambda value: self.label.move(-value, 0))
        return self.bar

    # -- size ------------------------------------------------------------------------------

    def _content_width(self, width: int) -> int:
        """How wide the label is laid out in a view ``width`` wide: the view's, or its own minimum."""
        if self._min_width is None:
            self._min_width = self.label.minimumSizeHint().width()
        return max(width, self._min_width)

    def _label_height(self, width: int) -> int:
        height = self._heights.get(width)
        if height is None:
            if len(self._heights) > 8:
                self._heights.clear()
            height = self._heights[width] = self.label.heightForWidth(width)
        return height

    def _bar_height(self) -> int:
        return self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)

    def _copy_height(self, width: int) -> int:
        line = self.copy_line
        if line is None or line.isHidden():
            return 0
        height = self._heights.get(-width)  # the copy line's, by the negated width
        if height is None:
            height = self._heights[-width] = line.heightForWidth(width)
        return height

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt's name)
        inner = self._content_width(width)
        return (self._label_height(inner) + (self._bar_height() if inner > width else 0)
                + self._copy_height(width))

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        width = min(self.label.sizeHint().width(), 80 * self.fontMetrics().averageCharWidth())
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """Almost no width: what does not fit the view scrolls inside the block."""
        width = min(self.label.minimumSizeHint().width(), MIN_WIDTH_CHARS * self.fontMetrics().averageCharWidth())
        return QSize(width, self.fontMetrics().lineSpacing())

    # -- placing ---------------------------------------------------------------------------

    def _changed(self) -> None:
        """The text, style or font changed: sizes anew, and the label placed again (now if shown, else
        when it shows)."""
        self._min_width = None
        self._heights.clear()
        self.updateGeometry()
        if self.isVisible():
            self._place()

    def _place(self) -> None:
        width = self.width()
        inner = self._content_width(width)
        height = self._label_height(inner)
        over = inner > width
        offset = 0
        if over:
            bar = self._scroll_bar()
            bar.setRange(0, inner - width)
            bar.setPageStep(width)
            bar.setSingleStep(WHEEL_STEP_CHARS * self.fontMetrics().averageCharWidth())
            bar.setGeometry(0, height, width, self._bar_height())
            bar.show()
            offset = bar.value()
        elif self.bar is not None:
            self.bar.hide()
            self.bar.setValue(0)
        self.label.setGeometry(-offset, 0, inner, height)
        if self.copy_line is not None and not self.copy_line.isHidden():
            top = height + (self._bar_height() if over else 0)
            self.copy_line.setGeometry(0, top, width, self._copy_height(width))

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._place()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self._place()

    def event(self, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.LayoutRequest:  # a label's text or font changed its size
            self._changed()
            return True
        if kind in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._changed()
        return super().event(event)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt's name)
        """A sideways wheel (or Shift with the wheel) scrolls the block; a plain one, the conversation."""
        delta = event.angleDelta()
        sideways = delta.x() or (delta.y() if event.modifiers() & Qt.KeyboardModifier.ShiftModifier else 0)
        if not self.scrolls or not sideways or self.bar is None:
            event.ignore()
            return
        self.bar.setValue(self.bar.value() - round(sideways / 120 * self.bar.singleStep()))
        event.accept()
