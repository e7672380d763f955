"""The one long-lived generation thread that owns the loaded models.

llama.cpp contexts are not thread-safe, so exactly one thread ever touches
them: a QThread running :class:`GenerationWorker`.  The GUI asks through
queued signals and gets back the engine's frozen events, stamped with the
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.engine import Done, Error, Mode, SamplingSettings, StopReason
from specchat.engine.chat import TemplateCancelled
from specchat.engine.events import GenerationStats
from specchat.engine.pair import CancelToken, PairConfig, SpeculativePair
from specchat.engine.phases import PhaseTagger
from specchat.engine.runtime import LlamaError, LoadCancelled, backend_info
from specchat.errors import UserError, one_line
from specchat.models.fit import estimate_files
from specchat.models.gguf_header import GGUFError
from specchat.pair_loading import fit_problem
from specchat.remote.backend import RemoteBackend, RemoteConfig
from specchat.remote.chat import ChatRequest
from specchat.remote.client import Capabilities
from specchat.telemetry.samplers import MemoryShare, estimated_shares

from .threads import end_thread, start_thread


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: int
    messages: tuple[dict[str, str], ...]
    mode: Mode = Mode.AUTO
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    max_tokens: int = 1024
    reasoning: bool | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Started:
    """The prompt is tokenized; decoding begins."""

    prompt_tokens: int
    starts_in_reasoning: bool


@dataclass(frozen=True, slots=True)
class PairInfo:
    target: str
    draft: str | None
    backend: str
    n_ctx: int
    supports_reasoning_switch: bool
    speculation_blocked: str
    verify_ms: dict[int, float]
    draft_ms: float | None
    target_bytes: int
    draft_bytes: int
    # the fit estimate split into target weights, draft weights, KV caches and buffers (empty if unknown)
    memory_shares: tuple[MemoryShare, ...] = ()
    remote: Capabilities | None = None  # a server backend: what it said it can report

    @classmethod
    def of_server(cls, config: RemoteConfig, caps: Capabilities) -> PairInfo:
        return cls(target=caps.model_name, draft=None, backend=f"{caps.engine} at {config.label}",
                   n_ctx=caps.n_ctx or 0, supports_reasoning_switch=True, speculation_blocked="",
                   verify_ms={}, draft_ms=None, target_bytes=0, draft_bytes=0, remote=caps)


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


def load_pair(config: PairConfig, cancel: CancelToken) -> SpeculativePair:
    """The real pair factory: the models from their GGUF files (checked, loaded, calibrated).

    A pair that clearly cannot fit in free memory (the header-only estimate) is refused
    with the reason before llama.cpp allocates anything.
    """
    problem = fit_problem(config)
    if problem:
        raise LlamaError(problem)
    return SpeculativePair(config, cancel)


class GenerationWorker(QObject):
    """Lives in the generation thread; its slots run there."""

    pairLoaded = Signal(object)  # PairInfo
    pairFailed = Signal(str)
    # not "event": that name is QObject.event(), the virtual through which Qt delivers every event
    engineEvent = Signal(int, object)  # request id, engine event or Started

    def __init__(self, pair_factory: Callable[[PairConfig, CancelToken], SpeculativePair] = load_pair,
                 nice: int = 0, server_factory: Callable[[RemoteConfig], RemoteBackend] = RemoteBackend.connect) -> None:
        super().__init__()
        self._factory = pair_factory
        self._server_factory = server_factory
        self._pair: SpeculativePair | None = None
        self._server: RemoteBackend | None = None
        self._nice = nice

    @Slot()
    def lower_priority(self) -> None:
        if self._nice:
            lower_this_threads_priority(self._nice)

    @Slot(object, object)
    def load(self, config: PairConfig | RemoteConfig, cancel: CancelToken) -> None:
        self.unload()
        if cancel.cancelled:  # a newer load is queued behind this one, or the app is closing
            return
        if isinstance(config, RemoteConfig):
            self._connect(config, cancel)
            return
        try:
            pair = self._factory(config, cancel)
        except LoadCancelled:
            return
        except LlamaError as exc:
            self.pairFailed.emit(str(exc))
            return
        except Exception as exc:  # never kill the app: report it (a bug: the traceback to the terminal)
            traceback.print_exception(exc)
            exc.__traceback__ = None  # its frames hold what the load made
            self.pairFailed.emit(f"could not load the models: {one_line(str(exc)) or type(exc).__name__}")
            return
        self._pair = pair
        if cancel.cancelled:  # given up while the last step ran: never report a superseded pair
            self.unload()
            return
        info = backend_info()
        paths = [config.target] + ([config.draft] if config.draft else [])
        try:
            on_gpu = info["backend"] != "CPU" and config.target_options.n_gpu_layers != 0
            shares = estimated_shares(estimate_files(paths, n_ctx=pair.target.n_ctx), on_gpu=on_gpu)
        except (GGUFError, OSError):
            shares = ()
        if cancel.cancelled:
            self.unload()
            return
        self.pairLoaded.emit(PairInfo(
            target=pair.target.path.name, draft=pair.draft.path.name if pair.draft else None,
            backend=info["backend"], n_ctx=pair.target.n_ctx,
            supports_reasoning_switch=pair.chat_format.supports_reasoning_switch,
            speculation_blocked=pair.speculation_blocked,
            verify_ms={n: v * 1e3 for n, v in pair.costs.verify_s.items()},
            draft_ms=pair.costs.draft_s["model"] * 1e3 if "model" in pair.costs.draft_s else None,
            target_bytes=pair.target.size_bytes, draft_bytes=pair.draft.size_bytes if pair.draft else 0,
            memory_shares=shares,
        ))

    def _connect(self, config: RemoteConfig, cancel: CancelToken) -> None:
        try:
            server = self._server_factory(config)
        except UserError as exc:
            self.pairFailed.emit(str(exc))
            return
        except Exception as exc:  # a bug: the traceback to the terminal, one line to the chat
            traceback.print_exception(exc)
            self.pairFailed.emit(f"could not connect to {config.label}: {one_line(str(exc)) or type(exc).__name__}")
            return
        if cancel.cancelled:
            server.close()
            return
        self._server = server
        self.pairLoaded.emit(PairInfo.of_server(config, server.caps))

    @Slot()
    def unload(self) -> None:
        if self._pair is not None:
            self._pair.close()
            self._pair = None
        if self._server is not None:
            self._server.close()
            self._server = None

    @Slot(object, object)
    def generate(self, request: GenerationRequest, cancel: CancelToken) -> None:
        rid = request.request_id
        if self._server is not None:
            self._answer_from_server(self._server, request, cancel)
            return
        if self._pair is None:
            self._fail(rid, "no model is loaded: pick a model pair first")
            return
        try:
            prompt = self._pair.chat_prompt(list(request.messages), reasoning=request.reasoning, cancel=cancel)
        except TemplateCancelled:  # stopped (or the app closing) while the template rendered
            self.engineEvent.emit(rid, Done(StopReason.CANCELLED, GenerationStats.empty()))
            return
        except UserError as exc:  # the template failed: one line naming the model, the pair stays usable
            self._fail(rid, str(exc))
            return
        except Exception as exc:
            self._fail_unexpectedly(rid, exc)
            return
        try:
            self.engineEvent.emit(rid, Started(len(prompt.tokens), prompt.starts_in_reasoning))
            phases = PhaseTagger(prompt.starts_in_reasoning)
            for ev in self._pair.generate(prompt.tokens, mode=request.mode, sampling=request.sampling,
                                          max_tokens=request.max_tokens, stop=request.stop, cancel=cancel):
                self.engineEvent.emit(rid, phases.tag(ev))
        except Exception as exc:  # every worker exception becomes an error event
            self._fail_unexpectedly(rid, exc)

    def _answer_from_server(self, server: RemoteBackend, request: GenerationRequest, cancel: CancelToken) -> None:
        rid = request.request_id
        chat = ChatRequest(messages=request.messages, sampling=request.sampling, max_tokens=request.max_tokens,
                           reasoning=request.reasoning, stop=request.stop)
        try:
            self.engineEvent.emit(rid, Started(0, False))
            phases = PhaseTagger()  # a server's reasoning arrives inside <think> tags too (remote.chat)
            structured = request.sampling.structured.kind
            for ev in server.answer(chat, cancel):
                if isinstance(ev, Done) and structured:  # the server was held to the chat's schema or grammar
                    ev = replace(ev, stats=replace(ev.stats, structured=structured))
                self.engineEvent.emit(rid, phases.tag(ev))
        except Exception as exc:  # every worker exception becomes an error event
            self._fail_unexpectedly(rid, exc)

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
    pairFailed = Signal(str)
    engineEvent = Signal(int, object)
    # private: requests into the worker thread
    _load = Signal(object, object)
    _generate = Signal(object, object)
    _unload = Signal()

    def __init__(self, pair_factory: Callable[[PairConfig, CancelToken], SpeculativePair] = load_pair,
                 parent: QObject | None = None, *, nice: int = 0,
                 server_factory: Callable[[RemoteConfig], RemoteBackend] = RemoteBackend.connect) -> None:
        """``nice``: how far decoding yields the CPU to the window (the ``decode_nice`` setting);
        ``server_factory`` connects a chat's server backend (tests give their own)."""
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._cancel: CancelToken | None = None
        self._load_cancel = CancelToken()
        self.current_request = 0
        self._thread = QThread()
        self._thread.setObjectName("specchat-generation")
        self._worker = GenerationWorker(pair_factory, nice, server_factory)
        self._worker.moveToThread(self._thread)
        self._thread.finished.connect(self._worker.deleteLater)  # deleted in its own thread
        self._load.connect(self._worker.load)
        self._generate.connect(self._worker.generate)
        self._unload.connect(self._worker.unload)
        self._worker.pairLoaded.connect(self.pairLoaded)
        self._worker.pairFailed.connect(self.pairFailed)
        self._worker.engineEvent.connect(self._on_event)
        self._thread.started.connect(self._worker.lower_priority)  # runs in the new thread, before any work
        start_thread(self._thread, QThread.Priority.LowPriority)

    def load(self, config: PairConfig | RemoteConfig) -> None:
        """Load a pair (or connect to a server), giving up any load still running: only the newest one reports."""
        self.cancel()
        self._load_cancel.cancel()
        self._load_cancel = CancelToken()
        self._load.emit(config, self._load_cancel)

    def submit(self, **request) -> int:
        """Start a generation (cancelling any running one); returns its request id."""
        self.cancel()
        rid = next(self._ids)
        self.current_request = rid
        self._cancel = CancelToken()
        self._generate.emit(GenerationRequest(request_id=rid, **request), self._cancel)
        return rid

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()

    def _on_event(self, rid: int, ev: object) -> None:
        if rid == self.current_request:  # results of an abandoned request never reach the screen
            self.engineEvent.emit(rid, ev)

    def shutdown(self, patience_ms: int = 10_000) -> None:
        """Stop the running answer or load, free the models in their thread, and end the thread."""
        self.cancel()
        self._load_cancel.cancel()
        self.current_request = 0
        self._unload.emit()
        end_thread(self._thread, patience_ms)
