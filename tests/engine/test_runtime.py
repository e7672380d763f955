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
