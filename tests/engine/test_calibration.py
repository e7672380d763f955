"""Calibration runs once per machine and model file; later loads read the cache."""

import json

import pytest

from specchat.engine import calibration
from specchat.engine.runtime import LoadCancelled, LoadedModel, ModelOptions

pytestmark = pytest.mark.real_models


def test_costs_are_measured_once_then_cached(smollm, tmp_path, monkeypatch):
    cache = tmp_path / "calibration.json"
    with LoadedModel(smollm, ModelOptions(n_ctx=256), n_outputs=16) as target:
        first = calibration.calibrate(target, None, 4, cache)
        assert set(first.verify_s) == {1, 2, 3, 5}
        assert all(v > 0 for v in first.verify_s.values())

        def no_measuring(*a, **k):
            raise AssertionError("measured again despite a cached calibration")

        monkeypatch.setattr(calibration, "measure", no_measuring)
        again = calibration.calibrate(target, None, 4, cache)
        assert again.verify_s == first.verify_s
        # the KV cache is left empty for the real work
        assert target.tokens == []


def test_a_changed_model_file_is_measured_again(smollm, tmp_path):
    cache = tmp_path / "calibration.json"
    copy = tmp_path / "model.gguf"
    copy.write_bytes(smollm.read_bytes())
    with LoadedModel(copy, ModelOptions(n_ctx=256), n_outputs=16) as target:
        calibration.calibrate(target, None, 2, cache)
        key_count = len(json.loads(cache.read_text()))
        copy.touch()  # new mtime: a different file as far as the cache knows
        calibration.calibrate(target, None, 2, cache)
        assert len(json.loads(cache.read_text())) == key_count + 1


def test_calibration_gives_up_between_decodes_when_cancelled(smollm, tmp_path):
    cache = tmp_path / "calibration.json"
    polls = []

    def cancelled() -> bool:  # allow three decodes, then the user closes the app
        polls.append(1)
        return len(polls) > 3

    with LoadedModel(smollm, ModelOptions(n_ctx=256), n_outputs=16) as target:
        with pytest.raises(LoadCancelled):
            calibration.calibrate(target, None, 4, cache, cancelled)
        assert len(polls) == 4  # it stopped at the first check after the cancel
        assert not cache.exists()  # a half calibration is never cached
        # the model stays usable: the next calibration measures from scratch
        assert set(calibration.calibrate(target, None, 4, cache).verify_s) == {1, 2, 3, 5}
