"""Turns the engine's event stream into plot series and running numbers for the telemetry panel.

The recorder is fed the engine's frozen events one at a time, in the GUI thread, as the
worker's signals deliver them (``feed``).  It keeps:

- per-round series in ring buffers (the last few minutes), which the panel's timer
  reads through :meth:`TelemetryRecorder.snapshot` 10 to 30 times a second, never per
  token;
- every round since the app started as a :class:`~.records.RoundRecord`, for export;
- one :class:`~.records.AnswerRecord` per answer, and running numbers for the current
  answer and since start, with docs/ARCHITECTURE.md's metric definitions
  (:data:`~.records.METRIC_DEFINITIONS`).

While an answer streams, its decode time is the sum of its rounds' wall times
(draft + verify + overhead, as the engine measured them), so a busy GUI thread does not
make the model look slower.  When ``Done`` arrives, the engine's own totals
(:class:`~specchat.engine.events.GenerationStats`) replace the live estimate.

Event order per round, as the engine yields it: the round's ``TokensEmitted`` chunks,
then its ``RoundStats``, then any ``Fallback`` that round caused.  Fallbacks yielded
before the first round (speculation off for the whole answer) are attached to the
answer's first round.

**Honest figures** (issue 38): with a ``machine`` watch (:mod:`specchat.engine.contention`), each
answer is judged from its first event to its ``Done``.  A plain answer stopped early (cancelled)
or measured while the machine was busy teaches no plain rate, and while the newest judged answer
ran on a busy machine the snapshot says so (``busy``) and no "x vs plain" is claimed.  The plain
runs counted are the pair's stored ones (``reset_plain_rate(stored)`` at each load: the store's
task runs, which outlive a reload) plus the ones learned since.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from specchat.engine.contention import CpuReading, MachineWatch
from specchat.engine.events import (
    Done,
    Error,
    Fallback,
    GenerationStats,
    Prefilled,
    RoundStats,
    StopReason,
    TokensEmitted,
)
from specchat.engine.settings import ControllerSettings
from specchat.metrics import MIN_PLAIN_RUNS, Counts, PhaseSplit
from specchat.store import PLAIN_MODE, PlainReference, normalize_mode

from .records import (
    MEMORY_COLUMNS,
    ROUND_COLUMNS,
    AnswerRecord,
    ChatId,
    FallbackMarker,
    MemorySeries,
    RoundRecord,
    RoundSeries,
    RunningNumbers,
    Tally,
    TelemetrySnapshot,
)
from .ring import RingBuffer
from .samplers import MemorySample

_ENGINE_EVENTS = (RoundStats, TokensEmitted, Fallback, Prefilled, Error, Done)
ALL_CHATS: Any = object()  # the "every chat" filter of rounds(), answers(), totals() and export

# -- one answer in progress -------------------------------------------------------------------------


@dataclass(slots=True)
class _Answer:
    request_id: Hashable
    chat_id: ChatId
    mode: str | None
    started: float
    tokens: int = 0  # from TokensEmitted (visible tokens, the first one included)
    rounds: Counts = Counts()  # the rounds' counts, live
    last_k: int | None = None
    ema_tokens: float = 0.0
    ema_wall: float = 0.0
    in_fallback: bool = False  # a temporary fallback was declared and no round has drafted since
    pending: list[FallbackMarker] = field(default_factory=list)  # notes before the first round
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefill_s: float = 0.0
    error: str = ""
    done: Done | None = None
    mark: CpuReading | None = None  # the machine's counters at its first event (a busy machine is judged)
    phases: PhaseSplit = PhaseSplit()  # live, from the rounds' phases; the engine's once done

    def speculative(self) -> bool:
        """Plain or speculative, for the multiplier: the mode when known, else whether it drafted."""
        if self.mode is not None:
            return normalize_mode(self.mode) != PLAIN_MODE
        return self.rounds.drafted > 0

    def counts(self) -> Counts:
        """This answer's counts: the engine's exact totals once done, the live ones before.

        While it streams, its decode time is the sum of its rounds' wall times.
        """
        if self.done is not None:
            return self.done.stats.counts
        return self.rounds + Counts.of_answer(self.tokens, self.rounds.rounds_s, prompt_tokens=self.prompt_tokens,
                                              reused_tokens=self.reused_tokens, prefill_s=self.prefill_s)

    def tally(self) -> Tally:
        counts = self.counts()
        # the multiplier compares decode rates: only the decode part of a speculative answer counts
        speculative = Counts(decoded=counts.decoded, decode_s=counts.decode_s) if self.speculative() else Counts()
        phases = self.done.stats.phases if self.done is not None else self.phases
        return Tally(1, counts, speculative, phases)


# -- the recorder -----------------------------------------------------------------------------------


class TelemetryRecorder:
    """Aggregates engine events into series and numbers; one per app, lives in the GUI thread.

    The rolling acceptance window spans answers and drafters: it shows what the last N
    drafted rounds did, which is what the guard rails judge (the controller keeps one
    window per drafter and empties it after a cooldown, so the two can differ for a few
    rounds after a fallback or a drafter switch).

    ``settings`` supplies the guard-rail thresholds and the acceptance window (the same
    ones the controller uses, so the rolling curves and the threshold lines mean what
    the controller sees); ``keep_seconds`` and ``capacity`` bound the plot history,
    whichever is reached first.  ``clock`` is wall-clock time, used when ``now`` is not
    given.  Not thread-safe: feed it from one thread.
    """

    def __init__(self, *, settings: ControllerSettings | None = None, keep_seconds: float = 300.0,
                 capacity: int = 16384, memory_capacity: int = 4096, smoothing: float = 0.2,
                 clock: Callable[[], float] = time.time, machine: MachineWatch | None = None) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self.settings = settings or ControllerSettings()
        self.keep_seconds = float(keep_seconds)
        self.smoothing = smoothing
        self._clock = clock
        self._series = RingBuffer(capacity, ROUND_COLUMNS)
        self._memory_capacity = memory_capacity
        self._memory: RingBuffer | None = None  # made at the first sample, with one column per GPU
        self._gpu_names: tuple[str, ...] = ()
        self._vram_total: tuple[int, ...] = ()
        self._latest_memory: MemorySample | None = None
        self._markers: deque[FallbackMarker] = deque()
        self._window: deque[Counts] = deque(maxlen=self.settings.window_rounds)  # rounds with a draft
        self._records: list[RoundRecord] = []
        self._answers: list[AnswerRecord] = []
        self._finished = Tally()  # totals of every answer in _answers
        self._open: dict[Hashable, _Answer] = {}
        self._closed: set[Hashable] = set()  # request ids whose Done has been seen
        self._closed_answers: list[_Answer] = []  # for per-chat totals
        self._current: _Answer | None = None  # the newest answer, open or finished
        self._seq = 0
        self._last_t = -math.inf
        self._plain_set: float | None = None
        self._plain = Counts()  # learned from plain answers
        self._plain_answers = 0  # how many: a rate from fewer than MIN_PLAIN_RUNS is noise, not a reference
        self.machine = machine  # judges each answer's timings (None: never busy)
        self._busy = ""  # why the newest judged answer's figures cannot be believed ("" when they can)
        self._version = 0
        self._cached: TelemetrySnapshot | None = None

    # -- the plain-decoding reference ----------------------------------------------------------------

    def set_plain_rate(self, tok_s: float | None) -> None:
        """The plain decode tok/s of this pair, measured elsewhere (bench, calibration); None clears it.

        A rate set here wins over the one learned from plain answers: whoever sets it
        measured it on purpose.
        """
        self._plain_set = tok_s if tok_s and tok_s > 0 else None
        self._touch()

    def reset_plain_rate(self, stored: PlainReference | None = None) -> None:
        """Forget both the set and the learned rate: call it when another pair is loaded, with that
        pair's ``stored`` plain runs (``store.pair_plain_runs``): they count as if learned here, so a
        reload keeps the count and "x vs plain" shows as soon as the runs allow it."""
        self._plain_set = None
        self._plain = stored.counts if stored is not None else Counts()
        self._plain_answers = stored.runs if stored is not None else 0
        self._touch()

    def set_settings(self, settings: ControllerSettings) -> None:
        """New guard-rail thresholds (the app settings changed): the next snapshot draws them.

        The rounds already recorded stay; a different acceptance window keeps its newest rounds.
        """
        if settings == self.settings:
            return
        self.settings = settings
        if self._window.maxlen != settings.window_rounds:
            self._window = deque(self._window, maxlen=settings.window_rounds)
        self._touch()

    @property
    def plain_rate(self) -> float | None:
        if self._plain_set is not None:
            return self._plain_set
        return self._plain.decode_tok_s if self._plain_answers >= MIN_PLAIN_RUNS else None

    @property
    def busy(self) -> str:
        """Why the newest judged answer's figures are paused (the machine was busy); "" when they are not."""
        return self._busy

    def _claimed_rate(self) -> float | None:
        """The plain rate a multiplier may be claimed against: none while the machine is busy."""
        return None if self._busy else self.plain_rate

    @property
    def plain_rate_source(self) -> str | None:
        if self._plain_set is not None:
            return "set"
        return "baseline answers" if self.plain_rate is not None else None

    # -- feeding -------------------------------------------------------------------------------------

    def begin(self, request_id: Hashable, chat_id: ChatId = None, *, mode: str | None = None,
              now: float | None = None) -> None:
        """Announce an answer and its mode (optional: the first event of a new request id does it too).

        Knowing the mode early lets a plain ("baseline") answer count as plain
        before its Done arrives.
        """
        answer = self._answer(request_id, chat_id, self._now(now))
        if answer is not None and mode is not None:
            answer.mode = str(mode)

    def feed(self, request_id: Hashable, chat_id: ChatId, event: object, *, now: float | None = None) -> None:
        """Take one event of a request's stream; anything that is not an engine event is ignored.

        Events of a request whose Done was already seen are ignored (a late duplicate).
        """
        if not isinstance(event, _ENGINE_EVENTS):
            return
        t = self._now(now)
        answer = self._answer(request_id, chat_id, t)
        if answer is None:
            return
        if isinstance(event, RoundStats):
            self._on_round(answer, event, t)
        elif isinstance(event, TokensEmitted):
            answer.tokens += len(event.origins)  # a server answer has origins but no token ids
        elif isinstance(event, Fallback):
            self._on_fallback(answer, event, t)
        elif isinstance(event, Prefilled):
            answer.prompt_tokens += event.prompt_tokens
            answer.reused_tokens += event.reused_tokens
            answer.prefill_s += event.seconds
        elif isinstance(event, Error):
            answer.error = event.message
        elif isinstance(event, Done):
            self._on_done(answer, event, t)
        self._touch()

    def record_memory(self, sample: MemorySample) -> None:
        """Add a memory sample (the panel's timer takes one about once a second)."""
        names = tuple(g.name for g in sample.gpus)
        if self._memory is None or names != self._gpu_names:  # first sample, or the GPUs changed
            self._memory = RingBuffer(self._memory_capacity, MEMORY_COLUMNS, width={"vram_used": len(names)})
            self._gpu_names = names
        self._vram_total = tuple(g.total for g in sample.gpus)
        pv = sample.process_vram
        self._memory.append({"t": sample.t, "rss": sample.rss, "ram_available": sample.ram_available,
                             "process_vram": pv, "vram_used": [g.used for g in sample.gpus]})
        self._memory.trim_before(sample.t - self.keep_seconds)
        self._latest_memory = sample
        self._touch()

    def _now(self, now: float | None) -> float:
        """Event time, never earlier than the previous one (the ring's time column must stay sorted)."""
        t = self._clock() if now is None else float(now)
        self._last_t = max(self._last_t, t)
        return self._last_t

    def _answer(self, request_id: Hashable, chat_id: ChatId, t: float) -> _Answer | None:
        if request_id in self._closed:
            return None
        answer = self._open.get(request_id)
        if answer is None:
            answer = self._open[request_id] = _Answer(request_id, chat_id, None, t)
            answer.mark = self.machine.mark() if self.machine is not None else None
            self._current = answer
        return answer

    def _on_round(self, answer: _Answer, r: RoundStats, t: float) -> None:
        counts = r.counts
        answer.rounds += counts
        wall = r.wall_s
        if r.phase:
            answer.phases = answer.phases.add(r.phase, PhaseSplit.round_counts(counts, r.emitted, wall))
        if r.drafted:
            self._window.append(counts)
            answer.in_fallback = False
        in_fallback = r.fallback  # the engine says which plain rounds a guard rail forced
        answer.last_k = r.k

        tok_s = r.emitted / wall if wall > 0 else None
        if wall > 0:
            if answer.ema_wall == 0.0:
                answer.ema_tokens, answer.ema_wall = float(r.emitted), wall
            else:
                s = self.smoothing
                answer.ema_tokens += s * (r.emitted - answer.ema_tokens)
                answer.ema_wall += s * (wall - answer.ema_wall)
        smooth = answer.ema_tokens / answer.ema_wall if answer.ema_wall > 0 else None
        window = Counts.total(self._window)  # the last rounds that had a draft
        token_acc, seq_acc = window.token_acceptance, window.sequence_acceptance

        notes = answer.pending
        answer.pending = []
        record = RoundRecord(
            t=t, chat_id=answer.chat_id, request_id=answer.request_id, round=r.index, seq=self._seq,
            drafter=r.drafter, k=r.k, drafted=r.drafted, accepted=r.accepted, emitted=r.emitted,
            draft_s=r.draft_s, verify_s=r.verify_s, overhead_s=r.overhead_s, catch_up=r.catch_up,
            tok_s=tok_s, tok_s_smooth=smooth, token_acceptance=token_acc, sequence_acceptance=seq_acc,
            in_fallback=in_fallback, fallback=bool(notes), fallback_reason="; ".join(m.reason for m in notes),
            phase=r.phase,
        )
        self._records.append(record)
        self._series.append({
            "t": t, "seq": self._seq, "k": r.k, "drafted": r.drafted, "accepted": r.accepted,
            "emitted": r.emitted, "tok_s": tok_s, "tok_s_smooth": smooth, "token_acceptance": token_acc,
            "sequence_acceptance": seq_acc,
            "draft_s": r.draft_s, "verify_s": r.verify_s, "overhead_s": r.overhead_s,
            "fallback": float(bool(notes)), "in_fallback": float(in_fallback),
        })
        self._seq += 1
        self._trim(t)

    def _on_fallback(self, answer: _Answer, fb: Fallback, t: float) -> None:
        if not fb.permanent and not fb.warning:
            answer.in_fallback = True
        last = self._records[-1] if self._records else None
        if last is not None and not (last.request_id == answer.request_id and answer.rounds.rounds > 0):
            last = None  # the latest round is another answer's, or this answer has none yet
        marker = FallbackMarker(
            t=t, seq=last.seq if last is not None else self._seq, k=last.k if last is not None else 0,
            reason=fb.reason, permanent=fb.permanent, warning=fb.warning, chat_id=answer.chat_id,
            request_id=answer.request_id,
        )
        self._markers.append(marker)
        if last is None:  # a note before the first round: it goes on that round when it comes
            answer.pending.append(marker)
            return
        reason = f"{last.fallback_reason}; {fb.reason}" if last.fallback_reason else fb.reason
        self._records[-1] = replace(last, fallback=True, fallback_reason=reason)
        if len(self._series) and self._series.last("seq") == last.seq:
            self._series.set_last("fallback", 1.0)

    def _on_done(self, answer: _Answer, done: Done, t: float) -> None:
        answer.done = done
        answer.mode = done.stats.mode or answer.mode
        self._close(answer, t, done.stop_reason.value, done.stats)
        if self.machine is not None:
            self._busy = self.machine.judge(answer.mark).why
        stopped = done.stop_reason in (StopReason.CANCELLED, StopReason.ERROR)
        if not answer.speculative() and not stopped and not self._busy:  # its decode part teaches the plain rate
            c = done.stats.counts
            if c.decoded >= 1 and c.decode_s > 0:  # what the store counts as a run (task_stats.record_run)
                self._plain += Counts(decoded=c.decoded, decode_s=c.decode_s)
                self._plain_answers += 1

    def _close(self, answer: _Answer, t: float, stop_reason: str, stats: GenerationStats | None) -> None:
        del self._open[answer.request_id]
        self._closed.add(answer.request_id)
        self._closed_answers.append(answer)
        self._finished += answer.tally()
        self._answers.append(AnswerRecord(
            request_id=answer.request_id, chat_id=answer.chat_id, mode=answer.mode, started=answer.started,
            finished=t, stop_reason=stop_reason, stats=stats,
            prefill_tokens=max(answer.prompt_tokens - answer.reused_tokens, 0), prefill_s=answer.prefill_s,
            error=answer.error,
        ))

    def abandon(self, request_id: Hashable, *, now: float | None = None) -> None:
        """Close an answer that will never say Done (its worker died); its live counts are kept."""
        answer = self._open.get(request_id)
        if answer is not None:
            self._close(answer, self._now(now), "abandoned", None)
            self._touch()

    def _trim(self, t: float) -> None:
        cutoff = t - self.keep_seconds
        self._series.trim_before(cutoff)
        while self._markers and self._markers[0].t < cutoff:
            self._markers.popleft()

    def _touch(self) -> None:
        self._version += 1
        self._cached = None

    # -- reading -------------------------------------------------------------------------------------

    def _matches(self, chat_id: ChatId, wanted: Any) -> bool:
        return wanted is ALL_CHATS or chat_id == wanted

    def rounds(self, chat_id: Any = ALL_CHATS) -> list[RoundRecord]:
        """Every round since start, or one chat's (``chat_id``), oldest first."""
        return [r for r in self._records if self._matches(r.chat_id, chat_id)]

    def answers(self, chat_id: Any = ALL_CHATS) -> list[AnswerRecord]:
        """Finished answers since start, or one chat's, in the order they finished."""
        return [a for a in self._answers if self._matches(a.chat_id, chat_id)]

    def totals(self, chat_id: Any = ALL_CHATS) -> RunningNumbers:
        """Running numbers since start (answers streaming now included), or of one chat."""
        tally = Tally()
        if chat_id is ALL_CHATS:
            tally += self._finished
        else:
            for answer in self._closed_answers:
                if answer.chat_id == chat_id:
                    tally += answer.tally()
        for answer in self._open.values():
            if self._matches(answer.chat_id, chat_id):
                tally += answer.tally()
        mine = self._records if chat_id is ALL_CHATS else self.rounds(chat_id)
        return tally.numbers(mine[-1].k if mine else None, self._claimed_rate())

    def answer_numbers(self) -> RunningNumbers | None:
        """Running numbers of the newest answer (streaming, or the last one finished)."""
        if self._current is None:
            return None
        return self._current.tally().numbers(self._current.last_k, self._claimed_rate(), speculative_only=False)

    def snapshot(self) -> TelemetrySnapshot:
        """What the panel draws now; cached until the next event, so an idle GUI timer costs nothing."""
        if self._cached is not None:
            return self._cached
        rounds = RoundSeries(**self._series.views())
        if self._memory is not None:
            memory = MemorySeries(**self._memory.views(), vram_total=self._vram_total,
                                  gpu_names=self._gpu_names)
        else:
            memory = MemorySeries.empty()
        cur = self._current
        s = self.settings
        self._cached = TelemetrySnapshot(
            version=self._version, rounds=rounds, memory=memory, markers=tuple(self._markers),
            answer=self.answer_numbers(), answer_request_id=cur.request_id if cur else None,
            answer_chat_id=cur.chat_id if cur else None,
            answer_streaming=cur is not None and cur.request_id in self._open, total=self.totals(),
            latest_memory=self._latest_memory, plain_rate=self.plain_rate,
            plain_rate_source=self.plain_rate_source, plain_answers=self._plain_answers, busy=self._busy,
            min_token_acceptance=s.min_token_acceptance, min_sequence_acceptance=s.min_sequence_acceptance,
            window_rounds=s.window_rounds, keep_seconds=self.keep_seconds,
        )
        return self._cached

