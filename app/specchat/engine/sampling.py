"""The target's sampler, and the draft's greedy choice.

The target samples through llama.cpp's own sampler chain (penalties, top-k,
top-p, min-p, temperature, seeded dist), so speculative and plain decoding draw
from exactly the same distribution.  ``llama_sampler_sample`` samples *and*
accepts; since speculative decoding here only ever samples tokens it then
emits, stateful samplers (repeat penalty) see the same history as in plain
decoding.  Greedy decoding without penalties takes a numpy argmax instead (same
result, a fraction of the cost on a 150k vocabulary).
"""

from __future__ import annotations

import llama_cpp
import numpy as np

from .runtime import LoadedModel
from .settings import SamplingSettings


class TargetSampler:
    def __init__(self, model: LoadedModel, settings: SamplingSettings) -> None:
        settings.validate()
        self.model = model
        self.settings = settings
        self._chain = None
        self.fast_greedy = settings.greedy and settings.repeat_penalty == 1.0
        if not self.fast_greedy:
            self._chain = self._build_chain(settings)

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
        if self.fast_greedy:
            return int(self.model.logits(row).argmax())
        return int(llama_cpp.llama_sampler_sample(self._chain, self.model.ctx, row))

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self) -> None:  # samplers are small, but do not leak them
        self.close()


# Logits more than this far below the top add at most exp(-15) = 3.1e-7 each to the softmax
# denominator; on real rows (SmolLM2, Qwen2.5 0.5B, measured) a median of 10-440 of 49k-152k lie
# above it, so the denominator's exact part is a few hundred exps instead of a whole vocabulary.
_NEAR = 15.0
_FAR_TERM = float(np.exp(-_NEAR))


def greedy_choice(logits: np.ndarray, p_min: float) -> tuple[int, bool]:
    """The draft's argmax, and whether its softmax probability is at least ``p_min``.

    p(top) = 1 / S with S = sum(exp(x - x_top)), so p >= p_min is S <= 1 / p_min.  S is
    summed exactly over the logits within ``_NEAR`` of the top; the rest add between 0 and
    ``n_far * exp(-_NEAR)``.  Only when that band straddles 1 / p_min (rare) is the whole
    vocabulary summed.  A row with a NaN, or with nothing above -inf, is never confident; a
    +inf top shares its probability with the other +inf logits.
    """
    top = int(logits.argmax())
    x_top = float(logits[top])
    if p_min <= 0.0:
        return top, True
    if not np.isfinite(x_top):
        if x_top != np.inf:  # NaN (argmax stops at the first one) or a row of -inf
            return top, False
        return top, 1.0 / int(np.count_nonzero(logits == np.inf)) >= p_min
    limit = 1.0 / p_min
    near = logits[logits >= x_top - _NEAR]
    s = float(np.exp(near - x_top).sum(dtype=np.float64))
    if s > limit:
        return top, False
    if s + (len(logits) - len(near)) * _FAR_TERM <= limit:
        return top, True
    s = float(np.exp(logits - x_top).sum(dtype=np.float64))
    return top, s <= limit
