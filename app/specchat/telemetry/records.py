"""What the telemetry keeps and hands out: round and answer records, running numbers, plot snapshots.

Plain frozen values, so that the GUI thread (and export) can hold on to them while the
recorder goes on; the metric definitions live here once (:data:`METRIC_DEFINITIONS`),
for the numbers below, the export and the panel's tooltips alike.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from specchat import metrics
from specchat.engine.events import GenerationStats
from specchat.engine.settings import Drafter
from specchat.metrics import Counts, CountsFigures, PhaseSplit, counted

from .samplers import MemorySample

METRIC_DEFINITIONS: dict[str, str] = {
    "token_acceptance": "accepted draft tokens / drafted tokens",
    "sequence_acceptance": "rounds whose whole draft was accepted / rounds with a draft",
    "decode_tok_s": "tokens emitted after the first / decode wall time (prefill excluded)",
    "prefill_tok_s": "prompt tokens evaluated (not reused from the KV cache) / prefill wall time",
    "multiplier": "speculative decode tok/s / plain decode tok/s of the same pair",
    "mean_k": "sum of the draft length K over rounds with a draft / rounds with a draft",
    "mean_accepted": "accepted draft tokens / rounds with a draft",
    "fallback_share": "rounds decoded plain because a guard rail fell back / rounds",
    "time_split": "per round: draft, verify, overhead (everything else); wall = their sum",
    "round_tok_s": "tokens emitted in the round / the round's wall time",
    "round_tok_s_smooth": "exponential moving average of tokens emitted / of wall time, per answer",
    "rolling_acceptance": "token and sequence acceptance over the last N rounds with a draft",
    "live_decode_s": "while an answer streams: the sum of its rounds' wall times; once done: the engine's",
}

ChatId = Hashable | None  # whatever the store uses; None for answers outside a chat (CLI)


# -- records ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One round as exported: the engine's RoundStats plus when, where and what it did to the plots."""

    t: float  # wall-clock seconds (time.time()) when the round reached the recorder
    chat_id: ChatId
    request_id: Hashable
    round: int  # index within its answer
    seq: int  # rounds recorded since start: the x axis of the per-round plots
    drafter: Drafter
    k: int
    drafted: int
    accepted: int
    emitted: int
    draft_s: float
    verify_s: float
    overhead_s: float
    catch_up: int
    tok_s: float | None  # emitted / wall; None for a round with no measured time
    tok_s_smooth: float | None
    token_acceptance: float | None  # rolling, over the last N rounds with a draft
    sequence_acceptance: float | None
    in_fallback: bool  # decoded plain because a guard rail had fallen back
    fallback: bool = False  # a fallback (or the fallback warning) was declared at this round
    fallback_reason: str = ""
    phase: str = ""  # "reasoning" (inside the think block) or "answer"

    @property
    def wall_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s


ROUND_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RoundRecord))


@dataclass(frozen=True, slots=True)
class FallbackMarker:
    """A fallback to draw on the K plot at round ``seq``, with its reason as the tooltip."""

    t: float
    seq: int  # the round it was declared after; for a note before the first round, that first round
    k: int  # K of that round (0 before the first round)
    reason: str
    permanent: bool
    warning: bool
    chat_id: ChatId
    request_id: Hashable


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """One finished (or abandoned) answer: the engine's totals when it said Done."""

    request_id: Hashable
    chat_id: ChatId
    mode: str | None
    started: float
    finished: float
    stop_reason: str  # a StopReason value, or "abandoned" when no Done arrived
    stats: GenerationStats | None  # None when abandoned
    prefill_tokens: int  # evaluated, not reused
    prefill_s: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class RunningNumbers(CountsFigures):
    """Totals of one answer or of many: their pooled :class:`~specchat.metrics.Counts`, with the
    figures as properties computed from them (the same rule as :mod:`specchat.store.task_stats`).
    The counts and figures read through :class:`~specchat.metrics.CountsFigures`, None where
    undefined; ``decoded_tokens``, ``prefill_tokens`` and ``tok_s`` are the export's names."""

    answers: int
    counts: Counts
    current_k: int | None  # K of the newest round
    multiplier: float | None  # speculative tok/s / plain tok/s; None while either is unknown
    phases: PhaseSplit = PhaseSplit()  # the rounds inside the reasoning block and after it

    decoded_tokens = counted("decoded")  # tokens emitted after the first, over answers with a decode phase

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens the prefills evaluated (not reused from the KV cache)."""
        return self.counts.prompt_tokens - self.counts.reused_tokens

    @property
    def tok_s(self) -> float | None:
        return self.counts.decode_tok_s

    def as_dict(self) -> dict[str, Any]:
        """Counts and derived metrics, for export (the names of format version 1, then the new counts)."""
        out: dict[str, Any] = {"answers": self.answers, "current_k": self.current_k, "multiplier": self.multiplier}
        out.update(self.counts.to_dict())
        if self.phases.has_reasoning:
            out["phases"] = self.phases.to_dict()
        out.update(decoded_tokens=self.decoded_tokens, prefill_tokens=self.prefill_tokens)
        for name in ("tok_s", "prefill_tok_s", "token_acceptance", "sequence_acceptance", "mean_k",
                     "mean_accepted", "fallback_share"):
            out[name] = getattr(self, name)
        return out


@dataclass(frozen=True, slots=True)
class Tally:
    """What the recorder adds up per answer and over many: answers, their counts, and the
    speculative answers' counts apart (the multiplier compares those with plain decoding)."""

    answers: int = 0
    counts: Counts = Counts()
    speculative: Counts = Counts()
    phases: PhaseSplit = PhaseSplit()

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.answers + other.answers, self.counts + other.counts, self.speculative + other.speculative,
                     self.phases + other.phases)

    def numbers(self, current_k: int | None, plain_rate: float | None, *, speculative_only: bool = True
                ) -> RunningNumbers:
        """Freeze the counts.  The multiplier's numerator is the speculative answers' decode rate
        (``speculative_only``, for totals over many answers) or every counted answer's (for one answer,
        whatever its mode: a plain answer then shows about 1x)."""
        rate = (self.speculative if speculative_only else self.counts).decode_tok_s
        return RunningNumbers(answers=self.answers, counts=self.counts, current_k=current_k,
                              multiplier=metrics.multiplier(rate, plain_rate), phases=self.phases)


# -- the snapshot the GUI reads ---------------------------------------------------------------------

ROUND_COLUMNS = ("t", "seq", "k", "drafted", "accepted", "emitted", "tok_s", "tok_s_smooth",
                 "token_acceptance", "sequence_acceptance", "draft_s", "verify_s", "overhead_s", "fallback",
                 "in_fallback")
MEMORY_COLUMNS = ("t", "rss", "ram_available", "process_vram", "vram_used")


@dataclass(frozen=True, slots=True)
class RoundSeries:
    """Per-round plot data, oldest first, all the same length; read-only numpy arrays.

    Unknown values are NaN (a round without a draft before any round had one has no
    rolling acceptance).  ``fallback`` and ``in_fallback`` are 0/1.
    """

    t: np.ndarray
    seq: np.ndarray
    k: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray
    tok_s: np.ndarray
    tok_s_smooth: np.ndarray
    token_acceptance: np.ndarray
    sequence_acceptance: np.ndarray
    draft_s: np.ndarray
    verify_s: np.ndarray
    overhead_s: np.ndarray
    fallback: np.ndarray
    in_fallback: np.ndarray

    def __len__(self) -> int:
        return len(self.t)


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """Memory plot data, oldest first: bytes; ``vram_used`` has one column per GPU."""

    t: np.ndarray
    rss: np.ndarray
    ram_available: np.ndarray
    process_vram: np.ndarray  # NaN where NVML could not tell
    vram_used: np.ndarray  # shape (samples, GPUs); (samples, 0) without NVML
    vram_total: tuple[int, ...] = ()
    gpu_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.t)

    @classmethod
    def empty(cls) -> MemorySeries:
        """No sample yet."""
        none = np.empty(0)
        none.setflags(write=False)
        no_gpus = np.empty((0, 0))
        no_gpus.setflags(write=False)
        return cls(none, none, none, none, no_gpus)


@dataclass(frozen=True, slots=True)
class TelemetrySnapshot:
    """Everything the panel draws, at one moment; immutable, so the GUI can keep it as long as it likes."""

    version: int  # changes whenever anything in it would
    rounds: RoundSeries
    memory: MemorySeries
    markers: tuple[FallbackMarker, ...]
    answer: RunningNumbers | None  # the current answer, or the last one
    answer_request_id: Hashable | None
    answer_streaming: bool
    total: RunningNumbers  # since the app started
    latest_memory: MemorySample | None
    plain_rate: float | None  # the reference line on the tok/s plot
    plain_rate_source: str | None  # "set" or "baseline answers"
    plain_answers: int  # the pair's plain runs: stored ones and those since the load (a rate needs MIN_PLAIN_RUNS)
    min_token_acceptance: float  # the fallback thresholds, drawn as lines
    min_sequence_acceptance: float
    window_rounds: int
    keep_seconds: float
    busy: str = ""  # why figures are paused: the newest answer ran on a busy machine ("" when not)
    answer_chat_id: ChatId = None  # whose answer ``answer`` is (a chat's id, or the window's API: "api")
