"""Rounds rebuilt from llama-server's running timings, in the order its server loop sends them."""

from __future__ import annotations

import pytest

from specchat.engine.events import TokenOrigin
from specchat.engine.settings import Drafter
from specchat.metrics import Counts
from specchat.remote.errors import ServerError
from specchat.remote.rounds import RoundRebuilder, Timings

D, T = TokenOrigin.DRAFT, TokenOrigin.TARGET


def server_chunks(rounds: list[tuple[int, int]]) -> list[Timings]:
    """What a server sends for these (K, accepted) rounds, K = 0 a plain step: one chunk per token, the
    round's draft and acceptance already counted in its first chunk (server-context.cpp's order)."""
    out = []
    n = drafted = accepted = 0
    ms = 0.0
    for k, a in rounds:
        drafted += k
        accepted += a
        for _ in range(a + 1):
            n += 1
            ms += 10.0
            out.append(Timings(predicted_n=n, predicted_ms=ms, draft_n=drafted, draft_n_accepted=accepted))
    return out


def rebuild(chunks: list[Timings], n_max: int | None = None):
    r = RoundRebuilder()
    origins, rounds = [], []
    for t in chunks:
        o, closed = r.feed(t, n_max)
        origins.extend(o)
        rounds.extend(closed)
    rounds.extend(r.finish())
    return origins, rounds


def test_each_round_comes_back_with_its_draft_its_acceptance_and_its_tokens():
    script = [(0, 0), (3, 2), (0, 0), (4, 4), (5, 0), (2, 1)]  # the first: the token of the prefill
    origins, rounds = rebuild(server_chunks(script))
    assert [(r.k, r.accepted, r.emitted) for r in rounds] == [(k, a, a + 1) for k, a in script[1:]]
    assert [r.drafter for r in rounds] == [Drafter.MODEL, Drafter.NONE, Drafter.MODEL, Drafter.MODEL, Drafter.MODEL]
    assert origins == [T, D, D, T, T, D, D, D, D, T, T, D, T]
    total = Counts.total(r.counts for r in rounds)
    assert (total.drafted, total.accepted, total.rounds_with_draft, total.rounds_fully_accepted) == (14, 7, 4, 1)


def test_the_rounds_add_up_to_the_servers_final_totals():
    script = [(0, 0)] + [(3, 1), (3, 3), (0, 0), (3, 0), (3, 2)] * 7
    chunks = server_chunks(script)
    _, rounds = rebuild(chunks)
    total = Counts.total(r.counts for r in rounds)
    assert total.drafted == chunks[-1].draft_n and total.accepted == chunks[-1].draft_n_accepted
    assert sum(r.emitted for r in rounds) == chunks[-1].predicted_n - 1  # all but the prefill's token
    assert sum(r.verify_s for r in rounds) == pytest.approx((chunks[-1].predicted_ms - chunks[0].predicted_ms) / 1e3)


def test_a_round_cut_by_the_end_of_the_answer_keeps_only_the_tokens_sent():
    chunks = server_chunks([(0, 0), (4, 3)])[:3]  # max_tokens reached after two of the round's four tokens
    origins, rounds = rebuild(chunks)
    assert origins == [T, D, D]
    assert [(r.k, r.accepted, r.emitted) for r in rounds] == [(4, 3, 2)]


def test_chunks_merged_by_the_server_stay_one_round_and_are_counted_as_merged():
    chunks = server_chunks([(0, 0), (3, 3), (3, 1)])
    merged = [chunks[0], chunks[5], chunks[6]]  # the first round and the start of the second held back, sent as one
    r = RoundRebuilder()
    origins, rounds = [], []
    for t in merged:
        o, closed = r.feed(t, n_max=3)
        origins.extend(o)
        rounds.extend(closed)
    rounds.extend(r.finish())
    assert r.merged_rounds == 1
    assert sum(x.drafted for x in rounds) == 6 and sum(x.accepted for x in rounds) == 4
    assert len(origins) == 7


@pytest.mark.parametrize("doc", [
    {"predicted_n": -1}, {"predicted_n": "3"}, {"predicted_ms": float("nan")}, {"draft_n": True},
    {"draft_n": 2, "draft_n_accepted": 3}, [], "x", {"predicted_n": 10**13},
])
def test_timings_that_are_not_counts_are_one_server_error(doc):
    with pytest.raises(ServerError):
        Timings.parse(doc, "server x")


def test_counts_that_go_backwards_are_refused():
    r = RoundRebuilder()
    r.feed(Timings(predicted_n=5, draft_n=4))
    with pytest.raises(ServerError, match="backwards"):
        r.feed(Timings(predicted_n=4, draft_n=4))
