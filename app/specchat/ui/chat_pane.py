"""The chat on screen: its switches, its conversation, the composer and Send/Stop.

The pane shows one chat at a time and owns no answer: an answer belongs to the
:class:`~specchat.services.answers.AnswerService`, which goes on writing it to the store
whatever the pane shows.  The pane paints the shown chat's live answer when the service
says it changed, and builds everything else from the store.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.attachments import CHOOSER_FILTER
from specchat.chat_commands import ChatCommands
from specchat.context_policy import SETTING, ContextPolicy
from specchat.context_policy import label as policy_label
from specchat.metrics import Counts
from specchat.services.answers import AnswerNotice, AnswerService, LiveAnswer, Phase, fallback_warning
from specchat.stats_line import stats_line
from specchat.store import (
    MAX_ATTACHMENTS,
    ChatSettings,
    Message,
    NewAttachment,
    Store,
    StoreError,
    not_sent,
    plain_reference,
)

from .attachment_chips import ChipRow, FileReader
from .chat_header import ChatHeader
from .conversation import ConversationView
from .empty_state import EmptyState
from .load_progress import LoadProgressLine
from .menus import matches
from .message_widget import MessageWidget
from .theme import Theme, controller, current

LIVE_FOOTER = {
    Phase.WAITING: "waiting for the answer in another chat to finish…",
    Phase.LOADING: "waiting for the model pair to load…",
    Phase.STREAMING: "generating…",
}
API_WAITING = "waiting for an API request's answer to finish…"  # the head of the line is a request of the API
NO_PAIR = "No model pair for this chat yet: choose one with Pair… (Models menu)."
REMEDY = ContextPolicy.ROLLING_WINDOW  # the one-click remedy of a chat that outgrew the context


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter makes a new line, Tab and Shift+Tab move to the next or previous field,
    Ctrl+Tab types a tab (the keys are :data:`.menus.BINDINGS`'); files dropped or pasted (a file
    manager's copy) are attached, not typed in as their paths."""

    submitted = Signal()
    filesDropped = Signal(list)  # [Path]: local files dropped or pasted

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setTabChangesFocus(True)  # a keyboard user can leave the box (Ctrl+Tab types a tab)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        files = local_files(source)
        if files:
            self.filesDropped.emit(files)
            return
        super().insertFromMimeData(source)

    def keyPressEvent(self, event) -> None:
        if matches(event, "composer.send"):
            self.submitted.emit()
            return
        if matches(event, "text.tab"):
            self.insertPlainText("\t")
            return
        super().keyPressEvent(event)





def local_files(source: QMimeData) -> list[Path]:
    """The local files a drop or a paste carries (none for text, or for a web link)."""
    if not source.hasUrls():
        return []
    return [Path(u.toLocalFile()) for u in source.urls() if u.isLocalFile() and u.toLocalFile()]


def tokens_estimate(n_bytes: int) -> int:
    """About how many tokens text of ``n_bytes`` is (source code and English: 3 to 4 bytes a token)."""
    return round(n_bytes / 3.5)


def _segments(m: Message) -> list[tuple[str, bool]]:
    """The stored tint of an answer (which text came from accepted draft tokens)."""
    segments = getattr(m, "content_segments", None)
    return segments() if callable(segments) else []


class ChatPane(QWidget):
    titleChanged = Signal()  # a chat got its title from its first message
    pairRequested = Signal()
    pairChanged = Signal(object)  # ChatSettings whose target or draft changed
    emptyStateShown = Signal()  # the chat shown has no pair and no message: the card says how to get a pair
    settingsRequested = Signal(str)  # open Chat settings… at this field ("context_policy")

    def __init__(self, store: Store, answers: AnswerService, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.commands = ChatCommands(store)  # every write of the pane (it only reads the store itself)
        self.answers = answers
        self.chat_id: int | None = None
        self._live: MessageWidget | None = None  # the widget of the shown chat's live answer
        v = QVBoxLayout(self)
        v.setContentsMargins(0, 0, 0, 0)
        self.header = ChatHeader()
        self.header.changed.connect(lambda change: self.update_settings(**change))
        self.header.pairRequested.connect(self.pairRequested)
        self.load_line = LoadProgressLine(answers)  # a pair loading: how far, under the header
        self.conversation = ConversationView()
        self.empty_state = EmptyState()  # the window says what is installed and opens its flows
        self.empty_state.chooseRequested.connect(self.pairRequested)
        self.conversation.set_placeholder(self.empty_state)
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setTextFormat(Qt.TextFormat.PlainText)
        self.notice.linkActivated.connect(self._on_notice_link)
        self.notice.hide()
        self.composer = Composer(placeholderText="Message (Enter sends, Shift+Enter for a new line)")
        self.composer.setFixedHeight(90)
        self.composer.submitted.connect(self.send)
        self.composer.filesDropped.connect(self.attach_files)
        # files waiting to go with the next question: chips above the composer, and how much of the context
        self.pending: list[NewAttachment] = []
        self.pending_chips = ChipRow(removable=True)
        self.pending_chips.removeRequested.connect(self._remove_pending)
        self.files_line = QLabel()
        self.files_line.setWordWrap(True)
        self.files_line.hide()
        self.reader = FileReader(self)
        self.reader.read.connect(self._add_pending)
        self.reader.failed.connect(lambda line: self.show_notice(line, error=True))
        self.reader.busyChanged.connect(lambda busy: self._show_files_line("reading a PDF…" if busy else None))
        buttons = QHBoxLayout()
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip("Attach text files, code or PDFs (or drop or paste them in the box)")
        self.attach_button.clicked.connect(self.choose_files)
        buttons.addWidget(self.attach_button)
        self.send_button = QPushButton("Send")
        self.send_button.clicked.connect(self._send_or_stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button = QPushButton("Edit last")
        self.edit_button.clicked.connect(lambda: self.edit_last())
        buttons.addStretch(1)
        for b in (self.edit_button, self.regen_button, self.send_button):
            buttons.addWidget(b)
        for w in (self.header, self.load_line, self.conversation, self.notice, self.pending_chips, self.files_line,
                  self.composer):
            v.addWidget(w)
        v.addLayout(buttons)
        answers.changed.connect(self._on_answer_changed)
        answers.finished.connect(self._on_answer_finished)
        answers.queueChanged.connect(self.update_buttons)
        answers.notice.connect(self._on_notice)
        self._notice_error = False
        self._notice_links: tuple[tuple[str, str], ...] = ()
        self._notice_text = ""
        self._notice_sticky = False  # a refused write's line: kept until the user acts (show_notice)
        self._fallback_limit: float | None = None  # the fallback-share warning is shown, with this limit
        controller().changed.connect(self._style_notice)
        controller().changed.connect(self.pending_chips.set_theme)

    # -- which chat --------------------------------------------------------------------

    def show_chat(self, chat_id: int | None) -> None:
        """Show a chat from the store, with its live answer (if any) where it is now."""
        self.chat_id = chat_id
        self.conversation.clear()
        self._live = None
        self.show_notice("")
        if chat_id is None:
            self.conversation.show_placeholder(False)
            self.update_buttons()
            return
        live = self.answers.answer(chat_id)
        versions = self.store.version_counts(chat_id)
        files = self.store.chat_attachments(chat_id)
        for m in self.store.messages(chat_id):
            if live is not None and m.id == live.message_id:
                continue  # the live answer is painted from memory: the store lags by up to half a second
            w = self.conversation.add(m.role, m.content, m.reasoning,
                                      self._footer(m) if m.role == "assistant" else "")
            if m.role == "assistant":
                w.segments = _segments(m)
                if w.segments:
                    w.refresh()
            elif m.role == "user":
                self._wire_user(w, m, versions.get(m.id, 1))
                if m.id in files:
                    w.set_files([(a.name, a.size) for a in files[m.id]])
            w.message_id = m.id
        if live is not None:
            self._paint_live(live)
        self._mark_not_sent()
        self._offer_remedy()
        self.show_settings(self.settings())
        self.update_buttons()

    def settings(self) -> ChatSettings:
        """The shown chat's settings (there must be one)."""
        if self.chat_id is None:
            raise KeyError("no chat is shown")
        return self.store.get_chat(self.chat_id).settings

    # -- settings ----------------------------------------------------------------------

    def update_settings(self, **change: Any) -> None:  # ChatSettings (or sampling) fields by name; validate() checks them
        if self.chat_id is None:
            return
        new = self.settings().replaced(**change)
        new.validate()
        try:
            self.commands.update_settings(self.chat_id, new)
        except StoreError as exc:
            self.show_notice(f"{exc}; the setting is as it was", error=True, sticky=True)
            self.show_settings(self.settings())  # the header back to what is stored
            return
        self.show_settings(new)
        if "target" in change or "draft" in change:
            self.pairChanged.emit(new)

    def show_settings(self, s: ChatSettings) -> None:
        pair = "No model pair: choose one with Pair… or the Models menu"
        if s.target:
            pair = f"{s.target.name}" + (f"  +  {s.draft.name}" if s.draft else "  (no draft)")
        active = (s.sampling.structured.label if s.sampling.structured.active else "",
                  "system prompt" if s.system_prompt.strip() else "")
        self.header.show_settings(s.speculation, s.reasoning, s.sampling.temperature, pair,
                                  tuple(a for a in active if a))
        empty = s.target is None and not s.backend and not self.conversation.messages
        self.conversation.show_placeholder(empty)
        if empty:
            self.emptyStateShown.emit()

    # -- sending and stopping ---------------------------------------------------------------

    @property
    def generating(self) -> bool:
        """Whether the shown chat has an answer running or waiting."""
        return self.chat_id is not None and self.answers.answer(self.chat_id) is not None

    def _send_or_stop(self) -> None:
        self.stop() if self.generating else self.send()

    def send(self) -> None:
        text = self.composer.toPlainText().strip()
        if (not text and not self.pending) or self.chat_id is None or self.generating:
            return
        if self.reader.busy:  # the question goes with every file asked for, or waits
            self.show_notice("a PDF is still being read: send when its chip shows")
            return
        s = self.settings()
        if s.target is None and not s.backend:  # a server chat needs no local pair
            self.show_notice(NO_PAIR, error=True)
            return
        files = list(self.pending)
        try:
            sent = self.commands.send(self.chat_id, text, files)
        except StoreError as exc:  # the question stays in the composer, to send again
            self.show_notice(f"{exc}; your message is still in the box below", error=True, sticky=True)
            return
        except ValueError as exc:  # past the store's caps for one message: nothing was stored
            self.show_notice(f"{exc}; nothing was sent", error=True)
            return
        self.composer.clear()  # only now: the question is stored
        self.pending.clear()
        self._show_pending()
        if sent.retitled:
            self.titleChanged.emit()
        w = self.conversation.add("user", sent.message.content)
        self._wire_user(w, sent.message, 1)
        if files:
            w.set_files([(f.name, len(f.data)) for f in files])
        self._ask(self.chat_id)

    # -- files for the next question ---------------------------------------------------------

    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", CHOOSER_FILTER)
        if paths:
            self.attach_files([Path(p) for p in paths])

    def attach_files(self, paths: list[Path]) -> None:
        """Read files for the next question (a PDF in a child process); each refused one is a line."""
        room = MAX_ATTACHMENTS - len(self.pending)
        if len(paths) > room:
            self.show_notice(f"a message holds at most {MAX_ATTACHMENTS} files; {len(paths) - room} not attached",
                             error=True)
        self.reader.add(paths[:max(room, 0)])

    def _add_pending(self, file: NewAttachment) -> None:
        self.pending.append(file)
        self._show_pending()

    def _remove_pending(self, index: int) -> None:
        if 0 <= index < len(self.pending):
            del self.pending[index]
            self._show_pending()

    def _show_pending(self) -> None:
        self.pending_chips.set_files([(f.name, len(f.data)) for f in self.pending])
        self._show_files_line(None)
        self.update_buttons()

    def files_fit_line(self) -> str:
        """How much of the context the waiting files take, about (the exact count comes with the answer):
        a file that cannot fit says by how much, and what the chat's context policy will do."""
        if not self.pending:
            return ""
        total = sum(len(f.data) for f in self.pending)
        tokens = tokens_estimate(total)
        info = self.answers.pair_info
        n_ctx = getattr(info, "n_ctx", None)
        what = f"{len(self.pending)} file{'s' if len(self.pending) > 1 else ''}, about {tokens:,} tokens"
        if not n_ctx:
            return f"{what}, sent whole with the question"
        if tokens < n_ctx:
            return f"{what} of the {n_ctx:,} the context holds, sent whole with the question"
        policy = self.settings().context_policy if self.chat_id is not None else "stop"
        then = ("the chat's context policy is stop: the answer will say so and nothing is cut"
                if policy == "stop" else "earlier turns are left out first, and if the question alone cannot "
                                         "fit, the answer says so; nothing is cut")
        return f"{what}: about {tokens - n_ctx:,} more than the context holds ({n_ctx:,}); {then}"

    def _show_files_line(self, text: str | None) -> None:
        line = self.files_fit_line() if text is None else text
        self.files_line.setText(line)
        self.files_line.setVisible(bool(line))
        theme = current()
        over = "more than the context holds" in line
        self.files_line.setStyleSheet(f"color:{theme.error if over else theme.muted}; font-size:12px;")

    def _ask(self, chat_id: int) -> None:
        self.show_notice("")
        live = self.answers.ask(chat_id)
        if self._live is None and self.answers.answer(chat_id) is live:
            self._paint_live(live)
        self.update_buttons()

    def stop(self) -> None:
        if self.chat_id is not None:
            self.answers.stop(self.chat_id)

    # -- versions: regenerate, edit in place, the pager --------------------------------------

    def regenerate(self) -> None:
        """The last answer again; the one it replaces stays as a version of its question."""
        last_user = self._last_user()
        if last_user is None:
            return
        try:
            self.commands.regenerate(last_user.chat_id)
        except StoreError as exc:
            self.show_notice(f"{exc}; the answer is as it was", error=True, sticky=True)
            return
        self.show_chat(last_user.chat_id)  # the shown chat's
        self._ask(last_user.chat_id)

    def edit_last(self, text: str | None = None) -> None:
        """Edit the last user message in place (or, given ``text``, save it at once) and answer it again."""
        last_user = self._last_user()
        if last_user is None:
            return
        if text is not None:
            self.save_edit(last_user.id, text)
            return
        w = next((w for w in self.conversation.messages if w.message_id == last_user.id), None)
        if w is not None:
            w.start_edit()
            self.conversation.show_message(w)

    def save_edit(self, message_id: int, text: str) -> None:
        """Save & resend: the old text and what followed it become a version; the new text is answered."""
        if self.chat_id is None or self.generating or not text.strip():
            return
        try:
            self.commands.edit(message_id, text)
        except StoreError as exc:  # the bubble stays an editor with the new text (show_chat would rebuild it)
            self.show_notice(f"{exc}; your edit is still in its box", error=True, sticky=True)
            return
        self.show_chat(self.chat_id)
        self._ask(self.chat_id)

    def show_version(self, message_id: int, number: int) -> None:
        """The pager: show version ``number`` of a user message (and the conversation that followed it)."""
        if self.chat_id is None or self.generating:
            return
        try:
            self.commands.show_version(message_id, number)
        except StoreError as exc:
            self.show_notice(f"{exc}; the version shown is as it was", error=True, sticky=True)
            return
        self.show_chat(self.chat_id)
        w = next((w for w in self.conversation.messages if w.message_id == message_id), None)
        if w is not None:
            self.conversation.show_message(w)

    def _wire_user(self, w: MessageWidget, m: Message, versions: int) -> None:
        w.message_id = m.id
        w.set_version(m.version, versions)
        w.set_actions_enabled(not self.generating)
        w.editSaved.connect(lambda text, mid=m.id: self.save_edit(mid, text))
        w.versionRequested.connect(lambda number, mid=m.id: self.show_version(mid, number))

    def _last_user(self) -> Message | None:
        if self.chat_id is None or self.generating:
            return None
        return next((m for m in reversed(self.store.messages(self.chat_id)) if m.role == "user"), None)

    def update_buttons(self) -> None:
        live = self.answers.answer(self.chat_id) if self.chat_id is not None else None
        self.send_button.setText("Send" if live is None else "Cancel" if live.phase is Phase.WAITING else "Stop")
        idle = live is None and self.chat_id is not None
        self.regen_button.setEnabled(idle)
        self.edit_button.setEnabled(idle)
        for w in self.conversation.messages:
            if w.role == "user":
                w.set_actions_enabled(idle)
        if live is not None and live.phase is Phase.WAITING and self._live is not None:
            self._paint_live(live)  # what it waits for: the head of the line changed

    # -- the live answer -------------------------------------------------------------------

    def _paint_live(self, live: LiveAnswer) -> None:
        if self._live is None:
            self._live = self.conversation.add("assistant")
        w = self._live
        # the live list itself, not a copy: it only grows, and the tinted view renders only what is new
        w.content, w.reasoning, w.segments = live.content, live.reasoning, live.segments
        w.streaming = True
        w.footer = LIVE_FOOTER[live.phase]
        if live.phase is Phase.WAITING and self.answers.external is not None:
            w.footer = API_WAITING
        if live.phase is Phase.LOADING and self.answers.load_progress is not None:
            w.footer = f"waiting for the model pair to load: {self.answers.load_progress.text}"
        if live.fallback_warned and not self._notice_error:
            self._show_fallback(live.counts, live.warning_share)  # the share as it is now, not when it was crossed
        self.conversation.mark_dirty(w)

    def _on_answer_changed(self, chat_id: int) -> None:
        live = self.answers.answer(chat_id)
        if chat_id == self.chat_id and live is not None:
            self._paint_live(live)
            if live.phase is not Phase.WAITING:
                self.update_buttons()

    def _on_answer_finished(self, chat_id: int, stored: Message | None) -> None:
        if chat_id != self.chat_id:
            return
        w, self._live = self._live, None
        if w is not None:
            if stored is None:  # a waiting answer was cancelled, or its chat is gone
                self.conversation.remove(w)
            else:
                w.segments = _segments(stored) or w.segments
                w.message_id = stored.id or None
                w.set_content(stored.content, stored.reasoning, self._footer(stored))
                self.conversation.flush()
                self._mark_not_sent()
                if self._fallback_limit is not None and stored.stats is not None:
                    self._show_fallback(stored.stats.counts, self._fallback_limit)  # its final share
        self.update_buttons()

    def _footer(self, m: Message) -> str:
        """A stored answer's stats line, its "x vs plain" against the plain runs of its pair."""
        return stats_line(m.stats, m.state, plain_reference(self.store, m.id) if m.stats else None)

    def _on_notice(self, notice: AnswerNotice) -> None:
        if notice.chat_id != self.chat_id or not (notice.error or notice.warning or notice.permanent):
            return
        live = self.answers.answer(notice.chat_id)
        if notice.warning and live is not None:
            self._show_fallback(live.counts, live.warning_share)  # kept current as the answer goes on (_paint_live)
        elif notice.past_context:  # the remedy in place: the setting it names, one click away
            self._show_remedy(notice.text)
        else:
            self.show_notice(notice.text, error=notice.error)

    def _show_remedy(self, text: str) -> None:
        self.show_notice(text, error=True, links=(
            (f"policy:{REMEDY.value}", f"Use “{policy_label(REMEDY)}” for this chat"),
            ("settings:context_policy", f"Chat settings… → {SETTING}")))

    def _offer_remedy(self) -> None:
        """A chat shown again whose last answer failed past the context, still under "Stop at the limit":
        its error line and remedy again (from the stored answer), until the policy or the chat moves on."""
        if self.chat_id is None or self.settings().context_policy != ContextPolicy.STOP.value:
            return
        messages = self.store.messages(self.chat_id)
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and last.stats is not None and last.stats.past_context:
            self._show_remedy(last.stats.error)

    def _on_notice_link(self, href: str) -> None:
        if href.startswith("policy:") and self.chat_id is not None:
            self.use_context_policy(href[len("policy:"):])
        elif href.startswith("settings:"):
            self.settingsRequested.emit(href[len("settings:"):])
        elif href == "regenerate":
            self.regenerate()

    def use_context_policy(self, policy: str) -> None:
        """The context error's remedy: this chat's "Past the context" becomes ``policy``, stored, and the
        notice says so (with Regenerate, to answer the question that did not fit)."""
        if self.chat_id is None:
            return
        try:
            self.commands.set_context_policy(self.chat_id, policy)
        except (StoreError, ValueError) as exc:
            self.show_notice(f"{exc}; “{SETTING}” is as it was", error=True, sticky=True)
            return
        self.show_notice(f"“{SETTING}” is now “{policy_label(policy)}” for this chat: the oldest turns are left "
                         "out of what is sent, nothing is deleted.", links=(("regenerate", "Regenerate"),))

    def _mark_not_sent(self) -> None:
        """Dim the messages the latest answer's prompt left out (its stored span: what its policy did)."""
        if self.chat_id is None:
            return
        left = not_sent(self.store.messages(self.chat_id))
        for w in self.conversation.messages:
            w.set_not_sent(w.message_id in left)

    def clear_pair_notice(self) -> None:
        """A pair loaded: what the notice said of the pair is stale; a refused write's line stays."""
        if not self._notice_sticky:
            self.show_notice("")

    def _show_fallback(self, counts: Counts, limit: float) -> None:
        text = fallback_warning(counts, limit)
        if self.notice.text() != text:
            self.show_notice(text)
        self._fallback_limit = limit

    def show_notice(self, text: str, error: bool = False, *, sticky: bool = False,
                    links: tuple[tuple[str, str], ...] = ()) -> None:
        """One line above the composer ("" hides it).  A ``sticky`` one (a write the store refused)
        stays until the user's next action; a pair that finishes loading does not take it away.
        ``links``: (href, text) each, after the line (the context error's remedy)."""
        self._notice_error = error
        self._notice_sticky = sticky and bool(text)
        self._fallback_limit = None  # the notice is no longer the fallback-share warning
        self._notice_links, self._notice_text = links, text
        self._style_notice(current())
        self.notice.setVisible(bool(text))
        if not links:
            self.notice.setTextFormat(Qt.TextFormat.PlainText)
            self.notice.setText(text)
            return
        self._render_notice_links(current())

    def _render_notice_links(self, theme: Theme) -> None:
        links = " · ".join(f"<a href='{href}' style='color:{theme.link}'>{html.escape(t)}</a>"
                           for href, t in self._notice_links)
        self.notice.setTextFormat(Qt.TextFormat.RichText)
        self.notice.setText(f"{html.escape(self._notice_text)}<br>{links}")

    def _style_notice(self, theme: Theme) -> None:
        colour = theme.error if self._notice_error else theme.warning
        self.notice.setStyleSheet(f"color:{colour}; padding:2px 8px;")
        if self._notice_links and self.notice.textFormat() is Qt.TextFormat.RichText:
            self._render_notice_links(theme)  # the links in the new theme's colour
