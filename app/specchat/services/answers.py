"""Every answer's life, from request to Done, whether or not its chat is on screen.

A :class:`LiveAnswer` is one answer: its chat, its request id, its message in the store
and the writer that fills it, and the text so far (split into answer and reasoning by
the backend's event stream: this only appends).  The
:class:`AnswerService` owns all of them.  It is not a widget and holds no widget: views
find an answer by its chat id and repaint when ``changed(chat_id)`` says so, so closing
or switching a chat view can neither stop an answer nor leave it painting into a
deleted widget.

One pair generates at a time (one generation thread owns the models).  An answer asked
for while another streams waits in line, in order, and starts when the one before it is
done; if its chat uses another pair, that pair is loaded first.  Nothing is stored for a
waiting answer until it starts, so stopping it (or closing the app) leaves the chat as it
was.

An :class:`ExternalAnswer` (a request of the window's OpenAI-compatible API, handed over by
:mod:`specchat.services.api`) waits in the same line.  At its turn it is answered by whatever
backend is loaded (a load under way is waited for; none is a 503), its events go to its
``deliver`` and to the telemetry recorder (marked :data:`API_CHAT`), and nothing of it is
stored in the chats.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from specchat.attachments import chat_messages_with_ids
from specchat.backends.factory import BackendConfig
from specchat.backends.server_auto import OFF_MODE, ON_MODE, samples_of
from specchat.context_policy import ContextPolicy
from specchat.engine import (
    ControllerSettings,
    Done,
    Error,
    Fallback,
    Mode,
    RoundStats,
    TokenOrigin,
    TokensEmitted,
)
from specchat.engine.answer import AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.engine.events import GenerationStats, StopReason
from specchat.engine.progress import LoadProgress
from specchat.metrics import Counts
from specchat.serve.lane import Deliver, Failed
from specchat.store import AnswerWriter, ChatSettings, Message, MessageStats, Store, StoreWriteError
from specchat.store.task_stats import mode_runs, pair_plain_runs
from specchat.telemetry import TelemetryRecorder
from specchat.workers.generation import GenerationService, PairInfo, Started

log = logging.getLogger(__name__)
FLUSH_MS = 250  # the store commits at most twice a second; polling at 4 Hz keeps slow answers saved too
RETRY_MS = 2000  # an answer the database refused (disk full) is tried again this often
API_CHAT = "api"  # the telemetry recorder's chat id of the API's answers (a chat's id is an int)
NO_MODEL = "no model is loaded: load a pair in SpecChat first"
CLOSING = "SpecChat is closing"


class Phase(StrEnum):
    WAITING = "waiting"  # in line behind another answer
    LOADING = "loading"  # its pair is loading
    STREAMING = "streaming"


@dataclass(frozen=True, slots=True)
class AnswerNotice:
    """Something the user should read about an answer (a fallback, an error), with its chat."""

    chat_id: int
    text: str
    error: bool = False
    warning: bool = False  # the fallback-share warning
    permanent: bool = False
    # the chat's prompt outgrew the context under "Stop at the limit": the remedy is its setting
    # "Past the context" (the chat pane offers it in place)
    past_context: bool = False


def fallback_warning(counts: Counts, limit: float) -> str:
    """The fallback-share warning of an answer whose rounds so far are ``counts``."""
    return (f"plain decoding took over on {counts.fallback_share or 0.0:.0%} of this answer's "
            f"{counts.rounds} rounds (warning above {limit:.0%}): try a shorter draft, another "
            "draft model, or turn speculation off for this chat")


class LiveAnswer:
    """One answer in progress.  Read by views; changed only by the AnswerService."""

    def __init__(self, chat_id: int, settings: ChatSettings) -> None:
        self.chat_id = chat_id
        self.settings = settings
        self.phase = Phase.WAITING
        self.request_id = 0
        self.message_id: int | None = None
        self.writer: AnswerWriter | None = None
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self.segments: list[tuple[str, bool]] = []  # (answer text, from an accepted draft)
        self.unsaved_stop = False  # stopped because the database refused its text (disk full)
        self.controller: ControllerSettings | None = None  # the app's controller settings when its turn came
        self.left_out = 0  # messages of the chat its context policy did not send (from the backend's Started)
        self.sent_ids: tuple[int | None, ...] = ()  # the stored id of each message of its request (None: the system prompt)
        self.left_out_span: tuple[int, int] | None = None  # the first and last stored id its policy did not send
        self.prompt_tokens = 0  # the prompt's tokens, as the backend's Started said
        self.past_context = False  # its error: the prompt outgrew the context under "Stop at the limit"
        self.counts = Counts()  # its rounds so far (the engine's RoundStats, as the telemetry panel adds them)
        self.fallback_warned = False  # the engine warned that too many of its rounds fell back

    @property
    def fallback_warning(self) -> str:
        """The fallback-share warning with the share as it is now ("" until the engine warned): the
        engine's warning quotes the share when it was crossed, which goes on changing."""
        if not self.fallback_warned:
            return ""
        return fallback_warning(self.counts, self.warning_share)

    @property
    def warning_share(self) -> float:
        """The share of fallback rounds above which the engine warns (the settings it answers with)."""
        return (self.controller or ControllerSettings()).fallback_warning_share

    @property
    def content(self) -> str:
        return "".join(self._content)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    def add(self, answer: str, thought: str, origins: tuple[TokenOrigin, ...] = ()) -> None:
        if answer:
            self._content.append(answer)
            self.segments.append((answer, bool(origins) and all(o is TokenOrigin.DRAFT for o in origins)))
        if thought:
            self._reasoning.append(thought)
        if self.writer is not None:
            self.writer.append(answer, thought, origins)


class ExternalAnswer:
    """A request from outside the chats (the API) in the line: its request, where its events go, the
    asker's cancel token (its client went away) and who asked.  Read by the AnswerService only."""

    chat_id = API_CHAT

    def __init__(self, request: AnswerRequest, deliver: Deliver, cancel: CancelToken, client: str = "") -> None:
        self.request = request
        self.deliver = deliver
        self.cancel = cancel
        self.client = client
        self.phase = Phase.WAITING
        self.request_id = 0


Job = LiveAnswer | ExternalAnswer


class AnswerService(QObject):
    """Owns every answer: a line of waiting answers and the one streaming."""

    changed = Signal(int)  # chat id: the answer's text or phase changed
    finished = Signal(int, object)  # chat id, the final stored Message (None: nothing was stored)
    queueChanged = Signal()  # which chats are generating or waiting changed
    notice = Signal(object)  # AnswerNotice
    pairLoading = Signal(str)  # what loads: the target's file name, or the server (its config's label)
    pairProgress = Signal(object)  # LoadProgress of the load under way (see load_progress)
    pairLoaded = Signal(object)  # PairInfo
    pairInfoChanged = Signal(object)  # PairInfo: the loaded pair or server as an answer left it (a restart)
    pairFailed = Signal(str)
    idle = Signal()  # the last answer in line ended: a view may preload the pair of the chat it shows

    def __init__(self, store: Store, service: GenerationService,
                 pair_config: Callable[[ChatSettings], BackendConfig],
                 recorder: TelemetryRecorder | None = None, parent: QObject | None = None) -> None:
        """``pair_config`` turns a chat's settings into the pair to load, or the server to connect to;
        it raises ValueError (one line) when it cannot, e.g. a model file that is gone."""
        super().__init__(parent)
        self.store = store
        self.service = service
        self.recorder = recorder
        self._pair_config = pair_config
        self._queue: deque[Job] = deque()
        self._current: Job | None = None
        self._loaded: BackendConfig | None = None
        self._loading: BackendConfig | None = None
        self._held: tuple[Path, ...] = ()  # a pair the last run died in: loaded only when an answer asks
        self.pair_info: PairInfo | None = None
        self.load_progress: LoadProgress | None = None  # the load under way's last step (None: none told yet)
        self._closed = False
        service.engineEvent.connect(self._on_event)
        service.pairLoaded.connect(self._on_pair_loaded)
        service.pairInfoChanged.connect(self._on_pair_info)
        service.pairFailed.connect(self._on_pair_failed)
        service.loadProgress.connect(self._on_load_progress)
        self._flush = QTimer(self, interval=FLUSH_MS)
        self._flush.timeout.connect(self._poll_writer)
        # answers the database refused to finish (disk full...): shown as stopped, saved when it takes them
        self._unsaved: list[tuple[AnswerWriter, str, MessageStats | None]] = []
        self._retry = QTimer(self, interval=RETRY_MS)
        self._retry.timeout.connect(self._save_unsaved)

    # -- what views ask ---------------------------------------------------------------

    def answer(self, chat_id: int) -> LiveAnswer | None:
        """The chat's answer in progress (waiting, loading or streaming), if any."""
        if isinstance(self._current, LiveAnswer) and self._current.chat_id == chat_id:
            return self._current
        return next((a for a in self._queue if isinstance(a, LiveAnswer) and a.chat_id == chat_id), None)

    def busy_chats(self) -> dict[int, Phase]:
        out = {a.chat_id: Phase.WAITING for a in self._queue if isinstance(a, LiveAnswer)}
        if isinstance(self._current, LiveAnswer):
            out[self._current.chat_id] = self._current.phase
        return out

    @property
    def current(self) -> LiveAnswer | None:
        """The chat answer at the head of the line (None while an API request has its turn)."""
        return self._current if isinstance(self._current, LiveAnswer) else None

    @property
    def external(self) -> ExternalAnswer | None:
        """The API request at the head of the line (waiting for a load, or answering), if one is."""
        return self._current if isinstance(self._current, ExternalAnswer) else None

    @property
    def external_waiting(self) -> int:
        """API requests in line behind the head."""
        return sum(1 for a in self._queue if isinstance(a, ExternalAnswer))

    @property
    def loaded_pair(self) -> BackendConfig | None:
        return self._loaded

    @property
    def loading(self) -> str | None:
        """What is loading now (the label ``pairLoading`` named), or None."""
        return self._loading.label if self._loading is not None else None

    # -- requests ---------------------------------------------------------------------

    def ask(self, chat_id: int) -> LiveAnswer:
        """Answer the chat's conversation as it stands (in line if another answer streams)."""
        live = self.answer(chat_id)
        if live is not None:
            return live
        live = LiveAnswer(chat_id, self.store.get_chat(chat_id).settings)
        self._queue.append(live)
        self.queueChanged.emit()
        self._pump()
        return live

    def ask_external(self, job: ExternalAnswer) -> None:
        """Put an API request in line after the answers already asked (see :class:`ExternalAnswer`)."""
        if self._closed:
            _deliver(job, Failed(CLOSING, 503))
            return
        self._queue.append(job)
        self.queueChanged.emit()
        self._pump()

    def stop(self, chat_id: int) -> None:
        """Stop the chat's answer: a streaming one keeps its text, a waiting one is dropped."""
        live = self.answer(chat_id)
        if live is None:
            return
        if live is self._current and live.phase is Phase.STREAMING:
            self.service.cancel()  # Done (cancelled) follows within a round
            return
        if live is self._current:  # its pair is still loading: nothing stored yet
            self._current = None
        else:
            self._queue.remove(live)
        self.finished.emit(chat_id, None)
        self.queueChanged.emit()
        self._pump()

    def preload(self, settings: ChatSettings) -> None:
        """Load the pair a chat uses, so its first answer starts at once (only while idle; never the
        pair held back by :meth:`hold_back`)."""
        if self._current is not None or self._queue or (settings.target is None and not settings.backend) \
                or self._closed:
            return
        try:
            config = self._pair_config(settings)
        except ValueError as exc:
            self.pairFailed.emit(str(exc))
            return
        if self._held and config.native_files == self._held:
            return
        self._load(config)

    def hold_back(self, files: tuple[Path, ...]) -> None:
        """Never preload the pair of these model files (the last run crashed in it): it loads when an
        answer asks for it, the user's own choice."""
        self._held = tuple(files)

    def reload(self, settings: ChatSettings | None) -> None:
        """The app settings changed: the pair is loaded again with them (now if idle)."""
        self._loaded = None
        if settings is not None:
            self.preload(settings)

    def shutdown(self) -> None:
        """Closing: the streaming answer is kept as "stopped" with its text; waiting ones are dropped (an API
        request is told that SpecChat is closing)."""
        self._closed = True
        waiting = [job for job in self._queue if isinstance(job, ExternalAnswer)]
        self._queue.clear()
        live, self._current = self._current, None
        self._flush.stop()
        if isinstance(live, ExternalAnswer):
            self.service.cancel()
            if self.recorder is not None and live.request_id:
                self.recorder.abandon(live.request_id)
            waiting.insert(0, live)
        elif live is not None:
            self.service.cancel()
            if live.writer is not None and not live.writer.finished:
                self._unsaved.append((live.writer, "stopped", None))
            if self.recorder is not None and live.request_id:
                self.recorder.abandon(live.request_id)
        self._save_unsaved()  # what the database still refuses stays "streaming": the next start keeps it as stopped
        self._retry.stop()
        for job in waiting:
            _deliver(job, Failed(CLOSING, 503))

    # -- the line -----------------------------------------------------------------------

    def _load(self, config: BackendConfig) -> None:
        if _same(config, self._loaded) or _same(config, self._loading):
            return
        self._loading = config
        self.pair_info = None
        self.load_progress = None
        self.pairLoading.emit(config.label)
        self.service.load(config)

    def _pump(self) -> None:
        """Start the next answer if none is running; say so when none is left."""
        self._start_next()
        if self._current is None and not self._queue and not self._closed:
            self.idle.emit()

    def _start_next(self) -> None:
        while self._current is None and self._queue and not self._closed:
            live = self._queue.popleft()
            self._current = live
            if isinstance(live, ExternalAnswer):
                self._start_external(live)
                continue
            try:
                config = self._pair_config(live.settings)
            except ValueError as exc:
                self._fail(live, str(exc))
                continue
            live.controller = config.controller
            if config.native_files == self._held:
                self._held = ()  # asked for: the user chose to load it again
            if _same(config, self._loaded) and self.pair_info is not None:
                self._start(live)
            else:
                live.phase = Phase.LOADING
                self._load(config)
                self.changed.emit(live.chat_id)
                self.queueChanged.emit()

    def _start(self, live: LiveAnswer) -> None:
        s = live.settings
        info = self.pair_info
        history = self._history(live.chat_id, s)
        live.sent_ids = tuple(i for i, _m in history)
        messages = tuple(m for _i, m in history)
        try:
            message = self.store.start_answer(live.chat_id)
        except (KeyError, StoreWriteError) as exc:  # the chat was deleted while it waited, or the disk is full
            self._current = None
            if isinstance(exc, StoreWriteError):
                self.notice.emit(AnswerNotice(live.chat_id, f"{exc}: nothing was asked", error=True))
            self.finished.emit(live.chat_id, None)
            self.queueChanged.emit()
            self._pump()
            return
        live.message_id = message.id
        live.writer = self.store.answer_writer(message)
        live.phase = Phase.STREAMING
        mode = Mode(s.speculation)
        live.request_id = self.service.submit(
            messages=messages, mode=mode,
            sampling=s.sampling,  # its sampling and its schema or grammar
            max_tokens=s.max_tokens,
            controller=live.controller,  # the app's thresholds as they are now: a change needs no reload
            reasoning=s.reasoning if info is not None and info.supports_reasoning_switch else None,
            context_policy=ContextPolicy(s.context_policy),  # the whole chat goes; the backend cuts what must go
            task=s.task,
            # auto on a managed llama-server decides from this task's stored answers there (server_auto.py)
            measured=self._measured(s) if mode is Mode.AUTO else (),
        )
        if self.recorder is not None:
            self.recorder.begin(live.request_id, live.chat_id, mode=mode.value)
        self._flush.start()
        self.changed.emit(live.chat_id)
        self.queueChanged.emit()

    def _start_external(self, job: ExternalAnswer) -> None:
        """An API request's turn: on the backend loaded (after the load under way), stored nowhere."""
        if job.cancel.cancelled:  # its client went away while it waited
            self._end_external(job, Done(StopReason.CANCELLED, GenerationStats.empty(job.request.mode)))
        elif self._loading is not None:
            job.phase = Phase.LOADING  # _on_pair_loaded or _on_pair_failed goes on
            self.queueChanged.emit()
        elif self.pair_info is None:
            self._end_external(job, Failed(NO_MODEL, 503))
        else:
            self._submit_external(job)

    def _submit_external(self, job: ExternalAnswer) -> None:
        r = job.request
        if r.reasoning is not None and self.pair_info is not None and not self.pair_info.supports_reasoning_switch:
            r = replace(r, reasoning=None)  # as a chat's: the switch goes only to a template that has it
        job.phase = Phase.STREAMING
        job.request_id = self.service.submit(linked=job.cancel, **{f.name: getattr(r, f.name) for f in fields(r)})
        if self.recorder is not None:
            self.recorder.begin(job.request_id, API_CHAT, mode=r.mode.value)
        self.queueChanged.emit()

    def _end_external(self, job: ExternalAnswer, last: Done | Failed) -> None:
        """The request's last event told; the next in line starts (the caller pumps when it loops)."""
        if self._current is job:
            self._current = None
        _deliver(job, last)
        self.queueChanged.emit()

    def _history(self, chat_id: int, s: ChatSettings) -> tuple[tuple[int | None, dict[str, str]], ...]:
        """The whole chat, each question with its files in its text, with its stored id: the backend's
        context policy counts them and the lookup drafter drafts from them (specchat.attachments.chat_messages);
        the ids say which messages the policy left out (the transcript's marks)."""
        return chat_messages_with_ids(self.store, chat_id, s.system_prompt)

    def _measured(self, s: ChatSettings) -> tuple[tuple[bool, Counts], ...]:
        """This chat's task's stored answers on its pair's managed llama-server, with speculation on and off."""
        if s.target is None:
            return ()
        return samples_of(mode_runs(self.store, s.task, s.target, s.draft, (ON_MODE, OFF_MODE)))

    def _fail(self, live: LiveAnswer, message: str) -> None:
        """The answer cannot start (its pair failed to load): stored as an error that says why."""
        self._current = None
        stored: Message | None = None
        try:
            writer = self.store.answer_writer(self.store.start_answer(live.chat_id))
            stored = writer.finish("error", MessageStats.from_generation(
                GenerationStats.empty(live.settings.speculation), "error", error=message))
        except (KeyError, StoreWriteError):
            pass  # the chat is gone, or the disk is full: the line below still says why
        self.notice.emit(AnswerNotice(live.chat_id, message, error=True))
        self.finished.emit(live.chat_id, stored)
        self.queueChanged.emit()

    # -- from the generation thread ------------------------------------------------------

    def _on_load_progress(self, step: LoadProgress) -> None:
        if self._loading is None:
            return
        self.load_progress = step
        self.pairProgress.emit(step)
        live = self._current
        if isinstance(live, LiveAnswer) and live.phase is Phase.LOADING:
            self.changed.emit(live.chat_id)  # its footer says how far the load it waits for is

    def _on_pair_info(self, info: PairInfo) -> None:
        if self._closed or self.pair_info is None:  # no pair said loaded: a load's own word comes with it
            return
        self.pair_info = info
        self.pairInfoChanged.emit(info)

    def _on_pair_loaded(self, info: PairInfo) -> None:
        if self._closed:  # a load that ended as the app closed: its store is gone, nothing waits for it
            return
        self._loaded, self._loading = self._loading, None
        self.load_progress = None
        self.pair_info = info
        if self.recorder is not None:
            # the reference line comes from this pair's plain answers (learned by the recorder);
            # the load-time calibration is a best case and would flatter it
            # the pair's stored plain runs count as learned here: a reload keeps its count (issue 38)
            target = getattr(self._loaded, "target", None)  # a local pair's (a server's plain runs are not ours)
            self.recorder.reset_plain_rate(None if target is None else pair_plain_runs(
                self.store, target, getattr(self._loaded, "draft", None), self.store.now()))
        self.pairLoaded.emit(info)
        live = self._current
        if isinstance(live, ExternalAnswer) and live.phase is Phase.LOADING:
            if live.cancel.cancelled:
                self._end_external(live, Done(StopReason.CANCELLED, GenerationStats.empty(live.request.mode)))
                self._pump()
            else:
                self._submit_external(live)
        elif isinstance(live, LiveAnswer) and live.phase is Phase.LOADING:
            self._start(live)

    def _on_pair_failed(self, message: str) -> None:
        if self._closed:
            return
        self._loaded = self._loading = None
        self.load_progress = None
        self.pair_info = None
        self.pairFailed.emit(message)
        live = self._current
        if isinstance(live, ExternalAnswer) and live.phase is Phase.LOADING:
            self._end_external(live, Failed(f"the pair did not load: {message}", 503))
            self._pump()
        elif isinstance(live, LiveAnswer) and live.phase is Phase.LOADING:
            self._fail(live, message)
            self._pump()

    def _on_event(self, rid: int, ev: object) -> None:
        live = self._current
        if live is None or rid != live.request_id:
            return  # a stopped or abandoned request: stale results never reach the screen
        if isinstance(live, ExternalAnswer):
            self._on_external_event(live, ev)
            return
        if self.recorder is not None:
            self.recorder.feed(rid, live.chat_id, ev)
        if isinstance(ev, Started):
            live.left_out = ev.left_out
            live.prompt_tokens = ev.prompt_tokens
            # the backend's own fit: the messages it left out are request[left_out_at : left_out_at + left_out]
            ids = [i for i in live.sent_ids[ev.left_out_at:ev.left_out_at + ev.left_out] if i is not None]
            live.left_out_span = (ids[0], ids[-1]) if ev.left_out and ids else None
        elif isinstance(ev, TokensEmitted):
            live.add(ev.answer, ev.reasoning, ev.origins)
            self.changed.emit(live.chat_id)
            self._stop_if_unsaved(live)
        elif isinstance(ev, RoundStats):
            live.counts = live.counts + ev.counts
        elif isinstance(ev, Fallback):
            live.fallback_warned = live.fallback_warned or ev.warning
            self.notice.emit(AnswerNotice(live.chat_id, ev.reason, warning=ev.warning, permanent=ev.permanent))
        elif isinstance(ev, Error):
            n_ctx = self.pair_info.n_ctx if self.pair_info is not None else 0
            past = (ContextPolicy(live.settings.context_policy) is ContextPolicy.STOP and n_ctx > 0
                    and live.prompt_tokens + 1 > n_ctx)  # the backend's own test of a prompt that cannot fit
            live.past_context = live.past_context or past
            self.notice.emit(AnswerNotice(live.chat_id, ev.message, error=True, past_context=past))
        elif isinstance(ev, Done):
            self._finish(live, ev)

    def _on_external_event(self, job: ExternalAnswer, ev: object) -> None:
        if self.recorder is not None:
            self.recorder.feed(job.request_id, API_CHAT, ev)  # the panel plots the API's answers live
        if isinstance(ev, Done):
            self._end_external(job, ev)
            self._pump()
        else:
            _deliver(job, ev)  # the backend's events: Started and the engine's

    def _finish(self, live: LiveAnswer, done: Done) -> None:
        self._current = None
        self._flush.stop()
        state = {"cancelled": "stopped", "error": "error"}.get(done.stop_reason.value, "done")
        stats = MessageStats.from_generation(done.stats, done.stop_reason.value,
                                             error=done.message if state == "error" else "")
        # the context it ran in and what its policy left out: the footer's "context N / n_ctx"
        stats = replace(stats, n_ctx=self.pair_info.n_ctx if self.pair_info is not None else 0,
                        left_out=live.left_out, left_out_span=live.left_out_span,
                        past_context=live.past_context and state == "error")
        if self.recorder is not None and self.recorder.machine is not None:
            # the verdict the recorder just gave this answer (it heard the Done first): the task table
            # leaves a run measured on a busy machine out of its multipliers
            stats = replace(stats, busy=bool(self.recorder.busy), busy_why=self.recorder.busy)
        stored = self._store_final(live, state, stats)
        self.finished.emit(live.chat_id, stored)
        self.queueChanged.emit()
        self._pump()

    def _poll_writer(self) -> None:
        live = self._current
        if isinstance(live, LiveAnswer) and live.writer is not None:
            live.writer.poll()
            self._stop_if_unsaved(live)

    # -- when the database refuses a write (disk full, read-only, locked) ------------------

    def _stop_if_unsaved(self, live: LiveAnswer) -> None:
        """A commit was refused: the answer stops at what is shown (and is stored as stopped), with
        one line saying why, rather than going on with text that cannot be kept."""
        writer = live.writer
        if writer is None or writer.write_error is None or live.unsaved_stop:
            return
        live.unsaved_stop = True
        self.notice.emit(AnswerNotice(live.chat_id, f"{writer.write_error}: the answer stopped at what is shown",
                                      error=True))
        self.service.cancel()  # Done (cancelled) follows within a round: stored as "stopped"

    def _store_final(self, live: LiveAnswer, state: str, stats: MessageStats) -> Message | None:
        """Finish the stored message; if the database refuses, the answer stays on screen as it ends
        (a message not yet stored) and is saved by the retry timer, or kept as stopped at the next start."""
        if live.writer is None:
            return None
        try:
            return live.writer.finish(state, stats)
        except StoreWriteError as exc:
            self._unsaved.append((live.writer, state, stats))
            self._retry.start()
            if not live.unsaved_stop:
                self.notice.emit(AnswerNotice(live.chat_id, f"{exc}: the answer is kept on screen and saved as "
                                              "soon as the database takes it", error=True))
            return Message(id=live.message_id or 0, chat_id=live.chat_id, role="assistant", content=live.content,
                           reasoning=live.reasoning, created_at=0.0, state=state, stats=stats)

    def _save_unsaved(self) -> None:
        still = []
        for writer, state, stats in self._unsaved:
            try:
                writer.finish(state, stats)
            except StoreWriteError:
                still.append((writer, state, stats))
        self._unsaved = still
        if not still:
            self._retry.stop()


def _deliver(job: ExternalAnswer, ev: object) -> None:
    """Hand an event to the API's side; a failure there is a bug of its own, never the line's: the request
    is given up (its token cancelled) and the line goes on."""
    try:
        job.deliver(ev)  # type: ignore[arg-type]
    except Exception:
        log.exception("an API request's delivery failed")
        job.cancel.cancel()


def _same(config: BackendConfig, other: BackendConfig | None) -> bool:
    """Do the two open the same backend (a pair's controller thresholds travel with each answer)?"""
    return other is not None and config.opens == other.opens
