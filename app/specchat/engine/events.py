"""Frozen event objects yielded by the generation loop.

The engine is a plain generator; these are the only things it hands to the
outside world (CLI, bench, workers).  They are immutable so they can cross
threads without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from specchat import metrics


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
    text: str  # the visible text these tokens completed (may be "" mid-UTF-8)


@dataclass(frozen=True, slots=True)
class RoundStats:
    """One speculative round (or one plain step, with drafted == 0)."""

    index: int
    drafter: str  # "none", "model", "lookup"
    k: int  # draft length asked for this round
    drafted: int  # tokens the drafter actually proposed
    accepted: int  # drafted tokens the target accepted
    emitted: int  # tokens emitted this round (accepted + 1, or fewer at a stop)
    draft_s: float
    verify_s: float
    overhead_s: float
    catch_up: int = 0  # tokens the draft model had to decode before drafting (not drafting cost)
    fallback: bool = False  # plain because a guard rail tripped (not by choice of the cost model)

    @property
    def wall_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s


@dataclass(frozen=True, slots=True)
class Fallback:
    """The controller stopped speculating (for a while, or for good) and says why."""

    reason: str
    permanent: bool = False
    warning: bool = False  # True when this is the "fallback too often" warning


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
class GenerationStats:
    """Totals of one answer, with DESIGN.md's metric definitions."""

    mode: str
    prompt_tokens: int
    tokens: int
    prefill_s: float
    decode_s: float  # wall time after the first emitted token
    drafted: int
    accepted: int
    rounds: int
    rounds_with_draft: int
    rounds_fully_accepted: int
    draft_s: float
    verify_s: float
    overhead_s: float
    k_sum: int  # sum of K over rounds with a draft (for mean K)
    fallback_rounds: int = 0
    fallbacks: tuple[str, ...] = field(default_factory=tuple)

    # the definitions live in specchat.metrics; these are one answer's figures
    @property
    def decode_tok_s(self) -> float:
        return metrics.decode_tok_s(metrics.decoded_tokens(self.tokens), self.decode_s) or 0.0

    @property
    def prefill_tok_s(self) -> float:
        return metrics.prefill_tok_s(self.prompt_tokens, self.prefill_s) or 0.0

    @property
    def token_acceptance(self) -> float | None:
        return metrics.token_acceptance(self.accepted, self.drafted)

    @property
    def sequence_acceptance(self) -> float | None:
        return metrics.sequence_acceptance(self.rounds_fully_accepted, self.rounds_with_draft)

    @property
    def mean_k(self) -> float:
        return metrics.mean_k(self.k_sum, self.rounds_with_draft) or 0.0

    @property
    def mean_accepted(self) -> float:
        return metrics.mean_accepted(self.accepted, self.rounds_with_draft) or 0.0

    @property
    def fallback_share(self) -> float:
        return metrics.fallback_share(self.fallback_rounds, self.rounds) or 0.0

    def summary(self) -> str:
        """The one-line footer: '41.0 tok/s · 212 tokens · 78% draft accepted · mean K 3.1'."""
        parts = [f"{self.decode_tok_s:.1f} tok/s", f"{self.tokens} tokens"]
        if self.token_acceptance is not None:
            parts.append(f"{self.token_acceptance:.0%} draft accepted")
            parts.append(f"mean K {self.mean_k:.1f}")
        parts.append(self.mode)
        return " · ".join(parts)


Event = Prefilled | TokensEmitted | RoundStats | Fallback | Done | Error
