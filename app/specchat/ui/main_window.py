"""The main window: chats on the left, the conversation in the centre, the composer below.

It owns no thread: it receives a :class:`GenerationService` (the generation
thread) and a :class:`Store` (the database, used from this thread only).  An
answer streams into a message widget (painted at frame rate) and into the
database through an ``AnswerWriter`` (committed twice a second).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psutil
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from specchat import __version__
from specchat.config import AppConfig
from specchat.engine import Done, Error, Fallback, Mode, SamplingSettings, TokenOrigin, TokensEmitted
from specchat.engine.pair import PairConfig
from specchat.engine.reasoning import ReasoningParser
from specchat.engine.runtime import ModelOptions
from specchat.models.registry import Registry
from specchat.store import ChatSettings, MessageStats, Store
from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.export import export_csv, export_json
from specchat.telemetry.samplers import MemorySampler
from specchat.workers.download import DownloadService
from specchat.workers.generation import GenerationService, PairInfo, Started

from .chat_header import ChatHeader
from .conversation import ConversationView
from .models_dialog import ModelsDialog, recommended
from .settings_dialogs import ChatSettingsDialog, SettingsDialog
from .task_table import TaskTableDialog
from .telemetry_panel import TelemetryPanel
from .theme import apply_theme

SPECULATION_TO_MODE = {"off": Mode.BASELINE, "draft": Mode.DRAFT, "lookup": Mode.LOOKUP, "auto": Mode.AUTO}


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter makes a new line."""

    submitted = Signal()

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(event)


def footer_text(stats: MessageStats | None, state: str | None) -> str:
    if stats is None:
        return {"streaming": "generating…", "stopped": "stopped", "error": "error"}.get(state or "", "")
    if stats.error:
        return f"error: {stats.error}"
    parts = [f"{stats.decode_tok_s:.1f} tok/s", f"{stats.tokens} tokens"]
    if stats.token_acceptance is not None:
        parts.append(f"{stats.token_acceptance:.0%} draft accepted")
        parts.append(f"mean K {stats.mean_k:.1f}")
    parts.append(stats.mode or "")
    parts.append(f"stop: {stats.stop_reason}")
    return " · ".join(p for p in parts if p)


class _Answer:
    """Book-keeping for the answer being streamed."""

    def __init__(self, request_id: int, widget, writer, parser: ReasoningParser | None) -> None:
        self.request_id = request_id
        self.widget = widget
        self.writer = writer
        self.parser = parser
        self.content: list[str] = []
        self.reasoning: list[str] = []


class MainWindow(QMainWindow):
    def __init__(self, store: Store, service: GenerationService, downloads: DownloadService | None = None,
                 registry: Registry | None = None, config: AppConfig | None = None,
                 sampler: MemorySampler | None = None, window_state: QSettings | None = None,
                 parent=None) -> None:
        super().__init__(parent)
        self._window_state = window_state  # where size, splitters and docks are kept (None: not kept)
        self.config = config or AppConfig()
        self.recorder = TelemetryRecorder(settings=self.config.controller())
        self.telemetry = TelemetryPanel(self.recorder, sampler, self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.telemetry)
        self.store = store
        self.service = service
        self.downloads = downloads or DownloadService(self)
        self.registry = registry or Registry()
        self.chat_id: int | None = None
        self.pair_info: PairInfo | None = None
        self.loaded_pair: tuple[Path | None, Path | None] = (None, None)
        self.answer: _Answer | None = None
        self.setWindowTitle("SpecChat")
        self.resize(1200, 800)
        self._build()
        self._build_menus()
        service.event.connect(self._on_event)
        service.pairLoaded.connect(self._on_pair_loaded)
        service.pairFailed.connect(self._on_pair_failed)
        self._flush_timer = QTimer(self, interval=250)
        self._flush_timer.timeout.connect(self._poll_writer)
        self._status_timer = QTimer(self, interval=2000)
        self._status_timer.timeout.connect(self._update_memory)
        self._status_timer.start()
        self._open_newest()
        self._first_run_hint()
        self._restore_window_state()

    # -- layout -------------------------------------------------------------------

    def _build(self) -> None:
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(6, 6, 6, 6)
        self.search = QLineEdit(placeholderText="Search chats…")
        self.search.textChanged.connect(lambda _t: self.refresh_chats())
        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.new_chat)
        self.chat_list = QListWidget()
        self.chat_list.currentItemChanged.connect(self._on_chat_selected)
        self.chat_list.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        rename = QAction("Rename…", self.chat_list)
        rename.triggered.connect(self.rename_chat)
        delete = QAction("Delete", self.chat_list)
        delete.triggered.connect(self.delete_chat)
        self.chat_list.addActions([rename, delete])
        for w in (self.search, self.new_button, self.chat_list):
            lv.addWidget(w)

        centre = QWidget()
        cv = QVBoxLayout(centre)
        cv.setContentsMargins(0, 0, 0, 0)
        self.header = ChatHeader()
        self.header.changed.connect(self._on_header_changed)
        self.header.pairRequested.connect(self.open_models)
        self.header.settingsRequested.connect(self.edit_chat_settings)
        self.conversation = ConversationView()
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("color:#8a5a00; padding:2px 8px;")
        self.notice.hide()
        self.composer = Composer(placeholderText="Message (Enter sends, Shift+Enter for a new line)")
        self.composer.setFixedHeight(90)
        self.composer.submitted.connect(self.send)
        buttons = QHBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.clicked.connect(self._send_or_stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button = QPushButton("Edit last")
        self.edit_button.clicked.connect(lambda: self.edit_last())
        buttons.addStretch(1)
        for b in (self.edit_button, self.regen_button, self.send_button):
            buttons.addWidget(b)
        for w in (self.header, self.conversation, self.notice, self.composer):
            cv.addWidget(w)
        cv.addLayout(buttons)

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(centre)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 940])
        self.setCentralWidget(split)
        self.pair_status = QLabel("no model loaded")
        self.memory_status = QLabel()
        self.statusBar().addWidget(self.pair_status, 1)
        self.statusBar().addPermanentWidget(self.memory_status)

    def _build_menus(self) -> None:
        file = self.menuBar().addMenu("&File")
        new = file.addAction("New chat", self.new_chat)
        new.setShortcut(QKeySequence.StandardKey.New)
        file.addSeparator()
        file.addAction("Export this chat's telemetry…", lambda: self._export_telemetry(self.chat_id))
        file.addSeparator()
        quit_ = file.addAction("Quit", self.close)
        quit_.setShortcut(QKeySequence.StandardKey.Quit)
        self.models_menu = self.menuBar().addMenu("&Models")
        self.models_menu.addAction("Download a pair…", lambda: self.open_models(tab=0))
        self.models_menu.addAction("Import GGUF files…", self._import_files)
        self.models_menu.addAction("Manage models…", lambda: self.open_models(tab=1))
        self.models_menu.addSeparator()
        self.models_menu.addAction("Settings…", self.edit_app_settings)
        self.view_menu = self.menuBar().addMenu("&View")
        panel_action = self.telemetry.toggleViewAction()
        panel_action.setText("Telemetry panel")
        self.view_menu.addAction(panel_action)
        self.view_menu.addAction("Speculation by task…", lambda: TaskTableDialog(self.store, self).exec())
        self.tint_action = self.view_menu.addAction("Colour accepted draft tokens")
        self.tint_action.setCheckable(True)
        self.tint_action.toggled.connect(self.conversation.set_tint)
        self.dark_action = self.view_menu.addAction("Dark theme")
        self.dark_action.setCheckable(True)
        self.dark_action.setChecked(self.config["theme"] == "dark")
        self.dark_action.toggled.connect(self._toggle_theme)
        help_ = self.menuBar().addMenu("&Help")
        help_.addAction("About SpecChat", self.about)

    # -- chats --------------------------------------------------------------------

    def refresh_chats(self) -> None:
        self.chat_list.blockSignals(True)
        self.chat_list.clear()
        for chat in self.store.list_chats(self.search.text()):
            item = QListWidgetItem(chat.title)
            item.setData(Qt.ItemDataRole.UserRole, chat.id)
            self.chat_list.addItem(item)
            if chat.id == self.chat_id:
                self.chat_list.setCurrentItem(item)
        self.chat_list.blockSignals(False)

    def new_chat(self) -> None:
        last = self.store.list_chats()
        # a new chat starts from the latest chat's pair and settings, with the default speculation mode;
        # the very first one from the config's target and draft (a deployment's config.toml)
        base = last[0].settings if last else ChatSettings(target=self.config.model_path("target"),
                                                           draft=self.config.model_path("draft"))
        chat = self.store.create_chat("New chat", replace(base, speculation=str(self.config["default_mode"])))
        self.open_chat(chat.id)
        self.refresh_chats()

    def _on_chat_selected(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is not None:
            self.open_chat(item.data(Qt.ItemDataRole.UserRole))

    def open_chat(self, chat_id: int) -> None:
        if self.answer is not None:
            self.stop()
        self.chat_id = chat_id
        chat = self.store.get_chat(chat_id)
        self.conversation.clear()
        for m in self.store.messages(chat_id):
            self.conversation.add(m.role, m.content, m.reasoning,
                                  footer_text(m.stats, m.state) if m.role == "assistant" else "")
        self._show_settings(chat.settings)
        self._ensure_pair(chat.settings)

    def rename_chat(self) -> None:
        if self.chat_id is None:
            return
        title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=self.store.get_chat(self.chat_id).title)
        if ok and title.strip():
            self.store.rename_chat(self.chat_id, title.strip())
            self.refresh_chats()

    def delete_chat(self) -> None:
        if self.chat_id is None:
            return
        self.stop()
        self.store.delete_chat(self.chat_id)
        self.chat_id = None
        self._open_newest()

    def _open_newest(self) -> None:
        """Open the most recent chat, or a new one when there is none."""
        chats = self.store.list_chats()
        if chats:
            self.open_chat(chats[0].id)
        else:
            self.new_chat()
        self.refresh_chats()

    def settings(self) -> ChatSettings:
        return self.store.get_chat(self.chat_id).settings

    def update_settings(self, **change) -> None:
        new = replace(self.settings(), **change)
        new.validate()
        self.store.update_settings(self.chat_id, new)
        self._show_settings(new)
        if "target" in change or "draft" in change:
            self._ensure_pair(new)

    def _on_header_changed(self, change: dict) -> None:
        self.update_settings(**change)

    def _show_settings(self, s: ChatSettings) -> None:
        pair = "No model pair: choose one with Pair… or the Models menu"
        if s.target:
            pair = f"{s.target.name}" + (f"  +  {s.draft.name}" if s.draft else "  (no draft)")
        self.header.show_settings(s.speculation, s.reasoning, s.temperature, pair)

    # -- models -------------------------------------------------------------------

    def _ensure_pair(self, s: ChatSettings) -> None:
        if s.target is None or (s.target, s.draft) == self.loaded_pair:
            return
        self.loaded_pair = (s.target, s.draft)
        self.pair_info = None
        self.pair_status.setText(f"loading {s.target.name}…")
        c = self.config
        opts = ModelOptions(n_ctx=int(c["n_ctx"]), n_gpu_layers=int(c["gpu_layers"]), n_threads=int(c["threads"]))
        dopts = replace(opts, n_gpu_layers=int(c["draft_gpu_layers"]))
        self.service.load(PairConfig(s.target, s.draft, opts, dopts, controller=c.controller(),
                                     calibration_cache=_calibration_cache()))

    def _on_pair_loaded(self, info: PairInfo) -> None:
        self.pair_info = info
        # the reference line comes from this pair's answers with speculation off (learned by the
        # recorder); the load-time calibration is a best case (min of a few decodes) and would flatter it
        self.recorder.reset_plain_rate()
        self.telemetry.set_memory_shares(info.memory_shares)
        self.header.set_reasoning_available(info.supports_reasoning_switch)
        self.pair_status.setText(f"{info.target}" + (f" + {info.draft}" if info.draft else "")
                                 + f" · {info.backend} · ctx {info.n_ctx}")
        self.show_notice(f"speculation off: {info.speculation_blocked}" if info.speculation_blocked else "")

    def _on_pair_failed(self, message: str) -> None:
        self.loaded_pair = (None, None)
        self.pair_status.setText("no model loaded")
        self.show_notice(message, error=True)

    def show_notice(self, text: str, error: bool = False) -> None:
        self.notice.setStyleSheet(f"color:{'#b00020' if error else '#8a5a00'}; padding:2px 8px;")
        self.notice.setText(text)
        self.notice.setVisible(bool(text))

    # -- generation ----------------------------------------------------------------

    @property
    def generating(self) -> bool:
        return self.answer is not None

    def _send_or_stop(self) -> None:
        self.stop() if self.generating else self.send()

    def send(self) -> None:
        text = self.composer.toPlainText().strip()
        if not text or self.generating:
            return
        self.composer.clear()
        if self.store.get_chat(self.chat_id).title == "New chat":
            self.store.rename_chat(self.chat_id, text.splitlines()[0][:60])
            self.refresh_chats()
        m = self.store.add_message(self.chat_id, "user", text)
        self.conversation.add("user", m.content)
        self._generate()

    def _history(self) -> tuple[dict[str, str], ...]:
        s = self.settings()
        msgs = [{"role": "system", "content": s.system_prompt}] if s.system_prompt else []
        for m in self.store.messages(self.chat_id):
            if m.role in ("user", "assistant") and (m.role == "user" or m.content):
                msgs.append({"role": m.role, "content": m.content})
        return tuple(msgs)

    def _generate(self) -> None:
        s = self.settings()
        if s.target is None:
            self.show_notice("No model pair for this chat yet: choose one with Pair… (Models menu).", error=True)
            return
        history = self._history()
        message = self.store.start_answer(self.chat_id)
        widget = self.conversation.add("assistant", footer="generating…")
        writer = self.store.answer_writer(message)
        reasoning = None
        if self.pair_info is not None and self.pair_info.supports_reasoning_switch:
            reasoning = s.reasoning
        rid = self.service.submit(
            messages=history, mode=SPECULATION_TO_MODE[s.speculation],
            sampling=SamplingSettings(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                                      repeat_penalty=s.repeat_penalty, seed=s.seed),
            max_tokens=s.max_tokens, reasoning=reasoning,
        )
        self.answer = _Answer(rid, widget, writer, None)
        self.recorder.begin(rid, self.chat_id, mode=SPECULATION_TO_MODE[s.speculation].value)
        self.send_button.setText("Stop")
        self.show_notice("")
        self._flush_timer.start()

    def stop(self) -> None:
        if self.answer is not None:
            self.service.cancel()

    def _on_event(self, rid: int, ev: object) -> None:
        a = self.answer
        if a is None or rid != a.request_id:
            return
        self.recorder.feed(rid, self.chat_id, ev)
        if isinstance(ev, Started):
            a.parser = ReasoningParser(ev.starts_in_reasoning)
        elif isinstance(ev, TokensEmitted):
            split = a.parser.feed(ev.text) if a.parser else None
            answer = split.answer if split else ev.text
            thought = split.reasoning if split else ""
            a.content.append(answer)
            a.reasoning.append(thought)
            a.writer.append(answer, thought, ev.origins)
            w = a.widget
            w.content, w.reasoning = "".join(a.content), "".join(a.reasoning)
            if answer:
                w.segments.append((answer, ev.origins[:1] == (TokenOrigin.DRAFT,)))
            self.conversation.mark_dirty(w)
        elif isinstance(ev, Fallback):
            if ev.warning or ev.permanent:
                self.show_notice(ev.reason)
            # guard rails and the fallback-share warning also go to the status bar, saying what to do
            if ev.warning:
                self.statusBar().showMessage(ev.reason)
            elif not ev.permanent:
                self.statusBar().showMessage(f"speculation paused: {ev.reason}. If this keeps happening: a "
                                             "shorter draft, another draft model, or speculation off for this chat",
                                             20_000)
        elif isinstance(ev, Error):
            self.show_notice(ev.message, error=True)
        elif isinstance(ev, Done):
            self._finish(ev)

    def _finish(self, done: Done) -> None:
        a = self.answer
        self.answer = None
        if a.parser is not None:
            rest = a.parser.flush()
            a.content.append(rest.answer)
            a.reasoning.append(rest.reasoning)
            a.writer.append(rest.answer, rest.reasoning)
        state = {"cancelled": "stopped", "error": "error"}.get(done.stop_reason.value, "done")
        stats = MessageStats.from_generation(done.stats, done.stop_reason.value,
                                             error=done.message if state == "error" else "")
        a.writer.finish(state, stats)
        self._flush_timer.stop()
        a.widget.set_content("".join(a.content), "".join(a.reasoning), footer_text(stats, state))
        self.conversation.flush()
        self.send_button.setText("Send")
        self.refresh_chats()

    def _poll_writer(self) -> None:
        if self.answer is not None:
            self.answer.writer.poll()

    def regenerate(self) -> None:
        if self.generating or self.chat_id is None:
            return
        msgs = self.store.messages(self.chat_id)
        last_user = next((m for m in reversed(msgs) if m.role == "user"), None)
        if last_user is None:
            return
        self.store.delete_messages_after(last_user.id)
        self.open_chat(self.chat_id)
        self._generate()

    def edit_last(self, text: str | None = None) -> None:
        """Edit the last user message (asking for the new text unless given) and answer it again."""
        if self.generating or self.chat_id is None:
            return
        msgs = self.store.messages(self.chat_id)
        last_user = next((m for m in reversed(msgs) if m.role == "user"), None)
        if last_user is None:
            return
        ok = text is not None
        if text is None:
            text, ok = QInputDialog.getMultiLineText(self, "Edit and resend", "Message:", last_user.content)
        if ok and text.strip():
            self.store.edit_message(last_user.id, text.strip())
            self.open_chat(self.chat_id)
            self._generate()

    # -- dialogs ---------------------------------------------------------------------

    def models_dialog(self) -> ModelsDialog:
        dialog = ModelsDialog(self.registry, self.downloads, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # a new one each time; downloads keep running
        dialog.pairChosen.connect(lambda t, d: self.update_settings(target=t, draft=d))
        return dialog

    def open_models(self, tab: int = 1) -> None:
        dialog = self.models_dialog()
        dialog.tabs.setCurrentIndex(tab if self.registry.models() or tab == 0 else 0)
        dialog.exec()

    def _import_files(self) -> None:
        dialog = self.models_dialog()
        dialog.tabs.setCurrentIndex(1)
        dialog.import_files()
        dialog.exec()

    def edit_chat_settings(self) -> None:
        dialog = ChatSettingsDialog(self.settings(), self)
        if dialog.exec():
            new = dialog.result_settings()
            self.store.update_settings(self.chat_id, new)
            self._show_settings(new)

    def edit_app_settings(self) -> None:
        if SettingsDialog(self.config, self).exec():
            apply_theme(str(self.config["theme"]))
            self.loaded_pair = (None, None)  # reload with the new context, layers and thresholds
            self._ensure_pair(self.settings())

    def _export_telemetry(self, chat_id) -> None:
        from PySide6.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self, "Export this chat's rounds", "specchat-chat-rounds.csv",
                                              "CSV (*.csv);;JSON (*.json)")
        if path:
            (export_json if path.endswith(".json") else export_csv)(self.recorder, path, chat_id=chat_id)

    def _toggle_theme(self, dark: bool) -> None:
        self.config.set("theme", "dark" if dark else "light")
        self.config.save()
        apply_theme(str(self.config["theme"]))

    def _first_run_hint(self) -> None:
        if self.registry.models() or self.settings().target is not None:
            return
        from specchat.models.catalog import load_catalog
        from specchat.models.fit import free_memory

        rec = recommended(load_catalog(), *free_memory())
        self.show_notice("No models yet. Open Models → Download a pair…"
                         + (f" (recommended for this machine: {rec.name})." if rec else "."))

    # -- misc ------------------------------------------------------------------------

    def _update_memory(self) -> None:
        rss = psutil.Process().memory_info().rss
        self.memory_status.setText(f"RAM {rss / 1024**3:.2f} GiB")

    def about(self) -> None:
        from specchat.engine.runtime import backend_info

        info = backend_info()
        QMessageBox.about(self, "About SpecChat",
                          f"<b>SpecChat {__version__}</b><br>llama-cpp-python {info['llama_cpp_python']}"
                          f"<br>backend: {info['backend']}<br><small>{info['system_info']}</small>")

    def closeEvent(self, event) -> None:
        if self.answer is not None:  # keep the partial answer: finish it as stopped
            self.service.cancel()
            a = self.answer
            self.answer = None
            a.writer.finish("stopped", None)
        self.downloads.shutdown()
        self.telemetry.sampler.close()
        if self._window_state is not None:
            self._window_state.setValue("window/geometry", self.saveGeometry())
            self._window_state.setValue("window/state", self.saveState(WINDOW_STATE_VERSION))
            self._window_state.sync()
        super().closeEvent(event)

    def _restore_window_state(self) -> None:
        """Size, position and the telemetry dock (shown, hidden, where) as the user left them."""
        if self._window_state is None:
            return
        geometry = self._window_state.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = self._window_state.value("window/state")
        if state is not None:
            self.restoreState(state, WINDOW_STATE_VERSION)


WINDOW_STATE_VERSION = 1  # bump when the docks change, so an old saved layout is ignored


def _calibration_cache() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specchat")) / "calibration.json"
