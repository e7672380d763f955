"""Prompt lookup: the same proposals as llama-cpp-python's scan, from an incremental index."""

from __future__ import annotations

import numpy as np
import pytest
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from specchat.engine.drafters import MATCH_CAP, ModelDrafter, PromptLookupDrafter


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



def test_the_match_length_says_how_far_the_copy_agrees():
    drafter = PromptLookupDrafter(3, k_max=4)
    copy = [9, 1, 2, 3, 4, 5, 7, 8, 0, 1, 2, 3, 4, 5]  # ends with 1 2 3 4 5, which came before 7 8
    assert drafter.propose(copy, 4) == [7, 8, 0, 1]
    assert drafter.last_match == 5  # 1 2 3 4 5 agree; 9 and 0 before them do not
    assert drafter.propose(copy + [8], 4) == [0, 1, 2, 3]  # only the 8 matches now
    assert drafter.last_match == 1
    assert drafter.propose([1, 2, 3], 4) == [] and drafter.last_match == 0  # nothing earlier to copy
    long = list(range(50))
    assert drafter.propose(long + long[:45], 4) == [45, 46, 47, 48]
    assert drafter.last_match == MATCH_CAP  # measured no further than the cap


def test_indexing_the_prompt_ahead_changes_no_proposal():
    rng = np.random.default_rng(7)
    prompt = rng.integers(6, size=300).tolist()
    ahead, plain = PromptLookupDrafter(3, k_max=8), PromptLookupDrafter(3, k_max=8)
    ahead.index(prompt)
    history = list(prompt)
    for _ in range(30):
        assert ahead.propose(history, 8) == plain.propose(history, 8)
        assert ahead.last_match == plain.last_match
        history += rng.integers(6, size=3).tolist()


def _answer(drafter: PromptLookupDrafter, prompt: list[int], answer: list[int]) -> list[list[int]]:
    """One answer as the loop runs it: start, the prompt indexed, a proposal after every token."""
    drafter.start()
    drafter.prefill(prompt)
    return [drafter.propose(prompt + answer[: i + 1], 8) for i in range(len(answer))]


def test_lookup_copies_the_answer_before_when_a_prompt_is_asked_again():
    """Regenerate (or a prompt asked again): the last answer is not in the new context, and llama.cpp's
    ngram-mod drafts it from its memory across requests; prompt lookup does too now."""
    prompt, answer = [1, 2, 3, 4, 5], list(range(100, 160))
    drafter = PromptLookupDrafter(3, k_max=8)
    first = _answer(drafter, prompt, answer)
    assert not any(first[:20])  # nothing in the prompt to copy from
    again = _answer(drafter, prompt, answer)
    assert again[2] == answer[3:11]
    assert all(p == answer[i + 1: i + 9] for i, p in enumerate(again[2:-1], start=2))
    drafter.start()
    assert drafter.propose(prompt + answer[:10], 8) == answer[10:18] and drafter.last_match >= 10  # the evidence
    fresh = PromptLookupDrafter(3, k_max=8)
    assert _answer(fresh, prompt, answer) == first  # the first answer of a drafter is as before


def test_forget_drops_the_earlier_answers_so_a_prompt_asked_again_is_drafted_as_new():
    """The bench's --first-sight: a repeat measured as a first question, not as a copy of the run before."""
    prompt, answer = [1, 2, 3, 4, 5], list(range(100, 160))
    drafter = PromptLookupDrafter(3, k_max=8)
    first = _answer(drafter, prompt, answer)
    drafter.forget()  # before the next answer's start, which would remember the last context
    assert _answer(drafter, prompt, answer) == first
    _answer(drafter, prompt, answer)
    drafter.start()  # remembered ...
    drafter.forget()  # ... and forgotten
    assert _answer(drafter, prompt, answer) == first


def test_the_current_context_wins_over_the_memory_at_equal_length():
    drafter = PromptLookupDrafter(2, k_max=4)
    _answer(drafter, [7, 8], [1, 2, 50, 51, 52, 53])  # remembered: 1 2 -> 50 51 ...
    drafter.start()
    assert drafter.propose([1, 2, 60, 61, 62, 9, 1, 2], 4) == [60, 61, 62, 9]  # the same 2-gram here


def test_the_memory_is_bounded_in_answers_and_tokens():
    from specchat.engine.drafters import PAST_ANSWERS, PAST_TOKENS

    drafter = PromptLookupDrafter(3, k_max=8)
    for i in range(PAST_ANSWERS + 5):
        _answer(drafter, [i, i + 1], list(range(1000 * i, 1000 * i + 50)))
    drafter.start()
    assert len(drafter._past) == PAST_ANSWERS
    long = list(range(PAST_TOKENS + 10))
    _answer(drafter, [1], long[:5])
    drafter.index(long)  # a context longer than the whole budget: kept alone, as the newest
    drafter.start()
    assert len(drafter._past) == 1 and len(drafter._past[0][0]) > PAST_TOKENS


class ScriptedDraft:
    """A draft model whose next token after any context is ``len(context)``, sure (top probability
    about 1) except at the positions in ``unsure``, where its top probability is about 1/3."""

    n_ctx = 4096
    shape_sensitive = True

    def __init__(self, unsure: set[int]) -> None:
        self.unsure = unsure
        self.tokens: list[int] = []

    def keep_prefix(self, tokens: list[int]) -> int:
        n = next((i for i, (a, b) in enumerate(zip(self.tokens, tokens, strict=False)) if a != b),
                 min(len(self.tokens), len(tokens)))
        del self.tokens[n:]
        return n

    def trim(self, n: int) -> None:
        del self.tokens[n:]

    def decode(self, tokens: list[int], *, logits: str | int = "last") -> None:
        self.tokens += tokens

    def logits(self, i: int) -> np.ndarray:
        row = np.full(64, -30.0, dtype=np.float32)
        nxt = len(self.tokens)
        row[nxt] = 0.0
        if nxt in self.unsure:
            row[nxt + 1] = row[nxt + 2] = 0.0  # three ways to go: top probability 1/3
        return row


def test_the_draft_model_sends_the_token_its_stop_declined_where_its_row_is_worth_it():
    """The token the draft's confidence stop declined is already computed: it is sent, undecoded, where
    the plan says its row is worth the draft's confidence at that position (Plan.spare_p)."""
    context = [0, 1, 2, 3]
    unsure_third = {6}  # positions 4 and 5 are sure, the draft's third token is not (1/3 sure)
    drafter = ModelDrafter(ScriptedDraft(unsure_third), target_n_vocab=64, p_min=0.5)  # type: ignore[arg-type]

    assert drafter.propose(context, 4) == [4, 5] and drafter.last_spare == 0  # no spare rows: stops before it
    assert drafter.propose(context, 4, spare_p=(0.0, 0.0)) == [4, 5] and drafter.last_spare == 0  # none there
    assert drafter.propose(context, 4, spare_p=(0.0, 0.0, 0.5)) == [4, 5]  # its row needs it surer than 1/3
    assert drafter.propose(context, 4, spare_p=(0.0, 0.0, 0.3)) == [4, 5, 6] and drafter.last_spare == 1
    assert drafter.model.tokens == [0, 1, 2, 3, 4, 5]  # nothing drafts after it, so it is not decoded
    assert drafter.propose(context, 2, spare_p=(0.0,) * 7) == [4, 5]  # never past the K asked for
