"""One running app: the parts it owns, started in order and closed in reverse.

Not a widget.  The window receives these parts and composes the screen from them; the
threads belong here, so closing or replacing a window never ends an answer by accident,
and a test builds the same session with a fake pair factory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings

from specchat.config import AppConfig
from specchat.engine.pair import CancelToken, PairConfig, SpeculativePair
from specchat.models.registry import Registry
from specchat.store import ChatSettings, Store
from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.samplers import MemorySampler
from specchat.workers.answers import AnswerService
from specchat.workers.download import DownloadService
from specchat.workers.generation import GenerationService, load_pair

PairFactory = Callable[[PairConfig, CancelToken], SpeculativePair]


class AppSession:
    """Store, registry and config (opened and checked by the caller), then the threads, then the window."""

    def __init__(self, store: Store, config: AppConfig, registry: Registry, *, calibration_cache: Path | None,
                 pair_factory: PairFactory = load_pair, window_state: QSettings | None = None,
                 sampler: MemorySampler | None = None, nice: int | None = None) -> None:
        from .main_window import MainWindow

        self.store = store
        self.config = config
        self.registry = registry
        self.calibration_cache = calibration_cache
        self.recorder = TelemetryRecorder(settings=config.controller())
        self.generation = GenerationService(pair_factory, nice=int(config["decode_nice"]) if nice is None else nice)
        self.downloads = DownloadService()
        self.answers = AnswerService(store, self.generation, self.pair_config, self.recorder)
        self.window = MainWindow(self, sampler=sampler, window_state=window_state)
        self._closed = False

    def pair_config(self, settings: ChatSettings) -> PairConfig:
        """The pair a chat's settings ask for, with this app's model options (one loader for app and CLI)."""
        from specchat.pair_loading import pair_config

        if settings.target is None:
            raise ValueError("no model pair chosen for this chat")
        return pair_config(self.config, settings.target, settings.draft, calibration_cache=self.calibration_cache)

    def set_config(self, config: AppConfig) -> None:
        """New app settings are in force: the next answer loads the pair with them."""
        self.config = config
        self.window.config = config

    def close(self) -> None:
        """Keep the partial answer, stop the threads, close the database.  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.answers.shutdown()
        self.window.telemetry.sampler.close()
        self.downloads.shutdown()
        self.generation.shutdown()
        self.store.close()
