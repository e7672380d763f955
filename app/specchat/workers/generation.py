"""The one long-lived generation thread that owns the loaded backend (models or a server).

llama.cpp contexts are not thread-safe, so exactly one thread ever touches
them: a QThread running :class:`GenerationWorker`.  It opens a backend from a
config (:func:`specchat.backends.factory.open_backend`) and iterates its answers, never
asking which kind it is.  The GUI asks through
queued signals and gets back the backend's frozen events, stamped with the
request id so a window can drop results of a request it has moved past
(Orange3's rule: one task at a time, stale results never reach the screen).
Stop is a thread-safe :class:`CancelToken` the engine checks between rounds,
so it takes effect within one round even while the worker is busy.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import traceback
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.backends.factory import BackendConfig, BackendFactory, backend_factory
from specchat.backends.local import PairFactory, load_pair
from specchat.backends.protocol import Backend, PairInfo
from specchat.engine import Done, Error, StopReason
from specchat.engine.answer import AnswerRequest, Started
from specchat.engine.cpu_kernels import forget as forget_cpu_kernels
from specchat.engine.cpu_kernels import verdict as cpu_kernel_verdict
from specchat.engine.events import GenerationStats
from specchat.engine.pair import CancelToken
from specchat.engine.progress import Throttle
from specchat.engine.runtime import LoadCancelled, backend_info
from specchat.errors import UserError, one_line
from specchat.native_work import NativeWork

from .threads import end_thread, start_thread

# what the window and the tests take from here (the ui never imports the engine's runtime itself)
__all__ = ["GenerationService", "GenerationWorker", "PairFactory", "PairInfo", "Started", "backend_info",
           "cpu_kernel_verdict", "forget_cpu_kernels", "load_pair", "lower_this_threads_priority"]


def lower_this_threads_priority(nice: int) -> bool:
    """Give the calling thread, and the threads it starts, a lower CPU priority.

    On two busy cores llama.cpp's compute threads (OpenMP, started from this thread, so
    they inherit its nice value) keep the GUI thread waiting for a core while it paints.
    A few nice levels let the scheduler run the GUI thread first when it wakes (window
    lateness p99 13.6 ms at 0, 11.4 ms at 2, 8.3 ms at 5); more would also starve
    decoding behind the user's other programs.  Linux only; elsewhere Qt's thread
    priority is the best we have (set by the service).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
    except OSError:
        return False
    return True


class GenerationWorker(QObject):
    """Lives in the generation thread; its slots run there."""

    pairLoaded = Signal(object)  # PairInfo
    pairInfoChanged = Signal(object)  # PairInfo: the loaded backend after an answer changed it (a server restarted)
    pairFailed = Signal(str)
    loadProgress = Signal(int, object)  # load id, LoadProgress (throttled: ~10 a second at most)
    # not "event": that name is QObject.event(), the virtual through which Qt delivers every event
    engineEvent = Signal(int, object)  # request id, engine event or Started

    def __init__(self, open_backend: BackendFactory, nice: int = 0, work: NativeWork | None = None) -> None:
        super().__init__()
        self._open = open_backend
        self._backend: Backend | None = None
        self._info: PairInfo | None = None  # what the backend was last said to be
        self._files: tuple[Path, ...] = ()  # the loaded backend's model files that llama.cpp runs here
        self._label = ""
        self._nice = nice
        self._work = work

    def _running(self, what: str, label: str, files: tuple[Path, ...]) -> AbstractContextManager[None]:
        """Native work recorded while it runs, so that a crash in it is known at the next start."""
        return self._work.running(what, label, files) if self._work is not None else nullcontext()

    @Slot()
    def lower_priority(self) -> None:
        if self._nice:
            lower_this_threads_priority(self._nice)

    @Slot(int, object, object)
    def load(self, load_id: int, config: BackendConfig, cancel: CancelToken) -> None:
        """Open the backend ``config`` names (a pair loaded here, or a server connected), in place of the last;
        its steps go out as ``loadProgress``, stamped with ``load_id``."""
        self.unload()
        if cancel.cancelled:  # a newer load is queued behind this one, or the app is closing
            return
        try:
            with self._running("load", config.label, config.native_files):
                backend = self._open(config, cancel, Throttle(partial(self.loadProgress.emit, load_id)))
        except LoadCancelled:
            return
        except UserError as exc:  # one line naming the file or the server
            self.pairFailed.emit(str(exc))
            return
        except Exception as exc:  # never kill the app: report it (a bug: the traceback to the terminal)
            traceback.print_exception(exc)
            exc.__traceback__ = None  # its frames hold what the load made
            self.pairFailed.emit(f"could not open {config.label}: {one_line(str(exc)) or type(exc).__name__}")
            return
        self._backend = backend
        self._files, self._label = config.native_files, config.label
        if cancel.cancelled:  # given up while the last step ran: never report a superseded backend
            self.unload()
            return
        info = self._info = backend.info
        if cancel.cancelled:
            self.unload()
            return
        self.pairLoaded.emit(info)

    @Slot()
    def unload(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    @Slot(int, object, object)
    def generate(self, rid: int, request: AnswerRequest, cancel: CancelToken) -> None:
        if self._backend is None:
            self._fail(rid, "no model is loaded: pick a model pair first")
            return
        try:
            with self._running("answer", self._label, self._files):
                for ev in self._backend.answer(request, cancel):
                    self.engineEvent.emit(rid, ev)
        except UserError as exc:  # the template failed: one line naming the model, the pair stays usable
            self._fail(rid, str(exc))
        except Exception as exc:  # every worker exception becomes an error event
            self._fail_unexpectedly(rid, exc)
        self._tell_info()

    def _tell_info(self) -> None:
        """The backend as it is after an answer, when that is not what was said (auto restarted the managed
        llama-server with or without its drafter: the panel's server line follows)."""
        if self._backend is None:
            return
        try:
            info = self._backend.info
        except Exception:  # noqa: BLE001 (a backend that cannot say: the last word stands)
            return
        if info != self._info:
            self._info = info
            self.pairInfoChanged.emit(info)

    def _fail_unexpectedly(self, rid: int, exc: Exception) -> None:
        """A bug, not the user's input: the traceback goes to the terminal, one line to the chat."""
        traceback.print_exception(exc)
        exc.__traceback__ = None  # its frames reference the pair; the error event must not keep them
        self._fail(rid, f"generation failed: {one_line(str(exc)) or type(exc).__name__}")

    def _fail(self, rid: int, message: str) -> None:
        self.engineEvent.emit(rid, Error(message))
        self.engineEvent.emit(rid, Done(StopReason.ERROR, GenerationStats.empty(), message))


class GenerationService(QObject):
    """GUI-side handle: owns the thread and the worker, hands out request ids and cancel tokens.

    Not a widget: windows receive it, so tests can drive it without a window.
    """

    # forwarded from the worker (queued into the GUI thread)
    pairLoaded = Signal(object)
    pairInfoChanged = Signal(object)
    pairFailed = Signal(str)
    engineEvent = Signal(int, object)
    loadProgress = Signal(object)  # LoadProgress of the newest load (a superseded load's never comes)
    # private: requests into the worker thread
    _load = Signal(int, object, object)
    _generate = Signal(int, object, object)
    _unload = Signal()

    def __init__(self, pair_factory: PairFactory = load_pair, parent: QObject | None = None, *, nice: int = 0,
                 open_backend: BackendFactory | None = None, work: NativeWork | None = None) -> None:
        """``pair_factory`` makes the local pairs (tests give a fake one); ``open_backend`` replaces the
        whole factory of backends; ``nice``: how far decoding yields the CPU to the window (the
        ``decode_nice`` setting); ``work``: where native work under way is recorded (the app's; none in
        most tests)."""
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._cancel: CancelToken | None = None
        self._load_cancel = CancelToken()
        self.current_request = 0
        self._loads = itertools.count(1)
        self.current_load = 0
        self._thread = QThread()
        self._thread.setObjectName("specchat-generation")
        self._worker = GenerationWorker(open_backend or backend_factory(pair_factory), nice, work)
        self._worker.moveToThread(self._thread)
        self._thread.finished.connect(self._worker.deleteLater)  # deleted in its own thread
        self._load.connect(self._worker.load)
        self._generate.connect(self._worker.generate)
        self._unload.connect(self._worker.unload)
        self._worker.pairLoaded.connect(self.pairLoaded)
        self._worker.pairInfoChanged.connect(self.pairInfoChanged)
        self._worker.pairFailed.connect(self.pairFailed)
        self._worker.engineEvent.connect(self._on_event)
        self._worker.loadProgress.connect(self._on_progress)
        self._thread.started.connect(self._worker.lower_priority)  # runs in the new thread, before any work
        start_thread(self._thread, QThread.Priority.LowPriority)

    def load(self, config: BackendConfig) -> None:
        """Open a backend (load a pair, connect to a server), giving up any load still running: only the
        newest one reports."""
        self.cancel()
        self._load_cancel.cancel()
        self._load_cancel = CancelToken()
        self.current_load = next(self._loads)
        self._load.emit(self.current_load, config, self._load_cancel)

    def submit(self, *, linked: CancelToken | None = None, **request) -> int:
        """Start a generation (cancelling any running one); returns its request id.  ``linked``: a token of
        the asker's own (an API client's) whose cancel stops this generation too, within one round, from
        whichever thread cancels it."""
        self.cancel()
        rid = next(self._ids)
        self.current_request = rid
        self._cancel = token = CancelToken()
        if linked is not None:
            linked.on_cancel(token.cancel)  # this request's token, never a later one's
        self._generate.emit(rid, AnswerRequest(**request), token)
        return rid

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()

    def _on_event(self, rid: int, ev: object) -> None:
        if rid == self.current_request:  # results of an abandoned request never reach the screen
            self.engineEvent.emit(rid, ev)

    def _on_progress(self, load_id: int, step: object) -> None:
        if load_id == self.current_load:  # a load given up for a newer one never paints over it
            self.loadProgress.emit(step)

    def shutdown(self, patience_ms: int = 10_000) -> None:
        """Stop the running answer or load, free the models in their thread, and end the thread."""
        self.cancel()
        self._load_cancel.cancel()
        self.current_request = self.current_load = 0
        self._unload.emit()
        end_thread(self._thread, patience_ms)
