"""Drafters propose the next tokens; the target verifies them in one batch.

``ModelDrafter``: a small model with the same tokenizer, greedy, its KV cache
kept across rounds (only the tokens it has not seen are decoded), stopping
early when its top probability drops below ``p_min``.

``PromptLookupDrafter``: n-gram matches in the prompt and the answer so far
(the proposals of llama-cpp-python's ``LlamaPromptLookupDecoding``, from an
incremental index); no second model, no cost worth mentioning, and very good
on code edits and quoted text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .runtime import LoadedModel
from .sampling import greedy_choice
from .settings import Drafter
from .shapes import CATCH_UP_ONE_BY_ONE

MATCH_CAP = 32  # prompt lookup measures a match's length up to this many tokens


class ModelDrafter:
    name = Drafter.MODEL

    def __init__(self, model: LoadedModel, target_n_vocab: int, p_min: float) -> None:
        self.model = model
        self.target_n_vocab = target_n_vocab
        self.p_min = p_min
        self.last_seconds = 0.0  # time spent in the last propose()
        self.last_catch_up = 0  # tokens the draft had to catch up on in the last propose()
        self.last_decoded = 0  # tokens the draft decoded in the last propose() (catch-up and drafting)

    def prefill(self, context: list[int]) -> None:
        """Put ``context`` into the draft's KV cache (no logits), reusing what is there."""
        keep = self.model.keep_prefix(context)
        self.model.decode(context[keep:], logits="none")

    def propose(self, context: list[int], k: int, p_min: float | None = None) -> list[int]:
        """Up to ``k`` tokens following ``context`` (all committed tokens, the last one included),
        stopping before a token the draft is less sure of than ``p_min`` (None: the drafter's own)."""
        floor = self.p_min if p_min is None else p_min
        t0 = time.perf_counter()
        m = self.model
        # decode what the draft has not seen (at least the last token, for its logits)
        keep = min(m.keep_prefix(context), len(context) - 1)
        m.trim(keep)
        self.last_catch_up = len(context) - keep - 1
        todo = context[keep:]
        decoded = len(todo)
        if m.shape_sensitive and 1 < len(todo) <= CATCH_UP_ONE_BY_ONE:
            # every draft decode a 1-token decode: a batch between the steps re-captures (shapes.py)
            for tok in todo[:-1]:
                m.decode([tok], logits="none")
            todo = todo[-1:]
        m.decode(todo, logits="last")
        out: list[int] = []
        while True:
            tok, confident = greedy_choice(m.logits(-1), floor)
            if not confident or tok >= self.target_n_vocab:
                break
            out.append(tok)
            if len(out) >= k or len(m.tokens) + 1 >= m.n_ctx:
                break
            m.decode([tok], logits="last")
            decoded += 1
        self.last_seconds = time.perf_counter() - t0
        self.last_decoded = decoded
        return out


class PromptLookupDrafter:
    """Prompt lookup: the tokens that followed the earliest earlier occurrence of the longest
    n-gram (``max_ngram`` down to 1) the context ends with.

    The same proposals as llama-cpp-python's ``LlamaPromptLookupDecoding``, which scans the
    whole history with numpy on every round: 0.2 ms a round at 600 tokens on the proxy
    (scripts/measure_overhead.py), growing with the context.  Here an index of every n-gram's
    first position is brought up to date with the tokens added since the last round, and a
    round costs ``max_ngram`` dict look-ups.  The index holds ``max_ngram`` entries per token
    of the answer's context, and is dropped by :meth:`reset` at the start of every answer.
    Measured on this project's 2-core CPU (random tokens, 4,096 of context, 1-4 added a round):
    4 us a round (median; 16 us at the 95th percentile); indexing the 4,096-token prompt takes
    14 ms, which :meth:`index` lets the engine do while the target's prefill runs.

    :attr:`last_match` is how many tokens the context's tail agrees with the place the proposal
    is copied from (up to :data:`MATCH_CAP`): the evidence that this is a copy.  On the builtin
    suite's Qwen trace, proposals behind a 1-token match were accepted for 0.3-0.9 tokens on
    average, behind 8 or more on an edit or a summary for 8.5 of 16.
    """

    name = Drafter.LOOKUP

    def __init__(self, max_ngram: int, k_max: int) -> None:
        self.max_ngram = max(1, max_ngram)
        self.k_max = k_max
        self.last_seconds = 0.0
        self.last_match = 0  # tokens of agreement behind the last proposal (0: none)
        self._tokens: list[int] = []
        self._first: list[dict[tuple[int, ...], int]] = []  # [n - 1]: n-gram -> where it first starts
        self.reset()

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        t0 = time.perf_counter()
        self._extend(context)
        out = self._match(min(k, self.k_max))
        self.last_seconds = time.perf_counter() - t0
        return out

    def index(self, context: Sequence[int]) -> None:
        """Bring the index up to ``context`` without proposing (the prompt, during its prefill)."""
        self._extend(context)

    def reset(self) -> None:
        """Forget the history; call at the start of every answer."""
        self._tokens = []
        self._first = [{} for _ in range(self.max_ngram)]
        self.last_match = 0

    def _extend(self, context: Sequence[int]) -> None:
        """Index the n-grams ending in the tokens ``context`` adds to the history seen so far.

        Within an answer the context only grows; one that is shorter, or that does not continue
        the history at its last token, starts the index over.
        """
        toks = self._tokens
        seen = len(toks)
        if len(context) < seen or (seen and context[seen - 1] != toks[-1]):
            self.reset()
            toks, seen = self._tokens, 0
        toks.extend(context[seen:])
        first = self._first
        for end in range(seen + 1, len(toks) + 1):
            for n in range(1, min(self.max_ngram, end) + 1):
                first[n - 1].setdefault(tuple(toks[end - n : end]), end - n)

    def _match(self, k: int) -> list[int]:
        toks = self._tokens
        size = len(toks)
        self.last_match = 0
        for n in range(min(self.max_ngram, size - 1), 0, -1):
            at = self._first[n - 1].get(tuple(toks[size - n :]))
            # the earliest occurrence; when that is the context's own tail, there is no other
            if at is not None and at + n < size:
                agree = n  # how far back the two places agree: at most MATCH_CAP comparisons
                while agree < MATCH_CAP and at - (agree - n) > 0 and toks[at + n - agree - 1] == toks[size - agree - 1]:
                    agree += 1
                self.last_match = agree
                return toks[at + n : at + n + k]
        return []
