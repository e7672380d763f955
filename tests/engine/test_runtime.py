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
