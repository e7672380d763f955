"""Calibration runs once per machine and model file; later loads read the cache.

The cache is a cache: whatever shape it has on disk, a load measures again rather than fail.
"""

import json
import math

import pytest

from helpers.fakes import FakeModel, FakeSpec
from specchat.engine import calibration
from specchat.engine.runtime import LoadCancelled, LoadedModel, ModelOptions


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


# -- the cache file, whatever is in it (a fake model: no model files needed) -----------------


@pytest.fixture
def fake(tmp_path) -> FakeModel:
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"the cache keys on the file's size and mtime")
    return FakeModel(path, FakeSpec(decode_s=0.0005))


@pytest.fixture
def measured(monkeypatch) -> list[int]:
    """Counts the measurements calibrate() makes (the real measure() runs)."""
    calls: list[int] = []
    real = calibration.measure

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibration, "measure", counting)
    return calls


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "specchat" and r.levelname == "WARNING"]


def test_a_fake_setup_is_measured_once_then_read_from_the_cache(fake, tmp_path, measured):
    cache = tmp_path / "calibration.json"
    first = calibration.calibrate(fake, None, 4, cache)
    again = calibration.calibrate(fake, None, 4, cache)
    assert len(measured) == 1 and again.verify_s == first.verify_s and set(first.verify_s) == {1, 2, 3, 5}
    calibration.calibrate(fake, None, 8, cache)  # K 8 needs a batch of 9, never measured
    assert len(measured) == 2


def good_entry() -> dict:
    return {"verify_s": {"1": 0.01, "2": 0.011, "3": 0.012, "5": 0.014}, "draft_s": {"lookup": 0.0}, "measured": 1.0}


BAD_ENTRIES = {
    "text for the sizes": {"verify_s": "x", "draft_s": {}},
    "a list": [1, 2],
    "NaN as text": {"verify_s": {"1": "NaN", "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "NaN": {"verify_s": {"1": math.nan, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "infinity": {"verify_s": {"1": math.inf, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "a negative cost": {"verify_s": {"1": -0.01, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "a zero cost": {"verify_s": {"1": 0, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "a huge int": {"verify_s": {"1": 10**400, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "true for a cost": {"verify_s": {"1": True, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "a size that is not a number": {"verify_s": {"one": 0.1, "1": 0.1, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "a size of 0": {"verify_s": {"0": 0.1, "1": 0.1, "2": 0.1, "3": 0.1, "5": 0.1}, "draft_s": {}},
    "a free draft model": {**good_entry(), "draft_s": {"model": 0.0}},
    "a negative draft cost": {**good_entry(), "draft_s": {"lookup": -1}},
    "no draft costs": {"verify_s": good_entry()["verify_s"]},
    "a size missing": {**good_entry(), "verify_s": {"1": 0.01}},
}


@pytest.mark.parametrize("what", list(BAD_ENTRIES))
def test_an_entry_of_the_wrong_shape_is_measured_again_and_replaced(fake, tmp_path, measured, caplog, what):
    cache = tmp_path / "calibration.json"
    key = calibration.cache_key(fake, None)
    # json.dumps writes NaN and Infinity, which json.loads reads back: such a file is possible
    cache.write_text(json.dumps({key: BAD_ENTRIES[what], "other": good_entry()}))
    costs = calibration.calibrate(fake, None, 4, cache)
    assert len(measured) == 1 and all(0 < v < 1 for v in costs.verify_s.values())
    doc = json.loads(cache.read_text())
    assert doc["other"] == good_entry()  # another setup's good entry is kept
    assert calibration.entry_costs(doc[key], 4) is not None
    assert warnings_of(caplog) == [] and list(tmp_path.glob("*.corrupt-*")) == []  # the file was fine
    calibration.calibrate(fake, None, 4, cache)
    assert len(measured) == 1


DAMAGED_FILES = {
    "a list": b"[1, 2, 3]",
    "text": b'"calibration"',
    "not JSON": b'{"abc": {"verify_s": ',
    "not UTF-8": b'{"caf\xe9": {}}',
    "nested too deeply": b"[" * 100_000,
    "empty": b"",
}


@pytest.mark.parametrize("what", list(DAMAGED_FILES))
def test_a_damaged_cache_is_moved_aside_with_one_warning_and_measured_again(fake, tmp_path, measured, caplog, what):
    cache = tmp_path / "calibration.json"
    cache.write_bytes(DAMAGED_FILES[what])
    calibration.calibrate(fake, None, 4, cache)
    [aside] = tmp_path.glob("calibration.json.corrupt-*")
    assert aside.read_bytes() == DAMAGED_FILES[what]
    [message] = warnings_of(caplog)
    assert message.startswith(f"{cache}: damaged calibration cache (") and str(aside) in message
    assert list(json.loads(cache.read_text())) == [calibration.cache_key(fake, None)]
    calibration.calibrate(fake, None, 4, cache)
    assert len(measured) == 1 and len(warnings_of(caplog)) == 1


def test_a_cache_that_cannot_be_read_or_written_costs_only_a_measurement(fake, tmp_path, measured):
    cache = tmp_path / "calibration.json"
    cache.mkdir()  # a directory where the file should be
    calibration.calibrate(fake, None, 4, cache)
    calibration.calibrate(fake, None, 4, cache)
    assert len(measured) == 2 and cache.is_dir()


def test_the_cache_keeps_the_newest_entries_only(fake, tmp_path, monkeypatch):
    cache = tmp_path / "calibration.json"
    monkeypatch.setattr(calibration, "MAX_ENTRIES", 3)
    cache.write_text(json.dumps({f"old{i}": {**good_entry(), "measured": float(i)} for i in range(5)}))
    calibration.calibrate(fake, None, 4, cache)
    assert sorted(json.loads(cache.read_text())) == sorted([calibration.cache_key(fake, None), "old4", "old3"])


def test_on_a_shape_sensitive_backend_each_size_is_timed_steady(tmp_path):
    """llama.cpp replays a CUDA graph from a shape's third call: the calibration times each size after
    its first two calls (the kit's cycled curve was the thrashed one) and learns what those cost."""
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"x")
    target = FakeModel(path, FakeSpec(decode_s=0.0005, shape_sensitive=True))
    costs = calibration.calibrate(target, None, 4, None)
    sizes = target.shapes
    for n in (2, 3, 5):
        first = sizes.index(n)
        assert sizes[first:first + 3] == [n, n, n]  # two fresh calls, then at least one steady
    assert costs.recapture_s > 0
    loose = FakeModel(path, FakeSpec(decode_s=0.0005))
    calibration.calibrate(loose, None, 4, None)
    assert loose.shapes.count(5) == 1 and costs.recapture_s > 0  # on a CPU: as before, once
