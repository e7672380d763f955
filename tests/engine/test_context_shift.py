"""A long chat cut by truncate-middle or a rolling window reuses the KV cache after the cut: the left-out
block is dropped and what follows shifted back (llama.cpp's context shift), instead of prefilled again."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fakes import FakeModel, FakeSpec
from specchat.engine.runtime import SHIFT_MIN

A, B, C, D = list(range(300, 340)), list(range(400, 550)), list(range(600, 700)), list(range(800, 810))


def cached(tokens: list[int], *, can_shift: bool = True) -> FakeModel:
    model = FakeModel(Path("t.gguf"), FakeSpec(n_ctx=4096))
    model.can_shift = can_shift
    model.decode(tokens)
    return model


def test_a_left_out_block_is_dropped_and_what_follows_is_kept():
    model = cached(A + B + C)
    assert model.keep_prefix(A + C + D) == len(A + C)  # only D is left to prefill
    assert model.tokens == A + C and model.dropped == [(len(A), len(B))]


def test_the_usual_prefix_and_a_changed_tail_need_no_shift():
    model = cached(A + B)
    assert model.keep_prefix(A + B + C) == len(A + B) and model.dropped == []
    assert model.keep_prefix(A + C) == len(A) and model.tokens == A and model.dropped == []  # nothing of C cached


def test_a_short_match_after_the_gap_is_prefilled_again_not_shifted():
    model = cached(A + B + C[: SHIFT_MIN - 1])  # fewer than SHIFT_MIN tokens would be saved
    assert model.keep_prefix(A + C + D) == len(A) and model.dropped == []


def test_a_memory_that_cannot_shift_keeps_the_prefix_only():
    model = cached(A + B + C, can_shift=False)
    assert model.keep_prefix(A + C + D) == len(A) and model.tokens == A and model.dropped == []


@pytest.mark.real_models
def test_a_real_shift_keeps_positions_in_order_and_the_next_token_close_to_a_fresh_prefill(qwen_draft):
    import llama_cpp
    import numpy as np

    from specchat.engine.runtime import LoadedModel, ModelOptions

    def words(n: int, seed: str) -> str:
        return " ".join(f"{seed}{i}" for i in range(n))

    with LoadedModel(qwen_draft, ModelOptions(n_ctx=2048)) as model:
        assert model.can_shift  # Qwen2: plain RoPE
        a = model.tokenize("You are a helpful assistant. " + words(10, "rule"), add_special=True)
        b = model.tokenize(" " + words(60, "old"), add_special=False)
        c = model.tokenize(" " + words(40, "kept"), add_special=False)
        d = model.tokenize(" Now count on:", add_special=False)
        model.decode(a + b + c)
        assert model.keep_prefix(a + c + d) == len(a + c)
        model.decode(d)  # llama.cpp refuses a batch whose positions do not follow the cache's
        assert llama_cpp.llama_memory_seq_pos_max(model._mem, 0) == len(a + c + d) - 1
        shifted = np.array(model.logits(-1))
        model.clear()
        model.decode(a + c + d)
        fresh = np.array(model.logits(-1))
    cosine = float(shifted @ fresh / (np.linalg.norm(shifted) * np.linalg.norm(fresh)))
    print(f"cosine {cosine:.4f}, top token {int(shifted.argmax())} vs {int(fresh.argmax())}")
    assert cosine > 0.9  # keys left at their old positions (no re-rotation) would give another distribution
