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
            return int(np.argmax(self.model.logits(row)))
        return int(llama_cpp.llama_sampler_sample(self._chain, self.model.ctx, row))

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self) -> None:  # samplers are small, but do not leak them
        self.close()


def greedy_choice(logits: np.ndarray) -> tuple[int, float]:
    """The draft's argmax and its softmax probability."""
    top = int(np.argmax(logits))
    # p(top) = 1 / sum(exp(x - x_top)); float32 is plenty for a threshold check
    z = np.exp(logits - logits[top], dtype=np.float32)
    return top, float(1.0 / z.sum())
