"""Recorded-style engine event streams for the telemetry tests, built from the engine's real event types.

The order follows ``specchat.engine.generate``: Fallback notes before prefill, Prefilled,
the first token, then per round its TokensEmitted chunks (accepted draft tokens, then
the target's), its RoundStats and any Fallback it caused, and Done with totals that
add up the way the engine's do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from specchat.engine.events import (
    Done,
    Fallback,
    GenerationStats,
    Prefilled,
    RoundStats,
    StopReason,
    TokenOrigin,
    TokensEmitted,
)
from specchat.metrics import Counts


@dataclass(frozen=True)
class R:
    """One round to generate: K asked, tokens drafted and accepted, and its time split."""

    k: int
    drafted: int
    accepted: int
    draft_s: float = 0.010
    verify_s: float = 0.030
    overhead_s: float = 0.002
    drafter: str = "model"
    fallback_after: tuple[Fallback, ...] = ()
    plain_by_fallback: bool = False  # what the engine's plan.fallback was (for its totals)


def answer_events(rounds: Sequence[R], *, mode: str = "draft", notes: Sequence[Fallback] = (),
                  prompt_tokens: int = 100, prefill_s: float = 0.5) -> list[object]:
    events: list[object] = [*notes, Prefilled(prompt_tokens, 0, prefill_s)]
    token = iter(range(1000, 10**6))
    events.append(TokensEmitted((next(token),), (TokenOrigin.TARGET,), "a"))
    tokens = 1
    rounds_counts = Counts()
    fallbacks = [n.reason for n in notes]
    for i, r in enumerate(rounds):
        emitted = r.accepted + 1
        if r.accepted:
            events.append(TokensEmitted(tuple(next(token) for _ in range(r.accepted)),
                                        (TokenOrigin.DRAFT,) * r.accepted, "d" * r.accepted))
        events.append(TokensEmitted((next(token),), (TokenOrigin.TARGET,), "t"))
        rs = RoundStats(i, r.drafter if r.drafted else "none", r.k if r.drafted else 0, r.drafted, r.accepted,
                        emitted, r.draft_s, r.verify_s, r.overhead_s, fallback=r.plain_by_fallback)
        events.append(rs)
        events.extend(r.fallback_after)
        fallbacks.extend(f.reason for f in r.fallback_after)
        tokens += emitted
        rounds_counts += rs.counts
    # the engine's clock also runs while the generator is suspended: a little more than the rounds' time
    answer = Counts.of_answer(tokens, rounds_counts.rounds_s * 1.01, prompt_tokens=prompt_tokens,
                              prefill_s=prefill_s)
    stats = GenerationStats(mode, rounds_counts + answer, tuple(fallbacks))
    events.append(Done(StopReason.MAX_TOKENS, stats))
    return events


def timed(events: Sequence[object], t0: float = 1000.0) -> Iterator[tuple[float, object]]:
    """Arrival times: each RoundStats arrives after its round's wall time."""
    t = t0
    for e in events:
        if isinstance(e, RoundStats):
            t += e.wall_s
        yield t, e


def feed_all(recorder, request_id, chat_id, events, t0: float = 1000.0) -> float:
    t = t0
    for t, e in timed(events, t0):
        recorder.feed(request_id, chat_id, e, now=t)
    return t

