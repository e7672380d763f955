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
    The rows are the ones a decode of everything would give, in chunks or not, and asking for more rows
    than the context reserved is a LlamaError: llama.cpp itself would abort the whole app (GGML_ASSERT)."""
    import numpy as np

    from specchat.engine.runtime import LlamaError

    with LoadedModel(smollm, ModelOptions(n_ctx=512, n_batch=32, n_ubatch=32, n_threads=2), n_outputs=8) as model:
        prompt = model.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n" * 3, add_special=True)
        assert len(prompt) > 40  # more than one n_batch chunk
        model.decode(prompt[:16], logits="none")
        model.decode(prompt[16:24], logits="all")
        whole = [model.logits(i).copy() for i in range(-8, 0)]
        model.clear()
        model.decode(prompt[:24], logits=8)  # one chunk
        assert all(np.allclose(model.logits(i - 8), row, atol=1e-3) for i, row in enumerate(whole))
        model.clear()
        model.decode(prompt, logits=8)  # the final chunk starts early enough to hold all eight rows
        tail = [int(np.argmax(model.logits(i))) for i in range(-8, 0)]
        model.clear()
        for n in range(len(prompt) - 8, len(prompt)):  # one token at a time, as plain decoding goes
            model.decode(prompt[: n + 1] if n == len(prompt) - 8 else [prompt[n]], logits="last")
            assert int(np.argmax(model.logits(-1))) == tail[n - (len(prompt) - 8)]
        model.clear()
        with pytest.raises(LlamaError, match="at once"):
            model.decode(prompt[:20], logits=9)
        assert model.tokens == []  # nothing was decoded
        model.decode(prompt[:20], logits="last")  # and the model goes on
        assert model.logits(-1).shape == (model.n_vocab,)
