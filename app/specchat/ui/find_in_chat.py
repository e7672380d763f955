"""A search's words found in the open chat: every match highlighted, the current one scrolled to.

Chat → Search chats (Ctrl+F) filters the chat list by its words (``Store.list_chats``); the chat
on screen shows where they are: each word, case-insensitive, in the messages as shown (the
answers' and questions' text, not a collapsed reasoning), every match on ``Theme.match`` and the
current one on ``Theme.match_current``.  Enter in the search field, F3 and Shift+F3 (Chat → Next
match / Previous match) step through them, scrolling the conversation to each.

A message is a column of rich-text labels (:mod:`.message_widget`); a label has no extra
selections, so a match is found in the text between its HTML's tags (never in a tag or an entity)
and wrapped in a coloured span, and the label shows that HTML until the search changes: the rest
of the HTML is left as it was (a round trip through a QTextDocument would rewrite it: a code
block's lines wrapped).  The current match is scrolled to where a :class:`QTextDocument` of the
label lays it out.  A label that rendered again meanwhile (a streaming tail) is left as it is now, and
the words are found again once the answer is done (:meth:`ChatFind.rehighlight`, which keeps the
current match and the scroll).
"""

from __future__ import annotations

import html as html_lib
import re
from dataclasses import dataclass

from PySide6.QtCore import QObject, QPoint, Signal, Slot
from PySide6.QtGui import QColor, QTextCursor, QTextDocument
from PySide6.QtWidgets import QLabel

from specchat.store.chats import search_words

from .block_view import BlockView
from .conversation import ConversationView
from .theme import controller, current

_TAGS = re.compile(r"(<[^>]*>)")  # a label's HTML: text and tags, alternately
_ENTITIES = re.compile(r"(&#?\w+;)")  # a text's entities: never matched into


@dataclass(frozen=True, slots=True)
class Match:
    label: QLabel
    part: int  # which text part of the label's HTML (_TAGS's split)
    start: int  # in that part
    end: int


def text_spans(text: str, words: list[str]) -> list[tuple[int, int]]:
    """Where the words are in one HTML text (between tags), case-insensitive, outside entities; overlapping
    matches merged, in order."""
    folded = text.casefold() if len(text.casefold()) == len(text) else text.lower()
    entities = [(m.start(), m.end()) for m in _ENTITIES.finditer(text)]
    spans: list[tuple[int, int]] = []
    for word in words:
        needle = html_lib.escape(word, quote=False).casefold()
        at = folded.find(needle)
        while needle and at >= 0:
            end = at + len(needle)
            if not any(a < end and at < b for a, b in entities) or needle.startswith("&"):
                spans.append((at, end))
            at = folded.find(needle, at + 1)
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def highlighted(html: str, spans: dict[int, list[tuple[tuple[int, int], str]]]) -> str:
    """``html`` with each text part's spans ((start, end), css) wrapped in a styled <span>."""
    parts = _TAGS.split(html)
    for index, marks in spans.items():
        text = parts[index]
        for (a, b), css in sorted(marks, reverse=True):
            text = f"{text[:a]}<span style='{css}'>{text[a:b]}</span>{text[b:]}"
        parts[index] = text
    return "".join(parts)


def _position_of(doc: QTextDocument, background: QColor) -> int:
    """Where the first text on ``background`` starts in ``doc`` (0: none)."""
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.isValid() and fragment.charFormat().background().color() == background:
                return fragment.position()
            it += 1
        block = block.next()
    return 0


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

    def rehighlight(self) -> None:
        """Find the words again where the chat re-rendered (an answer finished, a message changed), keeping
        the current match's number where there still is one and the conversation where the user left it."""
        if not self.words:
            return
        keep = self.current
        self._restore()
        self.matches = self._find()
        self.current = min(max(keep, 0), len(self.matches) - 1) if self.matches else -1
        self._paint(scroll=False)

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

    def _find(self) -> list[Match]:
        found: list[Match] = []
        for label in self._labels():
            for index, part in enumerate(_TAGS.split(label.text())):
                if index % 2 == 0 and part:  # text, not a tag
                    found.extend(Match(label, index, a, b) for a, b in text_spans(part, self.words))
        return found

    # -- showing --------------------------------------------------------------------------------

    def _paint(self, scroll: bool = True) -> None:
        theme = current()
        by_label: dict[QLabel, dict[int, list[tuple[tuple[int, int], str]]]] = {}
        for i, m in enumerate(self.matches):
            css = f"background:{theme.match_current if i == self.current else theme.match};color:{theme.match_text}"
            by_label.setdefault(m.label, {}).setdefault(m.part, []).append(((m.start, m.end), css))
        for label, spans in by_label.items():
            html = self._original.get(label, label.text())
            self._original[label] = html
            self._shown[label] = highlighted(html, spans)
            label.setText(self._shown[label])
        if self.matches and scroll:
            self._scroll_to(self.matches[self.current])
        self.changed.emit(self.current + 1, len(self.matches))

    def _scroll_to(self, m: Match) -> None:
        """Scroll to the current match: its line, where a document of the label's HTML lays it out."""
        doc = QTextDocument()
        doc.setDefaultFont(m.label.font())
        doc.setHtml(m.label.text())
        doc.setTextWidth(m.label.contentsRect().width())
        cursor = QTextCursor(doc)
        cursor.setPosition(_position_of(doc, QColor(current().match_current)))
        top = doc.documentLayout().blockBoundingRect(cursor.block()).top()
        line = cursor.block().layout().lineForTextPosition(cursor.positionInBlock())
        y = top + (line.y() + line.height() / 2 if line.isValid() else 0)
        block = m.label.parent()
        if isinstance(block, BlockView) and line.isValid():  # a long code line: its own block scrolls sideways
            x = line.cursorToX(cursor.positionInBlock())  # PySide6 types it as object: a float
            block.show_x(int(x[0] if isinstance(x, tuple) else float(x)))  # type: ignore[arg-type]
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
