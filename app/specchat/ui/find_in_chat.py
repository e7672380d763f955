"""A search's words found in the open chat: every match highlighted, the current one scrolled to.

Chat → Search chats (Ctrl+F) filters the chat list by its words (``Store.list_chats``); the chat
on screen shows where they are: each word, case-insensitive, in the messages as shown (the
answers' and questions' text, not a collapsed reasoning), every match on ``Theme.match`` and the
current one on ``Theme.match_current``.  Enter in the search field, F3 and Shift+F3 (Chat → Next
match / Previous match) step through them, scrolling the conversation to each.

A message is a column of rich-text labels (:mod:`.message_widget`); a label has no extra
selections, so its HTML is loaded into a :class:`QTextDocument`, the matches found there
(``QTextDocument.find``) and given a background, and the label shows that document's HTML until the
search changes.  A label that rendered again meanwhile (a streaming tail) is left as it is now.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, QPoint, Signal, Slot
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QLabel

from specchat.store.chats import search_words

from .conversation import ConversationView
from .theme import controller, current


@dataclass(frozen=True, slots=True)
class Match:
    label: QLabel
    start: int  # in the label's document
    end: int


class ChatFind(QObject):
    changed = Signal(int, int)  # the current match (1-based, 0: none) and how many there are

    def __init__(self, conversation: ConversationView, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.conversation = conversation
        self.words: list[str] = []
        self.matches: list[Match] = []
        self.current = -1
        self._original: dict[QLabel, str] = {}  # what a highlighted label showed before
        self._shown: dict[QLabel, str] = {}  # the highlighted HTML it was given
        controller().changed.connect(self._theme_changed)  # a bound slot: gone with this object

    def set_text(self, text: str) -> None:
        """The search field's text: its words are what is highlighted."""
        words = search_words(text)
        if words != self.words:
            self.words = words
            self.refresh()

    def refresh(self) -> None:
        """Find the words again in the chat as it is on screen (after a chat was opened or re-rendered),
        the first match current and scrolled to."""
        self._restore()
        self.matches = self._find() if self.words else []
        self.current = 0 if self.matches else -1
        self._paint()

    @Slot(object)
    def _theme_changed(self, _theme: object) -> None:
        self.refresh()  # every message rendered again in the new colours: find and highlight anew

    def step(self, forward: bool = True) -> None:
        """The next (or previous) match becomes current, around the end, and is scrolled to."""
        if not self.matches:
            self.changed.emit(0, 0)
            return
        self.current = (self.current + (1 if forward else -1)) % len(self.matches)
        self._paint()

    # -- finding --------------------------------------------------------------------------------

    def _labels(self) -> list[QLabel]:
        labels: list[QLabel] = []
        for w in self.conversation.messages:
            if w.editor is None:
                labels.extend(label for label in w.body.labels() if label.text())
        return labels

    def _document(self, label: QLabel, html: str) -> QTextDocument:
        doc = QTextDocument()
        doc.setDefaultFont(label.font())
        doc.setHtml(html)
        return doc

    def _find(self) -> list[Match]:
        found: list[Match] = []
        for label in self._labels():
            doc = self._document(label, label.text())
            spans: list[tuple[int, int]] = []
            for word in self.words:
                cursor = doc.find(word, 0)
                while not cursor.isNull():
                    spans.append((cursor.selectionStart(), cursor.selectionEnd()))
                    cursor = doc.find(word, cursor)
            found.extend(Match(label, a, b) for a, b in sorted(set(spans)))
        return found

    # -- showing --------------------------------------------------------------------------------

    def _paint(self) -> None:
        theme = current()
        by_label: dict[QLabel, list[tuple[Match, bool]]] = {}
        for i, m in enumerate(self.matches):
            by_label.setdefault(m.label, []).append((m, i == self.current))
        for label, marks in by_label.items():
            html = self._original.get(label, label.text())
            doc = self._document(label, html)
            for m, is_current in marks:
                cursor = QTextCursor(doc)
                cursor.setPosition(m.start)
                cursor.setPosition(m.end, QTextCursor.MoveMode.KeepAnchor)
                fmt = QTextCharFormat()
                fmt.setBackground(QColor(theme.match_current if is_current else theme.match))
                fmt.setForeground(QColor(theme.match_text))
                cursor.mergeCharFormat(fmt)
            self._original[label] = html
            self._shown[label] = doc.toHtml()
            label.setText(self._shown[label])
        if self.matches:
            self._scroll_to(self.matches[self.current])
        self.changed.emit(self.current + 1, len(self.matches))

    def _scroll_to(self, m: Match) -> None:
        doc = self._document(m.label, m.label.text())
        doc.setTextWidth(m.label.contentsRect().width())
        cursor = QTextCursor(doc)
        cursor.setPosition(m.start)
        block = doc.documentLayout().blockBoundingRect(cursor.block())
        line = cursor.block().layout().lineForTextPosition(cursor.positionInBlock())
        y = block.top() + (line.y() + line.height() / 2 if line.isValid() else 0)
        self.conversation.show_point(m.label, QPoint(0, int(y)))

    def _restore(self) -> None:
        """Labels back to their own HTML (those still showing what this gave them)."""
        for label, html in self._original.items():
            try:
                if label.text() == self._shown.get(label):
                    label.setText(html)
            except RuntimeError:  # the message was removed (another chat opened)
                pass
        self._original.clear()
        self._shown.clear()
