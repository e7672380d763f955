"""The draft's confidence test: the same decision as the softmax computed in float64, but
summing only the logits near the top except when the far ones could tip it."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.engine.sampling import greedy_choice, greedy_choices


def reference_p(logits: np.ndarray) -> float:
    """The softmax probability of the top logit, in float64 over the whole row."""
    x = logits.astype(np.float64)
    return float(1.0 / np.exp(x - x.max()).sum())


def rows() -> list[np.ndarray]:
    rng = np.random.default_rng(12)
    out = []
    for vocab in (2, 50, 4096, 49152, 151936):
        for scale in (0.3, 1.0, 3.0, 10.0):
            out.append((rng.standard_normal(vocab) * scale).astype(np.float32))
        # like a language model's row: one or a few leaders, a long tail 15-45 below
        row = (rng.uniform(-45, -15, vocab)).astype(np.float32)
        row[rng.integers(vocab, size=min(vocab, 5))] = rng.uniform(-3, 0, min(vocab, 5))
        out.append(row)
    huge = (rng.standard_normal(1000) * 1e30).astype(np.float32)
    with_inf = rng.standard_normal(1000).astype(np.float32)
    with_inf[::3] = -np.inf
    return [*out, huge, with_inf, -huge]


@pytest.mark.parametrize("p_min", [1e-6, 0.05, 0.3, 0.5, 0.6, 0.9, 0.999, 1.0])
def test_the_decision_is_the_softmax_threshold(p_min):
    for logits in rows():
        top, confident = greedy_choice(logits, p_min)
        p = reference_p(logits)
        assert logits[top] == logits.max()
        if abs(p - p_min) > 1e-5:
            assert confident == (p >= p_min), f"p={p} p_min={p_min} vocab={len(logits)}"


def test_a_threshold_just_either_side_of_p_is_decided_right():
    rng = np.random.default_rng(3)
    for _ in range(50):
        logits = (rng.standard_normal(30000) * rng.uniform(0.5, 6)).astype(np.float32)
        p = reference_p(logits)
        assert greedy_choice(logits, p * (1 - 1e-4))[1]
        assert not greedy_choice(logits, p * (1 + 1e-4))[1]


def test_many_far_logits_that_together_tip_the_decision_are_counted():
    # 150 000 logits 16 below the top add 0.017 to the softmax denominator: each is negligible,
    # together they decide whether p reaches a p_min between 1/1.017 and 1
    logits = np.full(150_001, -16.0, dtype=np.float32)
    logits[7] = 0.0
    p = reference_p(logits)
    assert 0.98 < p < 0.99
    assert greedy_choice(logits, p - 1e-4) == (7, True)
    assert greedy_choice(logits, p + 1e-4) == (7, False)
    assert greedy_choice(logits, 0.999) == (7, False)


def test_rows_without_a_finite_top():
    nan_row = np.array([0.0, np.nan, 5.0], dtype=np.float32)
    assert greedy_choice(nan_row, 0.01)[1] is False
    all_minus_inf = np.full(10, -np.inf, dtype=np.float32)
    assert greedy_choice(all_minus_inf, 0.01)[1] is False
    one_inf = np.array([0.0, np.inf, 1e30, -np.inf], dtype=np.float32)
    assert greedy_choice(one_inf, 0.999) == (1, True)
    two_inf = np.array([np.inf, 0.0, np.inf], dtype=np.float32)
    assert greedy_choice(two_inf, 0.5) == (0, True)
    assert greedy_choice(two_inf, 0.51) == (0, False)


def test_p_min_zero_is_always_confident():
    logits = np.zeros(1000, dtype=np.float32)  # p = 0.001
    assert greedy_choice(logits, 0.0) == (0, True)
    assert greedy_choice(logits, 0.01) == (0, False)


def test_several_thresholds_at_once_decide_as_each_alone():
    """The draft model asks for its stop and for the row of the token it declined in one pass over the
    row (greedy_choices); each answer must be what greedy_choice gives alone."""
    special = [np.array([np.nan, 1.0], dtype=np.float32), np.full(8, -np.inf, dtype=np.float32),
               np.array([np.inf, np.inf, 0.0, 1.0], dtype=np.float32)]
    for logits in [*rows(), *special]:
        for pair in ((0.9, 0.3), (0.6, 0.05), (0.3, 0.0), (0.0, 0.0), (1.0, 0.5), (0.35, 0.6)):
            top, decided = greedy_choices(logits, pair)
            assert (top, decided) == (greedy_choice(logits, pair[0])[0],
                                      tuple(greedy_choice(logits, p)[1] for p in pair)), (pair, logits[:4])
