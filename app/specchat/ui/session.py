"""One running app: the parts it owns, started in order and closed in reverse.

Not a widget.  The window receives these parts and composes the screen from them; the
threads belong here, so closing or replacing a window never ends an answer by accident,
and a test builds the same session with a fake pair factory.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QSettings

from specchat.backends.choose import for_chat
from specchat.backends.factory import BackendConfig
from specchat.backends.pairs import record_last_pair
from specchat.config import CONTROLLER_KEYS, AppConfig, ConfigChange, as_int
from specchat.engine.contention import MachineWatch
from specchat.engine.pair import PairConfig
from specchat.models.registry import Registry, RegistryError
from specchat.native_work import LastCrash, NativeWork
from specchat.profile import Profile
from specchat.services.answers import AnswerService
from specchat.services.api import ApiService
from specchat.services.download import DownloadService
from specchat.services.hub import HubTasks
from specchat.services.settings import SettingsHolder
from specchat.store import ChatSettings, Store, StoreWriteError
from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.samplers import MemorySampler
from specchat.workers.generation import GenerationService, PairFactory, forget_cpu_kernels, load_pair
from specchat.workers.tasks import TaskRunner

log = logging.getLogger(__name__)


class AppSession:
    """Store, registry and config (opened and checked by the caller), then the threads, then the window."""

    def __init__(self, store: Store, config: AppConfig, registry: Registry, *, profile: Profile,
                 pair_factory: PairFactory = load_pair, window_state: QSettings | None = None,
                 sampler: MemorySampler | None = None, nice: int | None = None,
                 last_crash: LastCrash | None = None, work: NativeWork | None = None) -> None:
        """``last_crash``: how the last run ended when it did not close (app/specchat/native_work.py): its
        pair is not preloaded and the CPU probe asks again; ``work``: where this run records its native work."""
        from .main_window import MainWindow

        self.store = store
        # the chats deleted in the last session go for good now: the instance lock holds, so no window
        # offers their undo any more (a failed write keeps them in the trash for the next start)
        self._purge_trash()
        self.config = config  # the settings in force (kept equal to self.settings.config)
        self.settings = SettingsHolder(config)
        self.registry = registry
        self.profile = profile
        self.recorder = TelemetryRecorder(settings=config.controller(), machine=MachineWatch())
        self.last_crash = last_crash
        self._closed = False
        self._started: list = []  # what has a thread, in the order started (closed in reverse if the rest fails)
        try:
            self.generation = GenerationService(pair_factory, work=work,
                                                nice=as_int(config["decode_nice"]) if nice is None else nice)
            self._started.append(self.generation)
            self.downloads = DownloadService()
            self._started.append(self.downloads)
            self.hub = HubTasks()  # searches, file lists and header checks of the Models dialog
            self._started.append(self.hub)
            self.tasks = TaskRunner()  # the dialogs' local work: llama-server --help, GGUF headers
            self._started.append(self.tasks)
            self.answers = AnswerService(store, self.generation, self.pair_config, self.recorder)
            self._started.append(self.answers)
            self.answers.pairLoaded.connect(self._remember_pair)
            if last_crash is not None and last_crash.files:
                forget_cpu_kernels()  # the kernels it trusted may be why: the next load probes them again
                self.answers.hold_back(last_crash.files)
            self.settings.changed.connect(self._config_changed)  # first: the window's listener reads self.config
            # the OpenAI-compatible server of the loaded pair (off until Models → Serve the API): its requests
            # wait in the answers' line; its uvicorn thread runs only while it serves
            self.api = ApiService(self.answers, self.settings)
            self._started.append(self.api)
            self.window = MainWindow(self, sampler=sampler, window_state=window_state)
        except BaseException:
            # a failure after a thread started must end that thread before the exception travels on: Qt aborts
            # the process ("QThread: Destroyed while thread is still running") when a running one is destroyed
            self._closed = True
            for part in reversed(self._started):
                part.shutdown()
            raise

    def _purge_trash(self) -> None:
        try:
            self.store.purge_trash()
        except StoreWriteError as exc:
            log.warning("the deleted chats stay in the trash until the next start: %s", exc)

    def pair_config(self, settings: ChatSettings) -> BackendConfig:
        """The backend a chat's settings ask for, with this app's settings in force (one choice for app
        and CLI: :func:`specchat.backends.choose.choose`)."""
        return for_chat(settings, self.config, self.profile)

    def _remember_pair(self) -> None:
        """The pair that loaded is the default of 'specchat chat' and 'bench' from now on."""
        loaded = self.answers.loaded_pair
        if isinstance(loaded, PairConfig):
            try:
                record_last_pair(self.profile, loaded.target, loaded.draft)
            except (RegistryError, OSError) as exc:
                log.warning("could not record the last pair: %s", exc)

    def set_config(self, config: AppConfig) -> ConfigChange:
        """Put new app settings (checked and saved) in force; every listener of ``settings.changed``
        hears which keys changed: the recorder's thresholds here, the theme and the pair in the window."""
        change = self.settings.set(config)
        self.config = config  # the newest object even when no key changed (its save merged the file)
        return change

    def _config_changed(self, change: ConfigChange) -> None:
        self.config = change.new
        if change.keys & CONTROLLER_KEYS:
            self.recorder.set_settings(change.new.controller())  # the panel draws the new guard rails

    def close(self) -> None:
        """Keep the partial answer, stop the threads, close the database.  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.api.shutdown()  # first: its requests are told SpecChat closes, and no new one comes in
        self.answers.shutdown()
        self.window.telemetry.sampler.close()
        self.downloads.shutdown()
        self.hub.shutdown()
        self.tasks.shutdown()
        self.generation.shutdown()
        self.store.close()
