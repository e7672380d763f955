"""A long chat past a 512-token context on a real model whose template insists on alternating roles
(Gemma 3: it raises on two user turns in a row): the policies leave out whole turns, the template keeps
rendering, every answer fits, and the kept start comes from llama.cpp's KV cache."""

from __future__ import annotations

import pytest

from specchat.backends.local import LocalBackend
from specchat.context_policy import ContextPolicy, reserve
from specchat.engine import Done, Mode, StopReason, TokensEmitted
from specchat.engine.answer import AnswerRequest, Started
from specchat.engine.pair import CancelToken, PairConfig, SpeculativePair
from specchat.engine.runtime import ModelOptions
from specchat.engine.settings import SamplingSettings

N_CTX, MAX_TOKENS, TURNS = 512, 32, 10


@pytest.mark.parametrize("policy", [ContextPolicy.TRUNCATE_MIDDLE, ContextPolicy.ROLLING_WINDOW])
def test_a_long_chat_keeps_answering_on_a_real_model(gemma, tmp_path, policy):
    cfg = PairConfig(gemma, None, ModelOptions(n_ctx=N_CTX), calibration_cache=tmp_path / "c.json")
    with SpeculativePair(cfg) as pair:
        backend = LocalBackend(pair)
        messages = [{"role": "system", "content": "Answer in one short sentence."}]
        left_out = []
        for i in range(TURNS):
            messages.append({"role": "user", "content": f"Question {i}: name a fruit and a colour, please."})
            request = AnswerRequest(tuple(messages), mode=Mode.BASELINE, sampling=SamplingSettings(temperature=0.0),
                                    max_tokens=MAX_TOKENS, context_policy=policy)
            events = list(backend.answer(request, CancelToken()))
            started, done = events[0], events[-1]
            assert isinstance(started, Started) and isinstance(done, Done)
            assert done.stop_reason in (StopReason.EOG, StopReason.MAX_TOKENS), done.message
            assert started.prompt_tokens <= N_CTX - reserve(N_CTX, MAX_TOKENS)
            if i:
                assert done.stats.counts.reused_tokens > 0  # the kept start was not prefilled again
            left_out.append(started.left_out)
            text = "".join(e.answer for e in events if isinstance(e, TokensEmitted))
            messages.append({"role": "assistant", "content": text or "ok"})
        assert left_out[0] == 0 and left_out[-1] > 0 and all(n % 2 == 0 for n in left_out)
