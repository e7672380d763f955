"""specchat.metrics.Counts: counts add up, and the figures of a sum are the pooled figures."""

from __future__ import annotations

import json

import pytest

from specchat import metrics
from specchat.metrics import COUNT_FIELDS, Counts


def answer(rounds: list[tuple[int, int, int]], *, tokens: int, decode_s: float, **kwargs) -> Counts:
    """An answer's counts from its rounds, given as (K, drafted, accepted)."""
    return Counts.of_answer(tokens, decode_s, **kwargs) + Counts.total(
        Counts.of_round(k, d, a, verify_s=0.01) for k, d, a in rounds)


def test_a_round_counts_what_it_drafted_and_whether_all_of_it_was_accepted():
    full = Counts.of_round(4, 4, 4, draft_s=0.01, verify_s=0.02, overhead_s=0.003)
    assert (full.rounds, full.rounds_with_draft, full.rounds_fully_accepted, full.k_sum) == (1, 1, 1, 4)
    assert full.rounds_s == pytest.approx(0.033) and full.tokens == 0  # tokens are the answer's to count
    short = Counts.of_round(4, 3, 1)  # the drafter stopped early at 3; the target took 1
    assert (short.rounds_fully_accepted, short.k_sum, short.rejections) == (0, 4, 1)
    plain = Counts.of_round(0, 0, 0, fallback=True)
    assert (plain.rounds, plain.rounds_with_draft, plain.k_sum, plain.fallback_rounds) == (1, 0, 0, 1)


def test_pooled_sequence_acceptance_over_two_answers_is_the_pooled_ratio():
    short = answer([(4, 4, 4)], tokens=6, decode_s=0.5)  # its one round fully accepted: 100%
    long = answer([(4, 4, 1)] * 9, tokens=19, decode_s=3.0)  # none of its 9 rounds: 0%
    both = short + long
    assert both.sequence_acceptance == 1 / 10  # not (100% + 0%) / 2
    assert both.token_acceptance == (4 + 9) / (4 + 36)
    assert both.mean_k == 4.0 and both.mean_accepted == 13 / 10


def test_decode_rate_pools_over_answers_without_their_first_tokens():
    a = answer([], tokens=11, decode_s=1.0)  # 10 tok/s
    b = answer([], tokens=91, decode_s=3.0)  # 30 tok/s
    assert (a + b).decode_tok_s == (10 + 90) / 4.0  # 25, not the mean 20
    assert (a + b).decoded == 100 and (a + b).tokens == 102


def test_an_answer_without_a_decode_phase_does_not_bend_the_pooled_rate():
    one_token = Counts.of_answer(1, 0.2)  # stopped after the prefill's token
    assert one_token.decoded == 0 and one_token.decode_s == 0.0 and one_token.decode_tok_s is None
    a = answer([], tokens=11, decode_s=1.0)
    assert (a + one_token).decode_tok_s == a.decode_tok_s == 10.0
    assert Counts.of_answer(5, 0.0).decoded == 0  # tokens but no time: no rate either


def test_prefill_rate_counts_only_evaluated_prompt_tokens():
    c = Counts.of_answer(2, 0.1, prompt_tokens=1000, reused_tokens=900, prefill_s=0.5)
    assert c.prefill_tok_s == 100 / 0.5  # the reused 900 cost nothing


def test_undefined_figures_are_none_not_zero():
    empty = Counts()
    for name in ("decode_tok_s", "prefill_tok_s", "token_acceptance", "sequence_acceptance", "mean_k",
                 "mean_accepted", "fallback_share"):
        assert getattr(empty, name) is None, name
    plain = answer([(0, 0, 0)] * 5, tokens=6, decode_s=1.0)
    assert plain.token_acceptance is None and plain.fallback_share == 0.0 and plain.decode_tok_s == 5.0


def test_sums_are_the_same_however_they_are_made():
    parts = [answer([(3, 3, i % 4)] * (i + 1), tokens=10 + i, decode_s=0.1 * (i + 1)) for i in range(5)]
    by_add = parts[0] + parts[1] + parts[2] + parts[3] + parts[4]
    assert Counts.total(parts) == sum(parts) == by_add
    assert Counts.total([]) == Counts() and isinstance(Counts.total([]).decode_s, float)
    with pytest.raises(TypeError):
        parts[0] + 1


def test_counts_round_trip_through_json_and_read_old_documents_leniently():
    c = answer([(4, 4, 3), (4, 2, 2)], tokens=9, decode_s=0.8, prompt_tokens=50, reused_tokens=20, prefill_s=0.3)
    assert Counts.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert list(c.to_dict()) == list(COUNT_FIELDS)
    old = {"tokens": 9, "drafted": 6, "from_a_newer_version": [1, 2]}  # missing counts are 0
    assert Counts.from_dict(old) == Counts(tokens=9, drafted=6)
    assert isinstance(Counts.from_dict({"decode_s": 2}).decode_s, float)
    with pytest.raises(ValueError):
        Counts.from_dict({"tokens": "nine"})
    with pytest.raises(ValueError):
        Counts.from_dict({"drafted": True})


def test_the_ratio_functions_stay_available():
    assert metrics.token_acceptance(3, 4) == 0.75 and metrics.sequence_acceptance(1, 4) == 0.25
    assert metrics.mean_k(12, 4) == 3.0 and metrics.fallback_share(1, 10) == 0.1
    assert metrics.decode_tok_s(metrics.decoded_tokens(11), 2.0) == 5.0
    assert metrics.prefill_tok_s(100, 0.5) == 200.0 and metrics.multiplier(15.0, 10.0) == 1.5


def test_records_that_embed_counts_read_them_by_name():
    class Record:
        counts = Counts(tokens=7)
        tokens = metrics.counted("tokens")

    assert Record().tokens == 7
    with pytest.raises(ValueError):
        metrics.counted("speed")
