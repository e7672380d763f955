"""Sample-and-match keeps the target's distribution, whatever the drafter proposes."""

import numpy as np
import pytest
from scipy.stats import chisquare

from specchat.engine.verify import accepted_count, sample_and_match

# a tiny "language model": the next-token distribution depends on the previous token
VOCAB = 4
P = np.array([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]])
Q = np.array([[0.05, 0.05, 0.1, 0.8], [0.9, 0.05, 0.03, 0.02], [0.7, 0.1, 0.1, 0.1], [0.01, 0.01, 0.01, 0.97]])


def two_token_dist(first: int) -> np.ndarray:
    """Exact target probability of every (t1, t2) after token ``first``."""
    return (P[first][:, None] * P).ravel()


def speculate(rng: np.random.Generator, verifier, k: int = 3) -> tuple[int, int]:
    """Generate two tokens after token 0 with a drafter sampling from Q (a bad draft)."""
    seq = [0]
    while len(seq) < 3:
        drafted, prev = [], seq[-1]
        for _ in range(k):
            prev = int(rng.choice(VOCAB, p=Q[prev]))
            drafted.append(prev)
        context = [seq[-1], *drafted]

        def sample(i: int, context=context) -> int:
            return int(rng.choice(VOCAB, p=P[context[i]]))

        seq.extend(verifier(sample, drafted, limit=3 - len(seq), is_end=lambda t: False))
    return seq[1], seq[2]


def always_accept(sample, drafted, *, limit, is_end):  # the bug a test must catch
    return list(drafted[:limit]) or [sample(0)]


def histogram(verifier, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(VOCAB * VOCAB)
    for _ in range(n):
        a, b = speculate(rng, verifier)
        counts[a * VOCAB + b] += 1
    return counts


def test_sample_and_match_matches_the_target_distribution():
    n = 6000
    counts = histogram(sample_and_match, n, seed=1)
    _, p = chisquare(counts, two_token_dist(0) * n)
    assert p > 0.001, f"speculative samples do not follow the target (p={p:.2g})"


def test_the_same_check_catches_a_biased_verifier():
    n = 6000
    counts = histogram(always_accept, n, seed=1)
    _, p = chisquare(counts, two_token_dist(0) * n)
    assert p < 1e-6


def test_greedy_accepts_the_matching_prefix_then_the_targets_token():
    argmax_rows = [5, 6, 9, 1]  # target's choice after [last, d1, d2, d3]
    out = sample_and_match(lambda i: argmax_rows[i], [5, 6, 7], limit=10, is_end=lambda t: False)
    assert out == [5, 6, 9]
    assert accepted_count([5, 6, 7], out) == 2


def test_full_acceptance_earns_the_bonus_token():
    out = sample_and_match(lambda i: [5, 6, 7, 8][i], [5, 6, 7], limit=10, is_end=lambda t: False)
    assert out == [5, 6, 7, 8]
    assert accepted_count([5, 6, 7], out) == 3


@pytest.mark.parametrize("limit", [1, 2])
def test_nothing_is_sampled_past_the_limit_or_the_end(limit):
    calls = []

    def sample(i):
        calls.append(i)
        return [5, 0, 7, 8][i]

    out = sample_and_match(sample, [5, 0, 7], limit=limit, is_end=lambda t: t == 0)
    assert out == [5, 0][:limit]
    assert calls == list(range(limit))
