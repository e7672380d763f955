"""A pair's load says how far it is: the weights' share, then the calibration's timed decodes."""

from __future__ import annotations

import pytest

from helpers.fakes import FakeModel, FakeSpec
from specchat.engine import calibration
from specchat.engine.contention import QUIET_WAIT_S
from specchat.engine.pair import PairConfig, SpeculativePair
from specchat.engine.progress import LoadPhase, LoadProgress, Throttle
from specchat.engine.runtime import LoadedModel, ModelOptions


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_throttle_passes_ten_steps_a_second_and_every_new_phase_at_once():
    clock, passed = Clock(), []
    throttle = Throttle(passed.append, clock=clock)
    for i in range(1000):  # llama.cpp calls per tensor: 1000 calls in one second
        throttle(LoadProgress(LoadPhase.TARGET, "t.gguf", i / 1000, 1.0))
        clock.t += 0.001
    assert 9 <= len(passed) <= 11
    assert [p.done for p in passed] == sorted(p.done for p in passed)
    throttle(LoadProgress(LoadPhase.DRAFT, "d.gguf", 0.0, 1.0))  # 1 ms after the last: a new phase still shows
    throttle(LoadProgress(LoadPhase.DRAFT, "d.gguf", 0.01, 1.0))  # ...its next step waits its turn
    assert [p.phase for p in passed[-2:]] == [LoadPhase.TARGET, LoadPhase.DRAFT] and passed[-1].done == 0.0


def test_the_line_says_the_phase_and_how_far():
    assert LoadProgress(LoadPhase.TARGET, "Qwen2.5-7B.gguf", 0.434, 1.0).text == "Loading Qwen2.5-7B.gguf… 43%"
    step = LoadProgress(LoadPhase.CALIBRATING, "the draft", 5, 12)
    assert step.text == "Calibrating the draft: 5 of 12 timed decodes" and step.fraction == pytest.approx(5 / 12)


@pytest.mark.parametrize("shape_sensitive", [False, True])
@pytest.mark.parametrize("with_draft", [False, True])
def test_the_calibration_counts_every_timed_decode_up_to_its_total(tmp_path, shape_sensitive, with_draft):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"x")
    spec = FakeSpec(decode_s=0.0001, shape_sensitive=shape_sensitive)
    target = FakeModel(path, spec)
    draft = FakeModel(path, spec, draft=True) if with_draft else None
    steps: list[tuple[float, float]] = []
    calibration.calibrate(target, draft, 8, tmp_path / "c.json", None, lambda d, n: steps.append((d, n)))
    total = calibration.timed_decodes(8, shape_sensitive=shape_sensitive, draft=with_draft)
    assert steps == [(i, total) for i in range(1, total + 1)]
    again: list[tuple[float, float]] = []
    calibration.calibrate(target, draft, 8, tmp_path / "c.json", None, lambda d, n: again.append((d, n)))
    assert again == []  # read from the cache: nothing to count


def test_a_real_load_reports_the_weights_then_the_calibration(smollm, tmp_path):
    """llama.cpp's progress callback gives the weights' share; the calibration counts its decodes."""
    shares: list[float] = []
    with LoadedModel(smollm, ModelOptions(n_ctx=256), progress=lambda d, n: shares.append(d / n)):
        pass
    assert len(shares) >= 2 and shares == sorted(shares) and shares[-1] == 1.0 and shares[0] < 1.0

    steps: list[LoadProgress] = []
    config = PairConfig(smollm, smollm, ModelOptions(n_ctx=256), calibration_cache=tmp_path / "c.json")
    with SpeculativePair(config, progress=steps.append):
        pass
    # on a busy machine the calibration waits (bounded) for a quieter one before it measures again
    waits = [s for s in steps if s.phase is LoadPhase.WAITING]
    assert all(0 < s.done <= s.total == QUIET_WAIT_S for s in waits)
    steps = [s for s in steps if s.phase is not LoadPhase.WAITING]
    phases = [s.phase for s in steps]
    assert phases == sorted(phases, key=list(LoadPhase).index)  # target, then draft, then calibrating
    assert set(phases) == set(LoadPhase) - {LoadPhase.WAITING}
    for phase in set(phases):
        done = [s.fraction for s in steps if s.phase is phase]
        assert done == sorted(done) and done[-1] == 1.0
