"""The metric definitions, once (DESIGN.md, "Metrics").

The engine's answer stats, the controller's guard-rail window, the telemetry
recorder and its running numbers, the per-task table, the benchmark table and
the exports all compute their figures here, from raw counts.  Totals over many
answers or runs are made by adding the counts first (pooling), never by
averaging per-answer ratios, so the same rounds give the same figure everywhere.

Every function returns None when the figure is undefined (nothing drafted, no
decode time), which the screens show as a dash.
"""

from __future__ import annotations


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


def multiplier(speculative_tok_s: float | None, plain_tok_s: float | None) -> float | None:
    """Speculative decode tok/s / plain decode tok/s (the same prompts, the same run)."""
    return speculative_tok_s / plain_tok_s if speculative_tok_s and plain_tok_s else None


def fallback_share(fallback_rounds: int, rounds: int) -> float | None:
    """Rounds decoded plainly because a guard rail fell back / all rounds."""
    return ratio(fallback_rounds, rounds)
