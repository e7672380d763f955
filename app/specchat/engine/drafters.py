"""Drafters propose the next tokens; the target verifies them in one batch.

``ModelDrafter``: a small model with the same tokenizer, greedy, its KV cache
kept across rounds (only the tokens it has not seen are decoded), stopping
early when its top probability drops below ``p_min``.

``PromptLookupDrafter``: n-gram matches in the prompt and the answer so far
(llama-cpp-python's ``LlamaPromptLookupDecoding``); no second model, no cost
worth mentioning, and very good on code edits and quoted text.
"""

from __future__ import annotations

import time

import numpy as np
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from .runtime import LoadedModel
from .sampling import greedy_choice
from .settings import Drafter


class ModelDrafter:
    name = Drafter.MODEL

    def __init__(self, model: LoadedModel, target_n_vocab: int, p_min: float) -> None:
        self.model = model
        self.target_n_vocab = target_n_vocab
        self.p_min = p_min
        self.last_seconds = 0.0  # time spent in the last propose()
        self.last_catch_up = 0  # tokens the draft had to catch up on in the last propose()

    def prefill(self, context: list[int]) -> None:
        """Put ``context`` into the draft's KV cache (no logits), reusing what is there."""
        keep = self.model.keep_prefix(context)
        self.model.decode(context[keep:], logits="none")

    def propose(self, context: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens following ``context`` (all committed tokens, the last one included)."""
        t0 = time.perf_counter()
        m = self.model
        # decode what the draft has not seen (at least the last token, for its logits)
        keep = min(m.keep_prefix(context), len(context) - 1)
        m.trim(keep)
        self.last_catch_up = len(context) - keep - 1
        m.decode(context[keep:], logits="last")
        out: list[int] = []
        while True:
            tok, p = greedy_choice(m.logits(-1))
            if p < self.p_min or tok >= self.target_n_vocab:
                break
            out.append(tok)
            if len(out) >= k or len(m.tokens) + 1 >= m.n_ctx:
                break
            m.decode([tok], logits="last")
        self.last_seconds = time.perf_counter() - t0
        return out


class PromptLookupDrafter:
    name = Drafter.LOOKUP

    def __init__(self, max_ngram: int, k_max: int) -> None:
        self._lookup = LlamaPromptLookupDecoding(max_ngram_size=max_ngram, num_pred_tokens=k_max)
        self._buf = np.zeros(1024, dtype=np.intc)
        self._n = 0
        self.last_seconds = 0.0

    def propose(self, context: list[int], k: int) -> list[int]:
        t0 = time.perf_counter()
        ids = self._history(context)
        out = self._lookup(ids)[:k].tolist() if len(ids) > 1 else []
        self.last_seconds = time.perf_counter() - t0
        return out

    def reset(self) -> None:
        """Forget the history; call at the start of every answer."""
        self._n = 0

    def _history(self, context: list[int]) -> np.ndarray:
        """``context`` as an intc array; within one answer the context only grows, so append."""
        n = len(context)
        if n < self._n:
            self._n = 0
        if n > len(self._buf):
            grown = np.zeros(max(n, 2 * len(self._buf)), dtype=np.intc)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n : n] = context[self._n : n]
        self._n = n
        return self._buf[:n]
