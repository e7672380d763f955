"""Prompt lookup: the same proposals as llama-cpp-python's scan, from an incremental index."""

from __future__ import annotations

import numpy as np
import pytest
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from specchat.engine.drafters import PromptLookupDrafter


def reference(history: list[int], max_ngram: int, k: int) -> list[int]:
    if len(history) <= 1:
        return []
    ids = np.array(history, dtype=np.intc)
    return LlamaPromptLookupDecoding(max_ngram_size=max_ngram, num_pred_tokens=k)(ids).tolist()


@pytest.mark.parametrize("max_ngram", [1, 2, 3, 5])
@pytest.mark.parametrize("vocab", [2, 4, 30])
def test_proposals_equal_llama_cpp_pythons_at_every_step_of_an_answer(max_ngram, vocab):
    rng = np.random.default_rng(vocab * 10 + max_ngram)
    for _ in range(4):
        drafter = PromptLookupDrafter(max_ngram, k_max=8)
        history = rng.integers(vocab, size=int(rng.integers(1, 40))).tolist()
        while len(history) < 200:
            k = int(rng.integers(1, 10))
            assert drafter.propose(history, k) == reference(history, max_ngram, min(k, 8)), history
            history += rng.integers(vocab, size=int(rng.integers(1, 6))).tolist()  # a round's tokens


def test_reset_and_a_context_that_does_not_continue_start_over():
    drafter = PromptLookupDrafter(3, k_max=4)
    assert drafter.propose([1, 2, 3, 9, 1, 2], 4) == [3, 9, 1, 2]
    # not a continuation of the history above (a different token at its end): indexed afresh
    assert drafter.propose([5, 6, 7, 5, 6, 8, 5], 4) == [6, 7, 5, 6]
    assert drafter.propose([5, 6], 4) == []  # shorter: afresh
    drafter.reset()
    assert drafter.propose([4, 4], 4) == [4]

