"""The metric definitions, once (docs/ARCHITECTURE.md, "Metrics").

The engine's answer stats, the controller's guard-rail window, the telemetry
recorder and its running numbers, the per-task table, the benchmark table and
the exports all compute their figures here, from raw counts.  Totals over many
answers or runs are made by adding the counts first (pooling), never by
averaging per-answer ratios, so the same rounds give the same figure everywhere.

Every function returns None when the figure is undefined (nothing drafted, no
decode time), which the screens show as a dash.  :class:`Counts` is the one record
of raw counts that every layer keeps and adds up; its properties are the figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

# The largest whole count a stored record may hold: SQLite's INTEGER (a signed 64-bit number).
MAX_COUNT = (1 << 63) - 1


def ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def token_acceptance(accepted: int, drafted: int) -> float | None:
    """Accepted draft tokens / drafted tokens."""
    return ratio(accepted, drafted)


def sequence_acceptance(rounds_fully_accepted: int, rounds_with_draft: int) -> float | None:
    """Rounds whose whole draft was accepted / rounds with a draft."""
    return ratio(rounds_fully_accepted, rounds_with_draft)


def mean_k(k_sum: int, rounds_with_draft: int) -> float | None:
    """Mean draft length over the rounds that had a draft."""
    return ratio(k_sum, rounds_with_draft)


def mean_accepted(accepted: int, rounds_with_draft: int) -> float | None:
    """Mean accepted draft tokens per round with a draft."""
    return ratio(accepted, rounds_with_draft)


def decoded_tokens(tokens: int) -> int:
    """The tokens of one answer that count for decode speed: all emitted but the first
    (the first comes out of the prefill)."""
    return max(tokens - 1, 0)


def decode_tok_s(decoded: int, decode_s: float) -> float | None:
    """Tokens emitted after the first / decode wall time (prefill excluded).

    ``decoded`` is :func:`decoded_tokens` of one answer, or its sum over many answers
    with ``decode_s`` summed over the same answers.
    """
    return decoded / decode_s if decoded > 0 and decode_s > 0 else None


def prefill_tok_s(prompt_tokens: int, prefill_s: float) -> float | None:
    return prompt_tokens / prefill_s if prompt_tokens > 0 and prefill_s > 0 else None


# A multiplier over plain decoding that is shown as a figure rests on at least this many plain runs
# (and, pooled per task, as many speculative ones): one run is noise.  A walk-through saw 1.97x from
# one, and a per-task 2.09x that was 0.99x fifteen minutes later.
MIN_PLAIN_RUNS = 3


def runs_phrase(n: int, side: str = "plain") -> str:
    """The one way a count of runs is said, in the panel, the stats line and the task table:
    "2 of 3 plain runs" while a multiplier still waits for them, then "5 plain runs"."""
    if n < MIN_PLAIN_RUNS:
        return f"{n} of {MIN_PLAIN_RUNS} {side} runs"
    return f"{n} {side} runs"


def multiplier(speculative_tok_s: float | None, plain_tok_s: float | None) -> float | None:
    """Speculative decode tok/s / plain decode tok/s (the same prompts, the same run)."""
    return speculative_tok_s / plain_tok_s if speculative_tok_s and plain_tok_s else None


# Student's t at 97.5% for 1..30 degrees of freedom (a 95% two-sided interval); beyond, the normal's
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def paired_interval(pairs: Iterable[tuple[float, float]]) -> tuple[float, float, float] | None:
    """The speed-up of ``a`` over ``b`` from runs measured side by side, as (geometric mean, low, high):
    a 95% interval of the mean ratio, from the spread of the pairs' log ratios (Student's t).

    Each pair is (a's rate, b's rate) on the same prompt and repeat, run next to each other, so a drift of
    the machine's speed between pairs cancels; what is left is how much the ratio itself varies.  On a
    2-core machine beside other work one pair's ratio varied by 10%, so four pairs leave a mean ratio
    known to about 10%: a bench says so rather than print 0.93x as if it were exact.  None with fewer
    than two usable pairs (no spread to measure)."""
    logs = [math.log(a / b) for a, b in pairs if a and b and a > 0 and b > 0]
    if len(logs) < 2:
        return None
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def fallback_share(fallback_rounds: int, rounds: int) -> float | None:
    """Rounds decoded plainly because a guard rail fell back / all rounds."""
    return ratio(fallback_rounds, rounds)


# -- the counts every figure above is made from -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counts:
    """The additive counts of one round, one answer or many answers.

    Every field adds up across answers (``a + b``, :meth:`total`), and every figure the
    app shows is a property computed from them with the functions above, so a total
    over many answers is the pooled figure by construction, never a mean of ratios.
    Engine, store, telemetry, task table and bench all keep their counts in this one
    shape.
    """

    tokens: int = 0  # tokens emitted, the first one (from the prefill) included
    decoded: int = 0  # tokens emitted after the first, in answers with a decode phase
    prompt_tokens: int = 0  # prompt tokens, reused ones included
    reused_tokens: int = 0  # prompt tokens whose KV cache was kept from the previous turn
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    rounds_with_draft: int = 0
    rounds_fully_accepted: int = 0
    k_sum: int = 0  # sum of K over the rounds with a draft
    fallback_rounds: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0  # wall time after the first token, in answers with a decode phase
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0

    # -- building ------------------------------------------------------------------------

    @classmethod
    def of_round(cls, k: int, drafted: int, accepted: int, *, draft_s: float = 0.0, verify_s: float = 0.0,
                 overhead_s: float = 0.0, fallback: bool = False) -> Counts:
        """One round's counts.  ``k`` counts only when something was drafted; tokens are not
        counted here (the answer counts them once, see :meth:`of_answer`)."""
        return cls(
            drafted=drafted, accepted=accepted, rounds=1, rounds_with_draft=int(drafted > 0),
            rounds_fully_accepted=int(drafted > 0 and accepted == drafted), k_sum=k if drafted > 0 else 0,
            fallback_rounds=int(fallback), draft_s=draft_s, verify_s=verify_s, overhead_s=overhead_s,
        )

    @classmethod
    def of_answer(cls, tokens: int, decode_s: float, *, prompt_tokens: int = 0, reused_tokens: int = 0,
                  prefill_s: float = 0.0) -> Counts:
        """An answer's own counts (add its rounds' counts to them).

        An answer without a decode phase (fewer than two tokens, or no decode time) adds
        neither decoded tokens nor decode time, so it cannot bend a pooled decode rate.
        """
        decoded = decoded_tokens(tokens)
        has_decode = decoded > 0 and decode_s > 0
        return cls(tokens=tokens, decoded=decoded if has_decode else 0, decode_s=decode_s if has_decode else 0.0,
                   prompt_tokens=prompt_tokens, reused_tokens=reused_tokens, prefill_s=prefill_s)

    def __add__(self, other: object) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        return Counts(*(getattr(self, f) + getattr(other, f) for f in COUNT_FIELDS))

    def __radd__(self, other: object) -> Counts:
        if other == 0:  # so that the builtin sum() works without a start value
            return self
        return NotImplemented

    @classmethod
    def total(cls, items: Iterable[Counts]) -> Counts:
        """The pooled counts of many rounds, answers or runs."""
        out: list[Any] = [kind() for kind in _FIELD_KINDS.values()]  # 0 and 0.0
        for c in items:
            for i, name in enumerate(COUNT_FIELDS):
                out[i] += getattr(c, name)
        return cls(*out)

    # -- JSON ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, int | float]:
        return {name: getattr(self, name) for name in COUNT_FIELDS}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Counts:
        """Lenient: a missing key (a document from an older version) is 0, an unknown one
        (from a newer version) is ignored.  Strict about what is there: a count is a whole
        number from 0 to :data:`MAX_COUNT`, a time a finite number of seconds from 0; anything
        else (NaN, an infinity, a negative count, text, a fraction of a token) raises
        ValueError naming the count."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"counts must be an object, got {type(doc).__name__}")
        values: dict[str, Any] = {}
        for name, kind in _FIELD_KINDS.items():
            raw = doc.get(name)
            if raw is None:
                continue
            values[name] = _count(name, kind, raw)
        return cls(**values)

    def check(self) -> Counts:
        """These counts, or ValueError naming the first one a stored record may not hold (see
        :meth:`from_dict`)."""
        for name, kind in _FIELD_KINDS.items():
            _count(name, kind, getattr(self, name))
        return self

    # -- the figures (docs/ARCHITECTURE.md, "Metrics"); None where undefined -------------

    @property
    def decode_tok_s(self) -> float | None:
        return decode_tok_s(self.decoded, self.decode_s)

    @property
    def prefill_tok_s(self) -> float | None:
        """Prompt tokens the prefill evaluated (reused ones cost nothing) / prefill time."""
        return prefill_tok_s(self.prompt_tokens - self.reused_tokens, self.prefill_s)

    @property
    def token_acceptance(self) -> float | None:
        return token_acceptance(self.accepted, self.drafted)

    @property
    def sequence_acceptance(self) -> float | None:
        return sequence_acceptance(self.rounds_fully_accepted, self.rounds_with_draft)

    @property
    def mean_k(self) -> float | None:
        return mean_k(self.k_sum, self.rounds_with_draft)

    @property
    def mean_accepted(self) -> float | None:
        return mean_accepted(self.accepted, self.rounds_with_draft)

    @property
    def fallback_share(self) -> float | None:
        return fallback_share(self.fallback_rounds, self.rounds)

    @property
    def rejections(self) -> int:
        """Rounds with a draft that the target cut short (a round stops at its first rejection)."""
        return self.rounds_with_draft - self.rounds_fully_accepted

    @property
    def rounds_s(self) -> float:
        """Wall time of the rounds: draft + verify + overhead."""
        return self.draft_s + self.verify_s + self.overhead_s


COUNT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Counts))
_FIELD_KINDS: dict[str, type] = {f.name: float if f.type in ("float", float) else int for f in fields(Counts)}
FIELD_KINDS = _FIELD_KINDS  # each count's kind: int (tokens, rounds) or float (seconds)


def _count(name: str, kind: type, raw: object) -> int | float:
    """One stored count as its kind, or ValueError: a whole number in [0, MAX_COUNT] for a count
    (an integral float such as 3.0 is read as 3), a finite number from 0 for a time."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"count {name!r} must be a number, got {_shown(raw)}")
    if not math.isfinite(raw) or raw < 0:
        raise ValueError(f"count {name!r} must be a finite number from 0, got {_shown(raw)}")
    if kind is float:
        return float(raw)
    if raw != int(raw) or raw > MAX_COUNT:
        raise ValueError(f"count {name!r} must be a whole number up to {MAX_COUNT}, got {_shown(raw)}")
    return int(raw)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- the reasoning block and the answer, apart ------------------------------------------------------

REASONING, ANSWER = "reasoning", "answer"


@dataclass(frozen=True, slots=True)
class PhaseSplit:
    """One answer's rounds filed under the phase they ran in: inside the ``<think>`` block
    or after it.  Reasoning is known to lower acceptance, so the two are shown apart.

    Each phase's counts are its rounds' counts plus, as its tokens and decode time, the
    tokens those rounds emitted and their wall time (so ``decode_tok_s`` is the phase's
    own speed; the first token, which comes out of the prefill, is in neither).
    Additive like :class:`Counts`, so per-task totals pool exactly.
    """

    reasoning: Counts = Counts()
    answer: Counts = Counts()

    @staticmethod
    def round_counts(round_counts: Counts, emitted: int, wall_s: float) -> Counts:
        return round_counts + Counts(tokens=emitted, decoded=emitted, decode_s=wall_s)

    def add(self, phase: str, counts: Counts) -> PhaseSplit:
        if phase == REASONING:
            return PhaseSplit(self.reasoning + counts, self.answer)
        return PhaseSplit(self.reasoning, self.answer + counts)

    def __add__(self, other: object) -> PhaseSplit:
        if not isinstance(other, PhaseSplit):
            return NotImplemented
        return PhaseSplit(self.reasoning + other.reasoning, self.answer + other.answer)

    @property
    def has_reasoning(self) -> bool:
        """True when some rounds ran inside a reasoning block: only then is a split worth showing."""
        return self.reasoning.rounds > 0

    def to_dict(self) -> dict[str, dict[str, int | float]]:
        return {REASONING: self.reasoning.to_dict(), ANSWER: self.answer.to_dict()}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> PhaseSplit:
        """Strict like :meth:`Counts.from_dict`; a missing document is no split (ValueError for one
        that is not an object)."""
        doc = doc or {}
        if not isinstance(doc, Mapping):
            raise ValueError(f"phases must be an object, got {type(doc).__name__}")
        return cls(Counts.from_dict(doc.get(REASONING) or {}), Counts.from_dict(doc.get(ANSWER) or {}))

    def summary(self) -> str:
        """'reasoning 61% accepted, 18.2 tok/s · answer 83% accepted, 24.9 tok/s' ('' without reasoning)."""
        if not self.has_reasoning:
            return ""
        return " · ".join(f"{name} {_phase_text(c)}" for name, c in ((REASONING, self.reasoning),
                                                                     (ANSWER, self.answer)) if c.rounds)


def _phase_text(c: Counts) -> str:
    acc = "no draft" if c.token_acceptance is None else f"{c.token_acceptance:.0%} accepted"
    speed = "" if c.decode_tok_s is None else f", {c.decode_tok_s:.1f} tok/s"
    return acc + speed


def counted(name: str) -> property:
    """A read-only attribute that reads ``self.counts.<name>``: records that embed a
    :class:`Counts` keep the flat names their readers use."""
    if name not in COUNT_FIELDS:
        raise ValueError(f"no count named {name!r}")
    return property(lambda self: getattr(self.counts, name), doc=f"``counts.{name}``")


class CountsFigures:
    """The flat names and the figures over ``self.counts``, for records that embed a
    :class:`Counts`: every count reads through, and every figure is the counts' own (None
    where it is undefined).  :class:`CountsView` is the one-answer flavour of it; the
    telemetry's running numbers use it as it is.
    """

    __slots__ = ()
    counts: Counts

    tokens = counted("tokens")
    decoded = counted("decoded")
    prompt_tokens = counted("prompt_tokens")
    reused_tokens = counted("reused_tokens")
    drafted = counted("drafted")
    accepted = counted("accepted")
    rounds = counted("rounds")
    rounds_with_draft = counted("rounds_with_draft")
    rounds_fully_accepted = counted("rounds_fully_accepted")
    k_sum = counted("k_sum")
    fallback_rounds = counted("fallback_rounds")
    prefill_s = counted("prefill_s")
    decode_s = counted("decode_s")
    draft_s = counted("draft_s")
    verify_s = counted("verify_s")
    overhead_s = counted("overhead_s")

    @property
    def decode_tok_s(self) -> float | None:
        return self.counts.decode_tok_s

    @property
    def prefill_tok_s(self) -> float | None:
        return self.counts.prefill_tok_s

    @property
    def token_acceptance(self) -> float | None:
        return self.counts.token_acceptance

    @property
    def sequence_acceptance(self) -> float | None:
        return self.counts.sequence_acceptance

    @property
    def mean_k(self) -> float | None:
        return self.counts.mean_k

    @property
    def mean_accepted(self) -> float | None:
        return self.counts.mean_accepted

    @property
    def fallback_share(self) -> float | None:
        return self.counts.fallback_share


class CountsView(CountsFigures):
    """The flat names and one answer's figures over ``self.counts``, for records that embed a
    :class:`Counts` (the engine's answer stats, stored message stats, a bench run).

    Every count reads through; the rates are 0.0 rather than None where a screen prints a
    number either way; the acceptances stay None when nothing was drafted.
    """

    __slots__ = ()

    @property
    def decode_tok_s(self) -> float:
        return self.counts.decode_tok_s or 0.0

    @property
    def prefill_tok_s(self) -> float:
        return self.counts.prefill_tok_s or 0.0

    @property
    def mean_k(self) -> float:
        return self.counts.mean_k or 0.0

    @property
    def mean_accepted(self) -> float:
        return self.counts.mean_accepted or 0.0

    @property
    def fallback_share(self) -> float:
        return self.counts.fallback_share or 0.0
