"""One message in the conversation: markdown answer, collapsible reasoning, footer, copy.

The answer is a column of labels, one per finished markdown block (rendered once, see
:mod:`.markdown`) and one for the growing tail, so an update costs what the block being
written costs, whatever the answer's length.  Text can be selected within a block;
"Copy" under the answer copies all of it.

A user message has "Edit" (the bubble turns into a wrapping editor in place: Save & resend,
Cancel; Ctrl+Enter saves, Esc cancels) and, once it has versions (regenerate, edit), a pager
"‹ 2/3 ›".  The widget only says what was asked (``editSaved``, ``versionRequested``); the
chat pane does it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsOpacityEffect,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .attachment_chips import ChipRow
from .block_view import BlockView, text_label
from .markdown import Block, MarkdownStream, RunStream, TintStream, Update
from .menus import binding_text, matches
from .theme import Theme, current

BLOCK_SPACING = 6  # px between blocks: a paragraph's gap inside one label looks the same
EDIT_LINES = (3, 14)  # the in-place editor grows with its text between these many lines, then scrolls
NOT_SENT = "not sent: past the context"  # the mark of a message the latest answer's prompt left out
NOT_SENT_OPACITY = 0.55
COPIED_MS = 1500  # how long the footer's Copy says "Copied" after a copy


def _label() -> QLabel:
    return text_label()


def _constant(codes: Sequence[str]) -> Callable[[], Sequence[str]]:
    return lambda: codes


class BlockColumn(QWidget):
    """Views for finished blocks (made once each) above one view for the tail; each is a label that
    scrolls sideways on its own when its block is wider than the message (:mod:`.block_view`)."""

    linkActivated = Signal(str)  # a link that is not a code block's copy link
    codeCopied = Signal(str)  # the code of the block whose copy link was clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(BLOCK_SPACING)
        self.blocks: list[Block] = []
        self.tail: Block | None = None
        self._views: list[BlockView] = []
        self._css = ""
        self._tail = self._make(lambda: self.tail.codes if self.tail else ())
        self._layout.addWidget(self._tail)

    def _make(self, codes: Callable[[], Sequence[str]]) -> BlockView:
        view = BlockView()
        view.set_css(self._css)
        view.linkActivated.connect(lambda href: self._on_link(href, codes()))
        return view

    def apply(self, update: Update, placeholder: str = "") -> None:
        if update.reset:
            self.clear()
        for block in update.finished:
            view = self._make(_constant(block.codes))
            view.set_html(block.html)
            self._layout.insertWidget(len(self._views), view)
            self._views.append(view)
            self.blocks.append(block)
        self.tail = update.tail
        text = update.tail.html if update.tail else ("" if self.blocks else placeholder)
        self._tail.set_html(text)
        self._tail.setVisible(bool(text))

    def clear(self) -> None:
        for view in self._views:
            view.setParent(None)
            view.deleteLater()
        self._views.clear()
        self.blocks.clear()
        self.tail = None

    def set_text_css(self, css: str) -> None:
        """A style sheet for every label (the reasoning's muted colour)."""
        self._css = css
        for view in (*self._views, self._tail):
            view.set_css(css)

    def text(self) -> str:
        """The HTML shown, all blocks in order (the tail's last)."""
        return "".join(b.html for b in self.blocks) + (self.tail.html if self.tail else "")

    def codes(self) -> list[str]:
        return [c for b in (*self.blocks, *([self.tail] if self.tail else [])) for c in b.codes]

    def views(self) -> list[BlockView]:
        """One per finished block, then the tail's."""
        return [*self._views, self._tail]

    def labels(self) -> list[QLabel]:
        """The labels that show text: each block's, and a code block's Copy line after its code."""
        return [label for view in self.views() for label in view.labels()]

    def _on_link(self, href: str, codes: Sequence[str]) -> None:
        if href.startswith("copy:"):
            index = href[len("copy:"):]
            # an answer can hold a link to "copy:…" of its own: only our numbers copy anything
            if index.isdigit() and int(index) < len(codes):
                self.codeCopied.emit(codes[int(index)])
            return
        self.linkActivated.emit(href)


class EditBox(QPlainTextEdit):
    """The in-place editor: wraps at its width (never a horizontal scroll bar), grows with its
    text up to :data:`EDIT_LINES`; Ctrl+Enter saves, Esc cancels, Tab and Shift+Tab move to the next
    or previous field and Ctrl+Tab types a tab (the keys are :data:`.menus.BINDINGS`')."""

    saveRequested = Signal()
    cancelRequested = Signal()

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTabChangesFocus(True)  # a keyboard user can leave it (to Cancel, Save & resend)
        self.setPlainText(text)
        # after the layout pass that changed the size, not inside it (a new height mid-layout left lines
        # wrapped at the old width)
        self.document().documentLayout().documentSizeChanged.connect(lambda _size: QTimer.singleShot(0, self, self._fit))
        self._fit()

    def event(self, event: QEvent) -> bool:
        # Esc is the window's Stop shortcut while the chat generates: in the editor it cancels the edit
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent) \
                and event.key() == Qt.Key.Key_Escape:
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if matches(event, "editor.save"):
            self.saveRequested.emit()
        elif matches(event, "editor.cancel"):
            self.cancelRequested.emit()
        elif matches(event, "text.tab"):
            self.insertPlainText("\t")
        else:
            super().keyPressEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        QTimer.singleShot(0, self, self._fit)  # a new width wraps the text into more or fewer lines

    def _fit(self) -> None:
        lo, hi = EDIT_LINES
        lines = min(max(int(self.document().size().height()), lo), hi)  # a plain-text document's height is in lines
        frame = 2 * self.frameWidth() + int(2 * self.document().documentMargin())
        self.setFixedHeight(lines * self.fontMetrics().lineSpacing() + frame + 2)


class MessageWidget(QFrame):
    """Shows one message; the streaming one is updated in place (only its tail re-renders)."""

    copyRequested = Signal(str)
    tintToggled = Signal(bool)  # the footer's draft-tint switch was clicked: the new state
    editSaved = Signal(str)  # a user message's in-place edit: Save & resend, with the new text
    versionRequested = Signal(int)  # the pager: show this version of the message

    def __init__(self, role: str, content: str = "", reasoning: str = "", footer: str = "",
                 parent=None, theme: Theme | None = None) -> None:
        super().__init__(parent)
        self.role = role
        self.content = content
        self.reasoning = reasoning
        self.footer = footer
        self.streaming = False  # set while the answer streams: its last line may be partial
        self.reasoning_open = False  # collapsed by default
        self.segments: list[tuple[str, bool]] = []  # (text, from an accepted draft) for the tinted view
        self.tint = False
        self.message_id: int | None = None  # the stored message shown (the pane sets it)
        self.version = (1, 1)  # (shown version, how many): a pager when more than one
        self.actions_enabled = True  # Edit and the pager: off while the chat generates
        self.editor: EditBox | None = None  # the in-place editor, while editing
        self._edit_row: QWidget | None = None
        self.save_button: QPushButton | None = None
        self.theme = theme or current()
        self.setObjectName(f"message-{role}")
        layout = self._column = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        self.reasoning_toggle = _label()
        self.reasoning_toggle.linkActivated.connect(self._on_link)
        self.reasoning_view = BlockColumn()
        self.markdown_view = BlockColumn()
        self.tint_view = BlockColumn()
        for column in (self.reasoning_view, self.markdown_view, self.tint_view):
            column.linkActivated.connect(self._on_link)
            column.codeCopied.connect(lambda code: self._copy(code, "Code copied"))
        self.footer_label = _label()
        self.footer_label.linkActivated.connect(self._on_link)
        self.file_chips = ChipRow(theme=self.theme)  # a question's files, above its text
        self.not_sent = False  # the latest answer's prompt left this message out (set_not_sent)
        self.not_sent_label = QLabel(NOT_SENT)
        self.not_sent_label.setToolTip("The chat's setting “Past the context” left this message out of what the "
                                       "model read for the latest answer. Nothing is deleted.")
        self.not_sent_label.hide()
        layout.addWidget(self.not_sent_label)
        layout.addWidget(self.file_chips)
        for w in (self.reasoning_toggle, self.reasoning_view, self.markdown_view, self.tint_view, self.footer_label):
            layout.addWidget(w)
        self.copied = ""  # the footer's Copy says this for COPIED_MS after a copy ("Copied", "Code copied")
        self._copied_timer = QTimer(self, singleShot=True, interval=COPIED_MS)
        self._copied_timer.timeout.connect(self._copied_over)
        self._reasoning_runs: list[tuple[str, bool]] = [("", False)]  # one run, replaced as it grows
        self._words = (0, 0)  # words counted in the reasoning, up to this character
        self._restyle()
        self.refresh()

    # -- content ------------------------------------------------------------------

    @property
    def body(self) -> BlockColumn:
        """The answer as shown: markdown, or the same markdown with the accepted draft text tinted."""
        return self.tint_view if self.tint and self.segments else self.markdown_view

    def set_content(self, content: str, reasoning: str = "", footer: str | None = None) -> None:
        """The finished message (its last line is whole)."""
        self.content, self.reasoning, self.streaming = content, reasoning, False
        if footer is not None:
            self.footer = footer
        self.refresh()

    def refresh(self) -> None:
        tinted = self.tint and bool(self.segments)
        if tinted:
            self.tint_view.apply(self._tint.update(self.content, self.segments, final=not self.streaming),
                                 self._placeholder())
        else:
            self.markdown_view.apply(self._markdown.update(self.content, final=not self.streaming),
                                     self._placeholder())
        self.tint_view.setVisible(tinted and self.editor is None)  # the editor takes the body's place
        self.markdown_view.setVisible(not tinted and self.editor is None)
        self._refresh_reasoning()
        parts = [html.escape(self.footer)] if self.footer else []
        if self.content:
            parts.append(self._link("copyall", self.copied or "Copy"))
        if any(marked for _, marked in self.segments):
            parts.append(self._link("tint", "Hide draft tint" if self.tint else "Tint draft tokens"))
        if self.role == "user" and self.editor is None:
            parts.append(self._action("edit", "Edit", self.actions_enabled))
            number, total = self.version
            if total > 1:
                parts.append(self._action(f"version:{number - 1}", "‹", self.actions_enabled and number > 1)
                             + f" {number}/{total} "
                             + self._action(f"version:{number + 1}", "›", self.actions_enabled and number < total))
        self.footer_label.setText(" · ".join(parts) if self.role != "system" else "")
        self.footer_label.setVisible(self.role != "system")

    def _action(self, href: str, text: str, enabled: bool) -> str:
        return self._link(href, text) if enabled else f"<span style='color:{self.theme.muted}'>{text}</span>"

    def set_not_sent(self, on: bool) -> None:
        """Dimmed, under a small "not sent: past the context" label, or as any message."""
        if on == self.not_sent:
            return
        self.not_sent = on
        self.not_sent_label.setVisible(on)
        if on:
            effect = QGraphicsOpacityEffect(self)
            effect.setOpacity(NOT_SENT_OPACITY)
            self.setGraphicsEffect(effect)
        else:
            self.setGraphicsEffect(None)  # type: ignore[arg-type]

    # -- editing in place (user messages) -------------------------------------------------

    def set_files(self, files: Sequence[tuple[str, int]]) -> None:
        """The message's files as chips: (name, size in bytes) each."""
        self.file_chips.set_files(files)

    def set_version(self, number: int, total: int) -> None:
        self.version = (number, total)
        self.refresh()

    def set_actions_enabled(self, enabled: bool) -> None:
        """Edit, the pager and Save & resend; Cancel stays (it changes nothing stored)."""
        if enabled != self.actions_enabled:
            self.actions_enabled = enabled
            if self.save_button is not None:
                self.save_button.setEnabled(enabled)
            self.refresh()

    def start_edit(self) -> None:
        """The bubble becomes an editor of its text, in place."""
        if self.editor is not None or self.role != "user":
            return
        self.editor = EditBox(self.content)
        self.editor.saveRequested.connect(self._save_edit)
        self.editor.cancelRequested.connect(self.cancel_edit)
        row = QWidget()
        buttons = QHBoxLayout(row)
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addStretch(1)
        cancel = QPushButton(f"Cancel ({binding_text('editor.cancel')})")
        cancel.setToolTip("Back to the message as it was; nothing is changed")
        cancel.clicked.connect(self.cancel_edit)
        self.save_button = QPushButton(f"Save && resend ({binding_text('editor.save')})")
        self.save_button.setToolTip("Keep the old text and its answers as a version, and ask again with this text")
        self.save_button.setEnabled(self.actions_enabled)
        self.save_button.clicked.connect(self._save_edit)
        buttons.addWidget(cancel)
        buttons.addWidget(self.save_button)
        self._edit_row = row
        at = self._column.indexOf(self.markdown_view)
        self._column.insertWidget(at, self.editor)
        self._column.insertWidget(at + 1, row)
        self.refresh()
        self.editor.setFocus()
        self.editor.moveCursor(self.editor.textCursor().MoveOperation.End)

    def cancel_edit(self) -> None:
        """Back to the message as it was."""
        if self.editor is None:
            return
        for w in (self.editor, self._edit_row):
            if w is not None:
                w.setParent(None)
                w.deleteLater()
        self.editor = self._edit_row = self.save_button = None
        self.refresh()

    def _save_edit(self) -> None:
        if self.editor is not None and self.actions_enabled and self.editor.toPlainText().strip():
            self.editSaved.emit(self.editor.toPlainText().strip())

    def _link(self, href: str, text: str) -> str:
        """A link in the theme's colour: a label lays its text out once, with the palette of then, so
        a palette change alone left the links of the old theme (dark blue on a dark bubble)."""
        return f"<a href='{href}' style='color:{self.theme.link}'>{text}</a>"

    def _placeholder(self) -> str:
        return f"<i style='color:{self.theme.muted}'>…</i>"

    def _refresh_reasoning(self) -> None:
        self.reasoning_toggle.setVisible(bool(self.reasoning))
        self.reasoning_view.setVisible(bool(self.reasoning) and self.reasoning_open)
        if not self.reasoning:
            return
        if self.reasoning_open:
            self.reasoning_toggle.setText(self._link("think", "▾ Hide reasoning"))
            self._reasoning_runs[0] = (self.reasoning, False)
            self.reasoning_view.apply(self._thoughts.update(self._reasoning_runs))
        else:
            self.reasoning_toggle.setText(self._link("think", f"▸ Show reasoning ({self._word_count()} words)"))

    def _word_count(self) -> int:
        """Words in the reasoning, counted on from where the last count stopped (a space)."""
        text = self.reasoning
        upto, n = self._words
        if upto > len(text) or (upto and not text[upto - 1].isspace()):
            upto, n = 0, 0  # replaced, not extended
        end = max(text.rfind(" ", upto), text.rfind("\n", upto)) + 1
        if end > upto:
            n += len(text[upto:end].split())
            upto = end
        self._words = (upto, n)
        return n + (1 if text[upto:].strip() else 0)

    # -- theme ------------------------------------------------------------------------

    def set_theme(self, theme: Theme) -> None:
        """Restyle and render everything again in ``theme`` (colours live in the rendered HTML)."""
        self.theme = theme
        self.file_chips.set_theme(theme)
        self._restyle()
        self.refresh()

    def _restyle(self) -> None:
        t = self.theme
        border = f"border:1px solid {t.bubble_border};" if self.role == "assistant" else ""
        self.setStyleSheet(f"#message-{self.role} {{ background:{t.bubbles.get(self.role, t.bubble_assistant)};"
                           f" {border} border-radius:8px; }}")
        self.footer_label.setStyleSheet(f"color:{t.muted}; font-size:11px;")
        self.not_sent_label.setStyleSheet(f"color:{t.muted}; font-size:11px; font-style:italic;")
        self.reasoning_view.set_text_css(f"color:{t.muted}; margin-left:8px;")
        self._markdown = MarkdownStream(t)
        self._tint = TintStream(t, f"background:{t.draft_tint}")
        self._thoughts = RunStream()
        for column in (self.markdown_view, self.tint_view, self.reasoning_view):
            column.clear()

    # -- links --------------------------------------------------------------------------

    def _on_link(self, href: str) -> None:
        if href == "think":
            self.reasoning_open = not self.reasoning_open
            self._refresh_reasoning()
        elif href == "copyall":
            self._copy(self.content)
        elif href == "tint":
            self.tintToggled.emit(not self.tint)
        elif href == "edit" and self.actions_enabled:
            self.start_edit()
        elif href.startswith("version:") and self.actions_enabled:
            number = href[len("version:"):]
            if number.isdigit() and 1 <= int(number) <= self.version[1]:
                self.versionRequested.emit(int(number))

    def _copy(self, text: str, what: str = "Copied") -> None:
        QGuiApplication.clipboard().setText(text)
        self.show_copied(what)
        self.copyRequested.emit(text)

    def show_copied(self, what: str = "Copied") -> None:
        """The footer's Copy says ``what`` ("Copied ✓") for a moment: the copy happened."""
        self.copied = f"{what} ✓"
        self._copied_timer.start()
        self.refresh()

    def _copied_over(self) -> None:
        self.copied = ""
        self.refresh()
