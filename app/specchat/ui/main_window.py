"""The main window: it composes the parts and routes between them, nothing more.

Chats on the left (:class:`ChatList`), the chat on screen in the centre (:class:`ChatPane`),
the telemetry dock on the right, the pair and memory in the status bar, the menus from
:mod:`.menus`.  It owns no thread and no answer: both belong to the :class:`AppSession`
it is given.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Protocol

import psutil
from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QLabel, QMainWindow, QMessageBox, QSplitter

from specchat import __version__
from specchat.backends.choose import trained_head_spec
from specchat.chat_commands import ChatCommands
from specchat.errors import UserError
from specchat.models.registry import RegistryError
from specchat.presets import Preset, PresetLibrary
from specchat.remote.llama_server import MANAGED
from specchat.remote.servers import ServerList, servers_file
from specchat.services.answers import AnswerNotice, Phase
from specchat.store import ChatSettings, StoreError
from specchat.telemetry.export import ExportError, export_rounds
from specchat.telemetry.samplers import MemorySampler
from specchat.workers.generation import PairInfo

from . import window_geometry as geometry
from .api_requests import ApiRequestsDialog
from .chat_files import ChatFiles
from .chat_list import ChatList
from .chat_pane import ChatPane
from .find_in_chat import ChatFind
from .fitting import ElidedLabel, StatusBar
from .menus import build_menus
from .models_dialog import ModelsDialog, recommended
from .presets_dialog import PresetsDialog, preset_summary
from .servers_dialog import ServersDialog
from .settings_dialogs import ChatSettingsDialog, SettingsDialog
from .shortcuts_dialog import ShortcutsDialog
from .task_table import TaskTableDialog
from .telemetry_panel import TelemetryPanel
from .theme import apply_theme
from .undo_bar import UndoBar

if TYPE_CHECKING:
    from specchat.config import AppConfig, ConfigChange
    from specchat.models.registry import Registry
    from specchat.native_work import LastCrash
    from specchat.profile import Profile
    from specchat.services.answers import AnswerService
    from specchat.services.api import ApiService
    from specchat.services.download import DownloadService
    from specchat.services.hub import HubTasks
    from specchat.services.settings import SettingsHolder
    from specchat.store import Store
    from specchat.telemetry import TelemetryRecorder
    from specchat.workers.tasks import TaskRunner


class WindowSession(Protocol):
    """What the window reads of the session that builds it (:class:`.session.AppSession`), which owns
    the store, the threads and the settings; the window owns none of them (and imports no session)."""

    store: Store
    answers: AnswerService
    api: ApiService  # the OpenAI-compatible server of the loaded pair (Models → Serve the API)
    config: AppConfig
    settings: SettingsHolder  # the settings in force, and their change signal
    recorder: TelemetryRecorder
    registry: Registry
    downloads: DownloadService
    hub: HubTasks
    tasks: TaskRunner  # local work off the GUI thread: llama-server --help, GGUF headers
    profile: Profile
    last_crash: LastCrash | None  # how the last run ended, when it crashed (its pair is not preloaded)

    def set_config(self, config: AppConfig) -> ConfigChange: ...

TELEMETRY_WIDTH = 460  # the dock's first width; the user's own is kept in the window state
WINDOW_STATE_VERSION = 1  # bump when the docks change, so an old saved layout is ignored
TINT_KEY = "view/draft_tint"  # in the window state: whether accepted draft text is tinted
# in the window state: "auto" (never chosen: hidden until an answer gives it something to plot), or the
# user's own choice from View → Telemetry panel or the dock's close button, "shown" or "hidden"
TELEMETRY_KEY = "view/telemetry"
TELEMETRY_CHOICES = ("auto", "shown", "hidden")
EXPORT_LINE_MS = 30_000  # where an export went, or why it could not: long enough to read a path
EVERYWHERE_WARNING = ("The API server now listens on every network interface: any machine that can reach this one "
                      "can use its models through it.")
MATCH_LINES = ("match ", "no match in this chat")  # what _show_matches says in the status bar
FALLBACK_HINT = ("If this keeps happening: a shorter draft, another draft model, or speculation off "
                 "for this chat")


class MainWindow(QMainWindow):
    def __init__(self, session: WindowSession, *, sampler: MemorySampler | None = None,
                 window_state: QSettings | None = None, parent=None) -> None:
        super().__init__(parent)
        self.session = session
        self.store = session.store
        self.commands = ChatCommands(session.store)  # the window's writes: new, delete, undo, settings
        self.answers = session.answers
        self.api = session.api
        self._api_requests: ApiRequestsDialog | None = None  # View → API requests…, while open
        self.everywhere_warning: QMessageBox | None = None  # the last warning that the API is open to others
        self._window_state = window_state  # where size, splitters and docks are kept (None: not kept)
        self.setWindowTitle("SpecChat")
        self.setGeometry(geometry.first_geometry(geometry.available_geometry(self)))  # within the screen
        self.telemetry = TelemetryPanel(session.recorder, sampler, self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.telemetry)
        self.telemetry_choice = "auto"  # see TELEMETRY_KEY
        self.telemetry.said.connect(lambda line: self.statusBar().showMessage(line, EXPORT_LINE_MS))
        self.resizeDocks([self.telemetry], [TELEMETRY_WIDTH], Qt.Orientation.Horizontal)  # the chat gets the rest
        self.chats = ChatList(self.store, self.answers, self)
        self.pane = ChatPane(self.store, self.answers)
        split = QSplitter()
        split.addWidget(self.chats.widget)
        split.addWidget(self.pane)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 940])
        split.setChildrenCollapsible(False)  # dragged to the edge, the chat list stays at its minimum width
        self.splitter = split
        self.setCentralWidget(split)
        self.pair_status = ElidedLabel("no model loaded")  # a long pair name elides, never widens the window
        self.memory_status = QLabel()
        self.api_status = QLabel()  # "API http://127.0.0.1:8177/v1 · 3 requests" while it serves
        self.api_status.setToolTip("SpecChat answers OpenAI-compatible requests with the loaded pair; "
                                   "View → API requests… lists them")
        self.api_status.hide()
        self.setStatusBar(StatusBar(self))  # a long message ends in "…", whole in its tooltip
        self.statusBar().addWidget(self.pair_status, 1)
        self.statusBar().addPermanentWidget(self.api_status)
        self.statusBar().addPermanentWidget(self.memory_status)
        toggle = self.telemetry.toggleViewAction()
        toggle.triggered.connect(lambda shown: self._telemetry_chosen("shown" if shown else "hidden"))
        self.telemetry.installEventFilter(self)  # its close button: the user's choice too
        tint = self._saved_tint()
        self.actions_by_slot = build_menus(self, {"telemetry": toggle},
                                           {"set_theme": str(self.config["theme"]), "set_chat_list": True,
                                            "set_tint": tint})
        self.pane.conversation.set_tint(tint)
        # a message's footer switch ticks the View menu's entry, which calls set_tint
        self.pane.conversation.tintRequested.connect(self.actions_by_slot["set_tint"].setChecked)
        self.answers.queueChanged.connect(self._update_chat_actions)
        self.undo_bar = UndoBar(self, anchor=self.pane.conversation)  # "Deleted “…” [Undo]" after a delete
        self.undo_bar.undoRequested.connect(self.restore_chat)
        self.undo_bar.activeChanged.connect(self.actions_by_slot["undo_delete"].setEnabled)
        self.actions_by_slot["undo_delete"].setEnabled(False)  # disabled, Ctrl+Z is the text fields'

        self.chats.chatSelected.connect(self.open_chat)
        self.chats.newChatRequested.connect(self.new_chat)
        self.chats.deleteRequested.connect(self.delete_chat)
        self.chats.renameFailed.connect(lambda line: self.statusBar().showMessage(line, 20_000))
        # File → Export / Import / Restore a backup…, the chat list's menu, the scheduled backup (ui/chat_files.py)
        self.files = ChatFiles(self, self.commands, config=lambda: self.session.config, tasks=session.tasks,
                               busy=lambda: bool(self.answers.busy_chats()))
        self.files.said.connect(lambda line: self.statusBar().showMessage(line, EXPORT_LINE_MS))
        self.files.chatsChanged.connect(self._chats_changed)
        self.chats.list.addActions(self.files.context_actions(self.chats.list, lambda: self.chats.current))
        # a search's words in the open chat: highlighted, the current match scrolled to (Enter, F3: the next)
        self.finder = ChatFind(self.pane.conversation, self)
        self.finder.changed.connect(self._show_matches)
        self.chats.search.textChanged.connect(self.finder.set_text)
        self.chats.search.returnPressed.connect(self.find_next)
        self._shortcuts: ShortcutsDialog | None = None  # Help → Keyboard shortcuts, while open
        self.pane.titleChanged.connect(self.chats.refresh)
        self.pane.pairRequested.connect(self.open_models)
        self.pane.pairChanged.connect(self.answers.preload)
        # the window opens Chat settings…: the dialog lists the profile's servers and checks the llama-server
        # on the session's task runner, which the pane cannot see
        self.pane.header.settingsRequested.connect(self.edit_chat_settings)
        self.pane.settingsRequested.connect(self.edit_chat_settings)  # the context error's "Chat settings… → Past the context"
        self.pane.header.presetsRequested.connect(self.open_presets)
        self.answers.pairLoading.connect(lambda name: self.pair_status.setText(f"loading {name}…"))
        self.answers.pairLoaded.connect(self._on_pair_loaded)
        self.answers.pairInfoChanged.connect(self._on_pair_info)  # a server auto restarted: its line follows
        self.answers.pairFailed.connect(self._on_pair_failed)
        self.answers.finished.connect(lambda *_: self.chats.refresh())
        # the finished answer renders anew (its last text, its footer): the search's highlight with it, after it
        self.answers.finished.connect(lambda *_: QTimer.singleShot(0, self.finder.rehighlight))
        for data in (self.answers.changed, self.answers.finished, self.answers.queueChanged):
            data.connect(self._telemetry_when_data)  # the plots show once an answer has given them rounds
        self.pane.emptyStateShown.connect(self._fill_empty_state)
        self.pane.empty_state.downloadRequested.connect(self.open_downloads)
        self.pane.empty_state.importRequested.connect(self.import_files)
        self.answers.notice.connect(self._on_notice)
        self.answers.idle.connect(self._preload_shown)
        session.settings.changed.connect(self._config_changed)
        self.api.stateChanged.connect(self._show_api)
        self.api.record.connect(lambda _record: self._show_api())
        self.answers.queueChanged.connect(self._show_api)  # "answering", "N in line"
        self.api.failed.connect(lambda line: self.statusBar().showMessage(f"the API is off: {line}", 30_000))
        self._memory_timer = QTimer(self, interval=2000)
        self._memory_timer.timeout.connect(self._update_memory)
        self._memory_timer.start()
        self._empty_state_for: tuple | None = None  # what the empty state was last filled for
        self._open_newest()
        if session.last_crash is not None:  # its pair was held back: say why nothing loads by itself
            self.pane.show_notice(session.last_crash.line(), error=True)
        self._closing = False
        self._restore_window_state()
        self._apply_telemetry_choice()

    @property
    def config(self) -> AppConfig:
        """The app settings in force (the session's: one copy)."""
        return self.session.config

    # -- chats ------------------------------------------------------------------------------

    @property
    def chat_id(self) -> int | None:
        return self.pane.chat_id

    def open_chat(self, chat_id: int) -> None:
        """Show a chat; an answer running elsewhere goes on, and its pair is loaded only when idle."""
        if self.chats.current != chat_id:
            self.chats.select(chat_id)  # comes back here through chatSelected
            return
        self.pane.show_chat(chat_id)
        self.finder.refresh()  # the search's words in this chat
        self.pane.header.set_backend(self.pane.settings().backend)
        self._preload_shown()
        self._update_chat_actions()

    def new_chat(self, preset: Preset | None = None) -> None:
        """A new chat from the user's defaults (and ``preset``'s settings over them), shown, the composer focused.

        The defaults are the app settings' target, draft and speculation mode; never another chat's
        schema, system prompt, sampling or server.  With no default target in the settings, the
        latest chat's local pair (the pair chosen with Pair… stays chosen), and nothing else of it.
        """
        target, draft = self.config.model_path("target"), self.config.model_path("draft")
        if target is None:
            local = next((c.settings for c in self.store.list_chats() if c.settings.target is not None), None)
            if local is not None:
                target, draft = local.target, local.draft
        try:
            chat = self.commands.new_chat_with(ChatSettings(target=target, draft=draft,
                                                            speculation=str(self.config["default_mode"])), preset)
        except StoreError as exc:
            self.statusBar().showMessage(f"no new chat: {exc}", 20_000)
            return
        self.open_chat(chat.id)
        self.pane.composer.setFocus(Qt.FocusReason.OtherFocusReason)

    def delete_chat(self, chat_id: int | None = None) -> None:
        """Delete a chat, with an undo (it goes to the trash; see :class:`.undo_bar.UndoBar`); an answer
        it is generating is stopped first, and what it had written is kept with the chat."""
        chat_id = self.chat_id if chat_id is None else chat_id
        if chat_id is None:
            return
        self.answers.stop(chat_id)
        try:
            trashed = self.commands.delete(chat_id)
        except StoreError as exc:
            self.statusBar().showMessage(f"the chat is not deleted: {exc}", 20_000)
            return
        self.undo_bar.push(chat_id, trashed.title)
        if chat_id == self.chat_id:
            self.chats.current = None
            self._open_newest()
        else:
            self.chats.refresh()

    def undo_delete(self) -> None:
        """Chat → Undo delete (Ctrl+Z while the undo bar shows): the last deleted chat comes back."""
        self.undo_bar.undo()

    def restore_chat(self, chat_id: int) -> None:
        """Take a deleted chat out of the trash, at its place in the list, and open it; where the store
        refuses, the undo offer stays in its bar to try again."""
        try:
            self.commands.undo_delete(chat_id)
        except StoreError as exc:
            self.statusBar().showMessage(f"the chat is still deleted: {exc}; Undo again to retry", 20_000)
            return
        self.undo_bar.restored(chat_id)
        self.open_chat(chat_id)

    # -- chats to files and back (ui/chat_files.py) ---------------------------------------------

    def export_chat(self) -> None:
        self.files.export(self.chat_id)

    def export_all_chats(self) -> None:
        self.files.export(None)

    def import_chats(self) -> None:
        self.files.import_chats()

    def restore_backup(self) -> None:
        self.files.restore()

    def _chats_changed(self, imported: list[int]) -> None:
        """Imported chats: the first one shown; a restore ([]): the newest chat of what came back."""
        if imported:
            self.open_chat(imported[0])
        else:
            self.undo_bar.dismiss()  # a deleted chat of before the restore is not the chat of that id now
            self.chats.current = None
            self._open_newest()

    def _open_newest(self) -> None:
        chats = self.store.list_chats()
        if chats:
            self.open_chat(chats[0].id)
        else:
            self.new_chat()

    # -- the pair ---------------------------------------------------------------------------

    def _preload_shown(self) -> None:
        if self.chat_id is not None:
            self.answers.preload(self.pane.settings())

    def _on_pair_loaded(self, info: PairInfo) -> None:
        self.pane.clear_pair_notice()  # "No model pair…" or the last load's failure: stale now
        self.telemetry.set_memory_shares(info.memory_shares)
        self.telemetry.set_backend(info)
        self.pane.header.set_reasoning_available(info.supports_reasoning_switch)
        self._show_pair(info)
        if info.speculation_blocked:
            self.pane.show_notice(f"speculation off: {info.speculation_blocked}")

    def _on_pair_info(self, info: PairInfo) -> None:
        self.telemetry.set_backend(info)
        self._show_pair(info)

    def _show_pair(self, info: PairInfo | None) -> None:
        self.pair_status.setText("no model loaded" if info is None else
                                 f"{info.target}" + (f" + {info.draft}" if info.draft else "")
                                 + f" · {info.backend}" + (f" · ctx {info.n_ctx}" if info.n_ctx else ""))

    def _on_pair_failed(self, message: str) -> None:
        """What is loaded now: none after a load that failed (the last backend went first), the last one
        still when the pair could not even be named (a model file gone)."""
        info = self.answers.pair_info
        self._show_pair(info)
        if info is None:
            self.telemetry.set_backend(None)  # no server's line left standing
        self.pane.show_notice(message, error=True)

    def _on_notice(self, notice: AnswerNotice) -> None:
        # guard rails and the fallback-share warning also go to the status bar, saying what to do
        if notice.warning:  # dated ("after N rounds, …"), and gone in 20 s: the pane keeps the share current
            self.statusBar().showMessage(notice.text, 20_000)
        elif not (notice.error or notice.permanent):
            self.statusBar().showMessage(f"speculation paused: {notice.text}. {FALLBACK_HINT}", 20_000)

    # -- menu entries (see menus.py) ------------------------------------------------------------

    def models_dialog(self) -> ModelsDialog:
        dialog = ModelsDialog(self.session.registry, self.session.downloads, self.session.hub, self,
                              tasks=self.session.tasks,
                              user_catalog=self.session.profile.user_catalog,
                              cache_dir=self.session.profile.cache_dir / "headers")
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # a new one each time; downloads keep running
        dialog.pairChosen.connect(self._pair_chosen)
        return dialog

    def _pair_chosen(self, target, draft) -> None:
        """Choosing local models makes the chat run on this machine again: in SpecChat's own loop, or, with
        a trained head as the draft (MTP, EAGLE-3, DFlash, DSpark), in the llama-server SpecChat starts
        for it, drafting with the head's own --spec-type."""
        spec_type = trained_head_spec(draft)
        backend = MANAGED if spec_type else ""
        self.pane.update_settings(target=target, draft=draft, backend=backend,
                                  **({"server_spec_type": spec_type} if spec_type else {}))
        self.pane.header.set_backend(backend)

    def open_models(self, tab: int = 1) -> None:
        dialog = self.models_dialog()
        dialog.tabs.setCurrentIndex(tab if tab == 0 or dialog.installed.count() else 0)
        dialog.exec()
        self._models_changed()

    def open_downloads(self) -> None:
        self.open_models(tab=0)

    def import_files(self) -> None:
        dialog = self.models_dialog()
        dialog.tabs.setCurrentIndex(1)
        dialog.import_files()
        dialog.exec()
        self._models_changed()

    def edit_app_settings(self) -> None:
        dialog = SettingsDialog(self.config, self, api=self.api)
        if dialog.exec() and dialog.result_config is not None:
            self.session.set_config(dialog.result_config)  # the listeners take it: _config_changed
            if dialog.notes:
                self.statusBar().showMessage(" ".join(dialog.notes), 30_000)

    def _config_changed(self, change: ConfigChange) -> None:
        """New app settings are in force: the theme, and the pair when a key it is loaded with changed."""
        if "theme" in change.keys:
            self._show_theme(str(change.new["theme"]))
        if "api_everywhere" in change.keys and change.new["api_everywhere"]:
            self._warn_everywhere()
        if change.reloads_pair:
            # the next answer (or now, if idle) loads the pair with the new context, layers and thresholds
            self.answers.reload(self.pane.settings() if self.chat_id is not None else None)

    def server_names(self) -> list[str]:
        """The servers in Settings → Servers now (none, and the reason in the status bar, when unreadable)."""
        try:
            return [s.name for s in ServerList(servers_file(self.session.profile)).all()]
        except UserError as exc:
            self.statusBar().showMessage(str(exc), 20_000)
            return []

    def edit_chat_settings(self, field: str = "") -> None:
        """Chat settings… of the shown chat; ``field`` ("context_policy"): the one to open at."""
        if self.chat_id is None:
            return
        chat_id, before = self.chat_id, self.pane.settings()
        dialog = ChatSettingsDialog(before, self, servers=self.server_names(), tasks=self.session.tasks)
        dialog.focus_field(field)
        if not dialog.exec() or self.chat_id != chat_id:
            return
        new = dialog.result_settings()
        try:
            self.commands.update_settings(chat_id, new)
        except StoreError as exc:
            self.statusBar().showMessage(f"the chat's settings are as they were: {exc}", 20_000)
            return
        self.pane.show_settings(new)
        self.pane.header.set_backend(new.backend)
        if new.backend != before.backend:
            self._preload_shown()  # connect to the server (or load the local pair) before the first question

    def open_presets(self) -> None:
        """Presets…: the shown chat (or a new one) takes a preset; presets edited, imported, exported."""
        library = PresetLibrary.of(self.session.profile.config_dir)
        dialog = PresetsDialog(library, self, has_chat=self.chat_id is not None)
        dialog.applyRequested.connect(self.apply_preset)
        dialog.newChatRequested.connect(self.new_chat)
        dialog.exec()
        dialog.deleteLater()

    def apply_preset(self, preset: Preset) -> None:
        if self.chat_id is None:
            return
        try:
            chat = self.commands.apply_preset(self.chat_id, preset)
        except (StoreError, ValueError) as exc:
            self.statusBar().showMessage(f"the chat's settings are as they were: {exc}", 20_000)
            return
        self.pane.show_settings(chat.settings)
        self.statusBar().showMessage(f"preset {preset_summary(preset)}", 10_000)

    def open_servers(self) -> None:
        dialog = ServersDialog(self.session.profile, self)
        dialog.exec()
        dialog.deleteLater()
        if self.chat_id is not None:
            self._preload_shown()  # a changed URL or model of the shown chat's server: reconnect while idle

    def show_task_table(self) -> None:
        TaskTableDialog(self.store, self).exec()

    # -- the API server ---------------------------------------------------------------------------

    def set_api(self, on: bool) -> None:
        """Models → Serve the API: the loaded pair answers OpenAI-compatible requests, in the chats' line."""
        if on and not self.api.running:
            self.api.start()  # a port in use: failed says it in the status bar, and _show_api unticks
        elif not on and self.api.running:
            self.api.stop()
        self._show_api()

    def _show_api(self) -> None:
        """The status bar's line and the menu's tick say whether it serves (also after it moved or failed)."""
        running = self.api.running
        action = self.actions_by_slot.get("set_api")
        if action is not None and action.isChecked() != running:
            action.blockSignals(True)  # only the tick: set_api is the user's word
            action.setChecked(running)
            action.blockSignals(False)
        self.api_status.setVisible(running)
        if running:
            n = self.api.requests
            parts = [f"API {self.api.url}" + (" (every interface)" if self.api.everywhere else ""),
                     f"{n} request{'' if n == 1 else 's'}"]
            head, behind = self.answers.external, self.answers.external_waiting
            if head is not None:
                parts.append("answering" if head.phase is Phase.STREAMING else "waiting for the pair")
            if behind:
                parts.append(f"{behind} in line")
            self.api_status.setText(" · ".join(parts))

    def show_api_requests(self) -> None:
        """View → API requests…: a window that lists them as they end (one, raised if open)."""
        if self._api_requests is None:
            dialog = ApiRequestsDialog(self.api, self)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.destroyed.connect(lambda: setattr(self, "_api_requests", None))
            self._api_requests = dialog
        self._api_requests.show()
        self._api_requests.raise_()
        self._api_requests.activateWindow()

    def _warn_everywhere(self) -> None:
        """api_everywhere was turned on: said once, when it is."""
        key = "An API key is set." if self.api.has_key() else "No API key is set: set one in Settings → App settings."
        box = QMessageBox(QMessageBox.Icon.Warning, "API on every interface", f"{EVERYWHERE_WARNING} {key}",
                          QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.everywhere_warning = box

    def set_chat_list(self, shown: bool) -> None:
        """View → Chat list: hidden, the chat gets its room and the window may be narrower."""
        self.chats.widget.setVisible(shown)
        action = self.actions_by_slot.get("set_chat_list")
        if action is not None and action.isChecked() != shown:
            action.setChecked(shown)

    def set_tint(self, on: bool) -> None:
        """View → Colour accepted draft tokens (or a message's footer switch); remembered."""
        self.pane.conversation.set_tint(on)
        if self._window_state is not None:
            self._window_state.setValue(TINT_KEY, on)

    def _saved_tint(self) -> bool:
        if self._window_state is None:
            return False
        return bool(self._window_state.value(TINT_KEY, False, type=bool))

    def set_theme(self, setting: str) -> None:
        """View → Theme: "system", "light" or "dark", saved in the app settings."""
        try:
            config = self.config.replaced({"theme": setting})
            config.save()
        except (ValueError, OSError) as exc:
            self.statusBar().showMessage(f"theme not saved: {exc}", 10_000)
            self._show_theme(str(self.config["theme"]))
            return
        if not self.session.set_config(config):  # a change: _config_changed shows it
            self._show_theme(setting)  # in force already: tick it

    def _show_theme(self, setting: str) -> None:
        """Use a theme setting and tick it in View → Theme."""
        apply_theme(setting)
        action = self.actions_by_slot.get(f"set_theme:{setting}")
        if action is not None:
            action.setChecked(True)

    # -- the Chat menu (shortcuts) -------------------------------------------------------------

    def search_chats(self) -> None:
        self.chats.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.chats.search.selectAll()

    def find_next(self) -> None:
        """Chat → Next match (F3, or Enter in the search field): the next match in the open chat."""
        self.finder.step(forward=True)

    def find_previous(self) -> None:
        self.finder.step(forward=False)

    def _show_matches(self, current: int, count: int) -> None:
        """"match 2 of 5 in this chat" while a search is typed; with none, only that line goes (not, say,
        where an export went)."""
        if not self.finder.words:
            if self.statusBar().currentMessage().startswith(MATCH_LINES):
                self.statusBar().clearMessage()
        elif count:
            self.statusBar().showMessage(f"match {current} of {count} in this chat (F3 next, Shift+F3 previous)",
                                         EXPORT_LINE_MS)
        else:
            self.statusBar().showMessage("no match in this chat's messages", 10_000)

    def stop_answer(self) -> None:
        if self.pane.generating:
            self.pane.stop()

    def regenerate(self) -> None:
        self.pane.regenerate()

    def copy_last_answer(self) -> None:
        """The shown chat's last answer (as far as it has come) to the clipboard."""
        last = next((w for w in reversed(self.pane.conversation.messages) if w.role == "assistant"), None)
        if last is None or not last.content:
            self.statusBar().showMessage("no answer to copy in this chat", 5_000)
            return
        QGuiApplication.clipboard().setText(last.content)
        last.show_copied()  # its footer's Copy says "Copied ✓" for a moment
        self.statusBar().showMessage(f"Copied the last answer ({len(last.content):,} characters)", 5_000)

    def _update_chat_actions(self) -> None:
        """Stop only while the shown chat generates (a disabled action leaves Esc to the widgets);
        Regenerate only while it does not."""
        generating = self.pane.generating
        self.actions_by_slot["stop_answer"].setEnabled(generating)
        self.actions_by_slot["regenerate"].setEnabled(not generating and self.chat_id is not None)

    def export_telemetry(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export this chat's rounds", "specchat-chat-rounds.csv",
                                              "CSV (*.csv);;JSON (*.json)")
        if path:
            try:
                line = export_rounds(self.session.recorder, path, chat_id=self.chat_id)
            except ExportError as exc:  # a folder, a device, a read-only folder: why, in one line
                line = str(exc)
            self.statusBar().showMessage(line, EXPORT_LINE_MS)

    def show_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts: every key the window has (one window, raised if open)."""
        if self._shortcuts is None:
            dialog = ShortcutsDialog(self)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.destroyed.connect(lambda: setattr(self, "_shortcuts", None))
            self._shortcuts = dialog
        self._shortcuts.show()
        self._shortcuts.raise_()
        self._shortcuts.activateWindow()
        return self._shortcuts

    def about(self) -> None:
        from specchat.workers.generation import backend_info

        info = backend_info()
        QMessageBox.about(self, "About SpecChat",
                          f"<b>SpecChat {__version__}</b><br>llama-cpp-python {info['llama_cpp_python']}"
                          f"<br>backend: {info['backend']}<br>{html.escape(info['cpu_kernels'])}"
                          f"<br><small>{info['system_info']}</small>")

    # -- the empty state: how to get a pair (ui/empty_state.py) ------------------------------------

    def _fill_empty_state(self) -> None:
        """The chat shown has no pair and no message: the card says whether models are installed and, when
        none is, which pair to download for this machine.  Read once, and again after the Models dialog."""
        if self._empty_state_for is not None:
            return
        try:
            has_models = bool(self.session.registry.models())
        except RegistryError:
            has_models = False  # start-up checked it; damaged since: the Models dialog says so when opened
        rec = None
        if not has_models:
            from specchat.models.catalog import load_catalog_lenient
            from specchat.models.fit import free_memory
            from specchat.models.hub import human_bytes

            pair = recommended(load_catalog_lenient(self.session.profile.user_catalog)[0], *free_memory())
            rec = (pair.name, human_bytes(pair.size)) if pair is not None else None
        self._empty_state_for = (has_models, rec)
        self.pane.empty_state.show_for(has_models, rec)

    def _models_changed(self) -> None:
        """After the Models dialog: what is installed may have changed."""
        self._empty_state_for = None
        if self.pane.conversation.placeholder_shown:
            self._fill_empty_state()

    # -- the telemetry dock: collapsed until there is something to plot --------------------------

    def _telemetry_chosen(self, choice: str) -> None:
        """View → Telemetry panel, or the dock's close button: the user's choice, kept from now on."""
        self.telemetry_choice = choice
        if self._window_state is not None:
            self._window_state.setValue(TELEMETRY_KEY, choice)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.telemetry and event.type() == QEvent.Type.Close and not self._closing:
            self._telemetry_chosen("hidden")  # the dock's ✕ (the action's toggle says it by itself)
        return super().eventFilter(watched, event)

    def _has_plot_data(self) -> bool:
        recorder = self.session.recorder
        return bool(recorder.rounds() or recorder.answers())

    def _apply_telemetry_choice(self) -> None:
        """As the user chose; never chosen: shown only once there is something to plot."""
        if self.telemetry_choice == "auto":
            self.telemetry.setVisible(self._has_plot_data())
        else:
            self.telemetry.setVisible(self.telemetry_choice == "shown")

    def _telemetry_when_data(self, *_args: object) -> None:
        """An answer moved on: the dock, collapsed because nothing was plotted yet, shows its first rounds,
        where the window has room for it beside the chat (it never widens the window past the screen)."""
        if self.telemetry_choice != "auto" or not self.telemetry.isHidden():
            return
        central = self.splitter  # the chat list and the chat
        if central.width() - central.minimumSizeHint().width() < self.telemetry.minimumSizeHint().width():
            return
        if self._has_plot_data():
            self.telemetry.show()

    # -- misc ------------------------------------------------------------------------------

    def _update_memory(self) -> None:
        rss = psutil.Process().memory_info().rss
        self.memory_status.setText(f"RAM {rss / 1024**3:.2f} GiB")

    def closeEvent(self, event) -> None:
        """The session keeps the partial answer when the app ends; the window keeps its layout."""
        self._closing = True
        if self._window_state is not None:
            self._window_state.setValue("window/geometry", self.saveGeometry())
            self._window_state.setValue("window/state", self.saveState(WINDOW_STATE_VERSION))
            self._window_state.setValue(TELEMETRY_KEY, self.telemetry_choice)
            self._window_state.setValue("window/splitter", self.splitter.saveState())
            self._window_state.setValue("window/chat_list", not self.chats.widget.isHidden())
            self._window_state.sync()
        super().closeEvent(event)

    def _restore_window_state(self) -> None:
        """Size, position and the telemetry dock (shown, hidden, where) as the user left them; the
        position and size kept on the screens there are now."""
        if self._window_state is None:
            return
        saved = self._window_state.value("window/geometry")
        if saved is not None:
            self.restoreGeometry(saved)
            self._keep_on_screen()
        state = self._window_state.value("window/state")
        if state is not None:
            self.restoreState(state, WINDOW_STATE_VERSION)
        choice = str(self._window_state.value(TELEMETRY_KEY, "") or "")
        if choice not in TELEMETRY_CHOICES:  # a layout saved before the dock followed its data: the user's
            choice = "auto" if state is None else "hidden" if self.telemetry.isHidden() else "shown"
        self.telemetry_choice = choice
        splitter = self._window_state.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)  # the chat list's width as the user dragged it
        if str(self._window_state.value("window/chat_list", "true")).lower() == "false":
            self.set_chat_list(False)

    def _keep_on_screen(self) -> None:
        """A restored geometry that no screen holds whole now (a smaller or unplugged monitor) is moved, and
        shrunk where it must be, onto the available geometry of the screen that shows most of it (or the
        first one)."""
        if self.isMaximized() or self.isFullScreen():
            return
        rect = self.geometry()
        screens = geometry.screens()
        home = geometry.home(rect, screens) or (screens[0] if screens else None)
        if home is not None and not geometry.fits(rect, home):
            self.setGeometry(geometry.clamped(rect, home))
