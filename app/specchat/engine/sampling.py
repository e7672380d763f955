"""The target's sampler, and the draft's greedy choice.

The target samples through llama.cpp's own sampler chain (penalties, top-k,
top-p, min-p, temperature, seeded dist), so speculative and plain decoding draw
from exactly the same distribution.  ``llama_sampler_sample`` samples *and*
accepts; since speculative decoding here only ever samples tokens it then
emits, stateful samplers (repeat penalty) see the same history as in plain
decoding.  Greedy decoding without penalties takes a numpy argmax instead (same
result, a fraction of the cost on a 150k vocabulary).

Under a JSON schema or grammar (``settings.structured``) the grammar sampler of
:mod:`specchat.engine.grammar` masks each row before the chain chooses, and advances
only over the token chosen.  Lossless under speculation for the same reason as the
chain: ``sample_and_match`` samples row i only for a token it then emits, so the
grammar advances exactly along the emitted tokens, and a rejected draft token was
never accepted into its state (nothing to restore).  A draft token the grammar
forbids can never equal the target's constrained sample, so it is simply rejected.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import llama_cpp
import numpy as np

from .grammar import TOKEN_DATA, Grammar
from .runtime import LoadedModel
from .settings import SamplingSettings


class TargetSampler:
    def __init__(self, model: LoadedModel, settings: SamplingSettings, cancelled: Callable[[], bool] | None = None) -> None:
        """Raises :class:`~specchat.engine.settings.GrammarError` for a schema or grammar
        llama.cpp cannot use with this model (``cancelled()``: the answer's stop, which ends the
        grammar's check at once)."""
        settings.validate()
        self.model = model
        self.settings = settings
        self._chain = None
        self.grammar: Grammar | None = None
        self.fast_greedy = settings.greedy and settings.repeat_penalty == 1.0
        if not self.fast_greedy:
            self._chain = self._build_chain(settings)
        if settings.structured.active:
            self.grammar = Grammar.build(model, settings.structured, cancelled)
            # one row of candidates, reused: (id, logit, p) as llama_token_data, and its C view
            self._cand = np.zeros(model.n_vocab, dtype=TOKEN_DATA)
            self._ids = np.arange(model.n_vocab, dtype=np.int32)
            self._cand_c = llama_cpp.llama_token_data_array(
                self._cand.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), model.n_vocab, -1, False)

    def _build_chain(self, s: SamplingSettings):
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = llama_cpp.llama_sampler_chain_add
        if s.repeat_penalty != 1.0:
            add(chain, llama_cpp.llama_sampler_init_penalties(self.model.n_vocab, s.repeat_last_n, s.repeat_penalty, 0.0, 0.0))
        if s.greedy:
            add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        if s.top_k > 0:
            add(chain, llama_cpp.llama_sampler_init_top_k(s.top_k))
        if s.top_p < 1.0:
            add(chain, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
        if s.min_p > 0.0:
            add(chain, llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
        add(chain, llama_cpp.llama_sampler_init_temp(s.temperature))
        add(chain, llama_cpp.llama_sampler_init_dist(s.seed & 0xFFFFFFFF))
        return chain

    def sample(self, row: int) -> int:
        """Sample (and accept) the token for batch row ``row`` of the last target decode."""
        if self.grammar is not None:
            return self._sample_constrained(row)
        if self.fast_greedy:
            return int(self.model.logits(row).argmax())
        return int(llama_cpp.llama_sampler_sample(self._chain, self.model.ctx, row))

    def allowed_prefix(self, drafted: list[int]) -> list[int]:
        """The start of a draft the grammar allows (all of it without a grammar): a token it forbids
        would be rejected anyway, so verifying it and what follows is wasted."""
        return drafted if self.grammar is None else self.grammar.prefix(drafted)

    def _sample_constrained(self, row: int) -> int:
        """The chain's choice among the tokens the grammar allows; raises ``GrammarError`` when
        it allows none.

        Greedy checks the unconstrained choice first and masks the whole row only when the
        grammar refuses it (llama.cpp's common_sampler does the same): the argmax of a row is
        the argmax of its allowed tokens whenever it is allowed, so this is exact.  Measured on
        Qwen2.5-Coder 1.5B (152k vocabulary) answering the JSON prompts under their schemas:
        masking every row costs ~11 ms a token, checking first ~0.1 ms when the model follows
        the grammar (most tokens).  Sampling masks first: checking a sample first would change
        the distribution after top-k/top-p truncation.
        """
        grammar = self.grammar
        assert grammar is not None
        logits = self.model.logits(row)
        if self.settings.greedy:
            tok = int(logits.argmax()) if self._chain is None else self._chain_choice(logits)
            if grammar.allows(tok):
                self._accept(tok)
                return tok
        cand, c = self._fill(logits)
        grammar.mask(c)
        if not (cand["logit"] > -np.inf).any():
            raise grammar.dead_end()
        if self._chain is None:
            tok = int(cand["id"][int(cand["logit"].argmax())])
        else:
            llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(c))
            tok = int(cand["id"][c.selected])
        self._accept(tok)
        return tok

    def _fill(self, logits: np.ndarray) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
        cand, c = self._cand, self._cand_c
        cand["id"] = self._ids  # the chain sorts and truncates in place: refill every row
        cand["logit"] = logits
        cand["p"] = 0.0
        c.size, c.selected, c.sorted = len(cand), -1, False
        return cand, c

    def _chain_choice(self, logits: np.ndarray) -> int:
        """What the chain picks from the whole row (applying it changes no state)."""
        cand, c = self._fill(logits)
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(c))
        return int(cand["id"][c.selected])

    def _accept(self, tok: int) -> None:
        """Advance the grammar and the chain's state (repeat penalty history, RNG) over ``tok``."""
        assert self.grammar is not None
        self.grammar.accept(tok)
        if self._chain is not None:
            llama_cpp.llama_sampler_accept(self._chain, tok)

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if self.grammar is not None:
            self.grammar.close()
            self.grammar = None

    def __del__(self) -> None:  # samplers are small, but do not leak them
        self.close()


# Logits more than this far below the top add at most exp(-15) = 3.1e-7 each to the softmax
# denominator; on real rows (SmolLM2, Qwen2.5 0.5B, measured) a median of 10-440 of 49k-152k lie
# above it, so the denominator's exact part is a few hundred exps instead of a whole vocabulary.
_NEAR = 15.0
_FAR_TERM = float(np.exp(-_NEAR))


def last_choices(model: LoadedModel, rows: int, n_vocab: int | None = None) -> tuple[int, ...]:
    """The greedy token of each of the last ``rows`` logits rows of the model's last decode, oldest first
    (over the first ``n_vocab`` entries where given: a draft's tokens past its target's vocabulary are never
    the target's)."""
    return tuple(int(np.argmax(model.logits(i)[:n_vocab])) for i in range(-rows, 0))


def greedy_choice(logits: np.ndarray, p_min: float) -> tuple[int, bool]:
    """The draft's argmax, and whether its softmax probability is at least ``p_min``.

    p(top) = 1 / S with S = sum(exp(x - x_top)), so p >= p_min is S <= 1 / p_min.  S is
    summed exactly over the logits within ``_NEAR`` of the top; the rest add between 0 and
    ``n_far * exp(-_NEAR)``.  Only when that band straddles 1 / p_min (rare) is the whole
    vocabulary summed.  A row with a NaN, or with nothing above -inf, is never confident; a
    +inf top shares its probability with the other +inf logits.
    """
    top, (confident,) = greedy_choices(logits, (p_min,))
    return top, confident


def greedy_choices(logits: np.ndarray, p_mins: tuple[float, ...]) -> tuple[int, tuple[bool, ...]]:
    """:func:`greedy_choice` against several thresholds for the price of one (the softmax's sum once)."""
    top = int(logits.argmax())
    x_top = float(logits[top])
    if all(p <= 0.0 for p in p_mins):
        return top, (True,) * len(p_mins)
    if not np.isfinite(x_top):
        if x_top != np.inf:  # NaN (argmax stops at the first one) or a row of -inf
            return top, tuple(p <= 0.0 for p in p_mins)
        share = 1.0 / int(np.count_nonzero(logits == np.inf))
        return top, tuple(p <= 0.0 or share >= p for p in p_mins)
    near = logits[logits >= x_top - _NEAR]
    s = float(np.exp(near - x_top).sum(dtype=np.float64))
    far = (len(logits) - len(near)) * _FAR_TERM
    whole: float | None = None
    out = []
    for p in p_mins:
        limit = 1.0 / p if p > 0.0 else np.inf
        if s > limit or s + far <= limit:
            out.append(s + far <= limit)
            continue
        if whole is None:
            whole = float(np.exp(logits - x_top).sum(dtype=np.float64))
        out.append(whole <= limit)
    return top, tuple(out)
