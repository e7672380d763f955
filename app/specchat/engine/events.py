"""Frozen event objects yielded by the generation loop.

The engine is a plain generator; these are the only things it hands to the
outside world (CLI, bench, workers).  They are immutable so they can cross
threads without copying.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specchat.metrics import Counts, CountsView, PhaseSplit

from .settings import Drafter


class TokenOrigin(StrEnum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # proposed by a drafter and accepted by the target
    TARGET = "target"  # sampled by the target (correction, bonus or plain step)


class StopReason(StrEnum):
    EOG = "eog"  # the model ended its turn
    STOP_STRING = "stop_string"
    MAX_TOKENS = "max_tokens"
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Prefilled:
    """The prompt is in the KV cache; decoding starts."""

    prompt_tokens: int
    reused_tokens: int  # prompt tokens whose KV was kept from the previous turn
    seconds: float

    @property
    def tok_s(self) -> float:
        new = self.prompt_tokens - self.reused_tokens
        return new / self.seconds if self.seconds > 0 and new > 0 else 0.0


@dataclass(frozen=True, slots=True)
class TokensEmitted:
    """Tokens accepted this round, in order, with their text and origin."""

    token_ids: tuple[int, ...]
    origins: tuple[TokenOrigin, ...]
    text: str  # the visible text these tokens completed (may be "" mid-UTF-8), <think> tags included
    # ``text`` split once, by engine.phases (every backend's answer): what of it is answer and what
    # reasoning, tags left out and a tag cut across chunks held back; both "" in the loop's raw events
    answer: str = ""
    reasoning: str = ""


@dataclass(frozen=True, slots=True)
class RoundStats:
    """One speculative round (or one plain step, with drafted == 0)."""

    index: int
    drafter: Drafter
    k: int  # draft length asked for this round
    drafted: int  # tokens the drafter actually proposed
    accepted: int  # drafted tokens the target accepted
    emitted: int  # tokens emitted this round (accepted + 1, or fewer at a stop)
    draft_s: float
    verify_s: float
    overhead_s: float
    catch_up: int = 0  # tokens the draft model had to decode before drafting (not drafting cost)
    draft_decoded: int = 0  # tokens the draft model decoded this round (catch-up included)
    fallback: bool = False  # plain because a guard rail tripped (not by choice of the cost model)
    phase: str = ""  # "reasoning" or "answer" once engine.phases has filed it; "" before
    verify_n: int = 0  # rows of the verify batch, padding included (engine/shapes.py); 0: drafted + 1
    verify_fresh: bool = False  # the verify ran at a size not replayed yet: it paid a re-capture (shapes)
    # tokens the draft's confidence stop declined and the round sent anyway (controller.Plan.spare_p), not
    # counted as drafted, and how many of them the target accepted (emitted counts them)
    spare: int = 0
    spare_accepted: int = 0

    @property
    def verify_rows(self) -> int:
        """The batch size ``verify_s`` paid for."""
        return self.verify_n or self.drafted + 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafter", Drafter(self.drafter))  # a plain "model" becomes the enum

    @property
    def wall_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    @property
    def counts(self) -> Counts:
        """This round's contribution to its answer's totals."""
        return Counts.of_round(self.k, self.drafted, self.accepted, draft_s=self.draft_s, verify_s=self.verify_s,
                               overhead_s=self.overhead_s, fallback=self.fallback)


@dataclass(frozen=True, slots=True)
class Fallback:
    """The controller stopped speculating (for a while, or for good) and says why."""

    reason: str
    permanent: bool = False
    warning: bool = False  # True when this is the "fallback too often" warning
    # a few words for the answer's stats line ("the draft model cannot pay here, best case 0.80x");
    # "" when the note is not about which drafter ran
    brief: str = ""


@dataclass(frozen=True, slots=True)
class Done:
    stop_reason: StopReason
    stats: GenerationStats
    message: str = ""


@dataclass(frozen=True, slots=True)
class Error:
    """Something went wrong; the models and their caches are still usable."""

    message: str


@dataclass(frozen=True, slots=True)
class GenerationStats(CountsView):
    """Totals of one answer: its :class:`~specchat.metrics.Counts`, the mode it ran in and
    the fallbacks it declared.  The flat names (``tokens``, ``token_acceptance`` ...) read
    the counts, so every figure comes from :mod:`specchat.metrics`."""

    mode: str
    counts: Counts = Counts()
    fallbacks: tuple[str, ...] = ()
    phases: PhaseSplit = PhaseSplit()  # the rounds inside the reasoning block and after it (engine.phases)
    structured: str = ""  # "json_schema" or "grammar": the answer was held to one (its acceptance is under it)
    # the drafters that drafted, as (name, drafted, accepted), most drafted first (Drafter values)
    drafters: tuple[tuple[str, int, int], ...] = ()
    notes: tuple[str, ...] = ()  # the briefs of its Fallbacks that say why a drafter did not run
    # the fewest decode threads it ran on and the most it could (engine/threads.py); (0, 0): not fitted
    threads: tuple[int, int] = (0, 0)

    @classmethod
    def empty(cls, mode: str = "") -> GenerationStats:
        """Nothing counted (an answer that failed before its first token)."""
        return cls(str(mode))


Event = Prefilled | TokensEmitted | RoundStats | Fallback | Done | Error
