"""The llama.cpp layer: loading can be given up part-way and leaves nothing behind."""

import pytest

from specchat.engine.runtime import LoadCancelled, LoadedModel, ModelOptions

pytestmark = pytest.mark.real_models


def test_a_load_cancelled_part_way_stops_and_the_file_loads_again(smollm):
    polls = []

    def cancelled() -> bool:  # a few tensors in, the user picks another pair
        polls.append(1)
        return len(polls) > 5

    with pytest.raises(LoadCancelled, match="loading was cancelled"):
        LoadedModel(smollm, ModelOptions(n_ctx=256), cancelled=cancelled)
    assert len(polls) < 20  # it stopped at once, not after reading every tensor

    with LoadedModel(smollm, ModelOptions(n_ctx=256), cancelled=lambda: False) as model:
        model.decode(model.tokenize("Hello", add_special=True))
        assert model.logits(-1).shape == (model.n_vocab,)


def test_a_decode_on_fewer_threads_computes_the_very_same_logits(qwen_draft):
    """The decode threads are fitted to the machine mid-answer (engine/threads.py): that is only sound if
    the count changes how fast llama.cpp computes, never what."""
    import numpy as np

    with LoadedModel(qwen_draft, ModelOptions(n_ctx=256, n_gpu_layers=0, n_threads=2)) as model:
        prompt = model.tokenize("def fibonacci(n):\n    return", add_special=True)
        rows = {}
        for threads in (2, 1):
            model.set_threads(threads)
            assert model.threads_now == threads
            model.clear()
            model.decode(prompt, logits="all")
            rows[threads] = np.stack([model.logits(i).copy() for i in range(len(prompt))])
        assert np.array_equal(rows[2], rows[1])
        model.set_threads(8)  # never more than it was loaded with
        assert model.threads_now == 2


def test_rows_of_logits_for_the_prompts_last_tokens_and_a_clear_error_past_what_the_context_holds(smollm):
    """auto reads both models' choices at the prompt's last positions (engine/generate.py: prompt_agreement).
    The rows are the positions a decode of everything would give, in chunks or not, and asking for more rows
    than the context reserved is a LlamaError: llama.cpp itself would abort the whole app (GGML_ASSERT).

    Rows computed in batches of another shape may differ by float noise (another kernel on another CPU);
    a row of the wrong position differs by several units (about 10 on this prompt)."""
    import numpy as np

    from specchat.engine.runtime import LlamaError

    def same(row: np.ndarray, ref: np.ndarray) -> bool:
        return float(np.abs(row - ref).max()) < 0.5

    with LoadedModel(smollm, ModelOptions(n_ctx=512, n_batch=32, n_ubatch=32, n_threads=2), n_outputs=8) as model:
        prompt = model.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n" * 3, add_special=True)
        assert len(prompt) > 37
        prompt = prompt[:37]  # chunks of 32 and 5 tokens: the 5 alone cannot hold eight rows
        model.decode(prompt[:16], logits="none")
        model.decode(prompt[16:24], logits="all")
        whole = [model.logits(i).copy() for i in range(-8, 0)]
        model.clear()
        model.decode(prompt[:24], logits=8)  # one chunk
        assert all(same(model.logits(i - 8), row) for i, row in enumerate(whole))
        assert not same(model.logits(-1), whole[-2])  # (a neighbour's row is told apart)
        model.clear()
        model.decode(prompt, logits=8)  # the final chunk starts early enough to hold all eight rows
        tail = [model.logits(i).copy() for i in range(-8, 0)]
        model.clear()
        model.decode(prompt[: len(prompt) - 7], logits="last")
        for n in range(len(prompt) - 7, len(prompt) + 1):  # then one token at a time, as plain decoding goes
            assert same(model.logits(-1), tail[n - (len(prompt) - 7)])
            if n < len(prompt):
                model.decode([prompt[n]], logits="last")
        model.clear()
        with pytest.raises(LlamaError, match="at once"):
            model.decode(prompt[:20], logits=9)
        assert model.tokens == []  # nothing was decoded
        model.decode(prompt[:20], logits="last")  # and the model goes on
        assert model.logits(-1).shape == (model.n_vocab,)
