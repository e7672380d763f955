"""Honest numbers under load (issue 38, item 3): timings taken while the machine was busy are judged
noisy, re-measured once, then marked, and no claim is made from them.  Every timing and every CPU
reading here is injected: nothing depends on how busy the machine running the tests is."""

import pytest

from helpers.fakes import FakeModel, FakeSpec
from helpers.machine import FakeCpu, watch
from specchat.engine import calibration
from specchat.engine.contention import (
    QUIET_WAIT_S,
    CpuReading,
    MachineWatch,
    Verdict,
    curve_noise,
    repeat_noise,
    timings_verdict,
)
from specchat.engine.controller import CostModel, DraftController
from specchat.engine.events import RoundStats
from specchat.engine.progress import LoadPhase, LoadProgress
from specchat.engine.runtime import LoadCancelled
from specchat.engine.settings import ControllerSettings, Mode


def test_our_own_decoding_on_every_core_is_not_contention():
    cpu = FakeCpu()
    w = watch(cpu)
    mark = w.mark()
    cpu.run(5.0, ours=2.0, others=0.1)  # a daemon's crumbs
    assert w.judge(mark) == Verdict.quiet()


def test_two_cpu_hogs_beside_our_decodes_make_the_machine_busy():
    cpu = FakeCpu()
    w = watch(cpu)
    mark = w.mark()
    cpu.run(5.0, ours=1.0, others=1.0)  # two hogs took half of the two cores
    verdict = w.judge(mark)
    assert verdict.busy and "other work kept 1.0 of 2 cores busy" in verdict.why


def test_stolen_cpu_time_makes_the_machine_busy():
    cpu = FakeCpu()
    w = watch(cpu)
    mark = w.mark()
    cpu.run(5.0, ours=1.5, steal=0.5)
    verdict = w.judge(mark)
    assert verdict.busy and "stolen" in verdict.why


def test_other_work_on_cores_we_leave_free_is_not_contention():
    cpu = FakeCpu()
    w = MachineWatch(cores=16, ours=8, read=cpu)
    mark = w.mark()
    cpu.run(5.0, ours=8.0, others=6.0, cores=16)
    assert not w.judge(mark).busy


def test_a_machine_that_cannot_be_read_is_never_called_busy():
    def broken() -> CpuReading:
        raise OSError("no /proc")

    w = MachineWatch(cores=2, ours=2, read=broken)
    assert w.judge(w.mark()) == Verdict.quiet()


def test_a_verify_curve_that_falls_with_the_batch_is_noise():
    assert curve_noise({1: 0.072, 2: 0.125, 3: 0.167, 5: 0.232, 9: 0.404}) == ""
    assert curve_noise({1: 0.020, 2: 0.0199, 3: 0.021, 9: 0.024}) == ""  # a GPU's flat start is not noise
    assert curve_noise({1: 0.300, 2: 0.125, 3: 0.167, 9: 0.200}) == "verifying 2 tokens timed cheaper than 1"


def test_repeats_that_disagree_are_noise():
    assert repeat_noise({1: [0.072, 0.075, 0.080, 0.073], 9: [0.4]}) == ""
    assert repeat_noise({1: [0.072, 0.210, 0.074, 0.073]}) == "repeats of a 1-token decode varied 2.9x"
    assert timings_verdict({1: 0.07, 2: 0.12}, {1: [0.07, 0.2]}).busy


# -- the calibration: measure again once, then mark ---------------------------------------------------

CPU_COSTS = {1: 0.072, 2: 0.125, 3: 0.167, 5: 0.232}


@pytest.fixture
def fake(tmp_path) -> FakeModel:
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"the cache keys on the file's size and mtime")
    return FakeModel(path, FakeSpec(decode_s=0.0))


def scripted(monkeypatch, cpu: FakeCpu, busy_runs: int) -> list[int]:
    """Every decode is timed at CPU_COSTS; during the first ``busy_runs`` measurements two hogs hold a
    core and the first timed 1-token repeat (after the warm-up) is slowed 3x.  Returns the measurements made (one item each)."""
    runs: list[int] = []
    real = calibration.measure
    state = {"busy": False, "ones": 0}

    def measure(*args, **kwargs):
        runs.append(1)
        state["busy"], state["ones"] = len(runs) <= busy_runs, 0
        return real(*args, **kwargs)

    def time_decode(model, n, filler, logits):
        cost = CPU_COSTS.get(n, 0.01)
        state["ones"] += n == 1
        if state["busy"] and n == 1 and state["ones"] == 2:
            cost *= 3
        cpu.run(cost, ours=1.0 if state["busy"] else 2.0, others=1.0 if state["busy"] else 0.0)
        return cost

    monkeypatch.setattr(calibration, "measure", measure)
    monkeypatch.setattr(calibration, "_time_decode", time_decode)
    return runs


def test_a_calibration_on_a_quiet_machine_is_believed_and_cached(fake, tmp_path, monkeypatch):
    cpu = FakeCpu()
    runs = scripted(monkeypatch, cpu, busy_runs=0)
    cache = tmp_path / "calibration.json"
    costs = calibration.calibrate(fake, None, 4, cache, watch=watch(cpu))
    assert costs.reliable and costs.verify_s[1] == pytest.approx(0.072) and len(runs) == 1
    assert calibration.calibrate(fake, None, 4, cache, watch=watch(cpu)).reliable and len(runs) == 1  # cached


def test_a_burst_of_other_work_is_measured_again_and_then_believed(fake, tmp_path, monkeypatch):
    cpu = FakeCpu()
    runs = scripted(monkeypatch, cpu, busy_runs=1)
    costs = calibration.calibrate(fake, None, 4, tmp_path / "calibration.json", watch=watch(cpu))
    assert len(runs) == 2 and costs.reliable


def test_a_machine_busy_throughout_gives_marked_costs_that_are_not_cached(fake, tmp_path, monkeypatch):
    cpu = FakeCpu()
    runs = scripted(monkeypatch, cpu, busy_runs=99)
    cache = tmp_path / "calibration.json"
    costs = calibration.calibrate(fake, None, 4, cache, watch=watch(cpu))
    assert len(runs) == 2 and not costs.reliable and "other work kept" in costs.noise
    assert "repeats of a 1-token decode varied 3.0x" in costs.noise
    calibration.calibrate(fake, None, 4, cache, watch=watch(cpu))
    assert len(runs) == 4  # nothing was cached: the next load measures again


# -- the controller: no "best case" from noisy costs ------------------------------------------------------

def refusing(noise: str) -> DraftController:
    costs = CostModel({1: 0.030, 2: 0.033, 3: 0.036, 5: 0.042, 9: 0.054}, {"model": 0.027, "lookup": 0.0})
    costs.overhead_s = 0.005
    costs.noise = noise
    return DraftController(ControllerSettings(), costs)


def test_auto_claims_a_best_case_only_from_costs_it_believes():
    believed = refusing("").answer_plan(Mode.AUTO, has_model=True)
    assert believed.notes[0].brief.startswith("the draft model cannot pay here, best case 1.04x")
    busy = refusing("other work kept 1.0 of 2 cores busy").answer_plan(Mode.AUTO, has_model=True)
    assert busy.drafters == ("lookup",)
    assert "best case" not in busy.notes[0].brief.replace("no best case claimed", "")
    assert "busy machine" in busy.notes[0].brief and "other work kept 1.0 of 2 cores" in busy.notes[0].reason


def test_the_drift_recheck_claims_no_best_case_from_a_busy_calibration():
    c = refusing("verifying 9 tokens timed cheaper than 1")
    c.answer_plan(Mode.AUTO, has_model=True)
    events = []
    for _ in range(16):  # the other program is gone: rounds cost a third of the calibrated cost
        plan = c.plan(Mode.AUTO, {})
        events += c.observe(Mode.AUTO, plan, RoundStats(0, "none", 0, 0, 0, 1, 0.0, 0.010, 0.005))
    assert len(events) == 1 and "timed on a busy machine" in events[0].reason
    assert "best case" not in events[0].brief and "no best case claimed" in events[0].reason


# -- waiting for a quieter machine before the re-measure (bounded, cancellable, told) ------------------------

class Waiting:
    """A fake clock and sleep for wait_for_quiet: each stretch slept runs the fake machine with ``hogs``
    other processes busy for its first ``busy_polls`` stretches, quiet after."""

    def __init__(self, cpu: FakeCpu, busy_polls: int) -> None:
        self.cpu, self.busy_polls, self.t, self.polls = cpu, busy_polls, 0.0, 0
        self.steps: list[tuple[float, float]] = []

    def sleep(self, seconds: float) -> None:
        self.polls += 1
        self.t += seconds
        self.cpu.run(seconds, ours=0.0, others=2.0 if self.polls <= self.busy_polls else 0.0)

    def install(self, monkeypatch) -> None:
        real = calibration.wait_for_quiet
        monkeypatch.setattr(calibration, "wait_for_quiet",
                            lambda *a, **kw: real(*a, **kw, sleep=self.sleep, clock=lambda: self.t))


def test_a_noisy_calibration_waits_for_a_quieter_machine_says_so_and_then_is_believed(fake, tmp_path, monkeypatch):
    cpu = FakeCpu()
    runs = scripted(monkeypatch, cpu, busy_runs=1)
    wait = Waiting(cpu, busy_polls=2)
    wait.install(monkeypatch)
    costs = calibration.calibrate(fake, None, 4, tmp_path / "calibration.json", watch=watch(cpu),
                                  waiting=lambda done, total: wait.steps.append((done, total)))
    assert len(runs) == 2 and costs.reliable
    # it waited until the machine calmed down (the third stretch), and said so after each stretch
    assert wait.steps == [(0.25, 5.0), (0.5, 5.0), (0.75, 5.0)]
    assert LoadProgress(LoadPhase.WAITING, "the draft", 0.75, 5.0).text == \
        "Waiting for a quieter machine to calibrate the draft again: 1 of 5 s"


def test_the_wait_is_bounded_then_the_costs_are_measured_again_and_marked(fake, tmp_path, monkeypatch):
    cpu = FakeCpu()
    runs = scripted(monkeypatch, cpu, busy_runs=99)
    wait = Waiting(cpu, busy_polls=10_000)
    wait.install(monkeypatch)
    costs = calibration.calibrate(fake, None, 4, tmp_path / "calibration.json", watch=watch(cpu),
                                  waiting=lambda done, total: wait.steps.append((done, total)))
    assert len(runs) == 2 and not costs.reliable and "other work kept" in costs.noise
    assert wait.t == pytest.approx(QUIET_WAIT_S) and wait.steps[-1] == (QUIET_WAIT_S, QUIET_WAIT_S)


def test_a_cancel_while_waiting_ends_the_wait_and_the_load_at_once(fake, tmp_path, monkeypatch):
    cpu = FakeCpu()
    runs = scripted(monkeypatch, cpu, busy_runs=99)
    wait = Waiting(cpu, busy_polls=10_000)
    wait.install(monkeypatch)
    with pytest.raises(LoadCancelled):
        calibration.calibrate(fake, None, 4, tmp_path / "calibration.json", lambda: wait.polls >= 2,
                              watch=watch(cpu))
    assert wait.polls == 2 and len(runs) == 1  # no stretch after the cancel, and no second measurement


def test_a_machine_vouched_quiet_is_not_read_and_judged_quiet(monkeypatch):
    """SPECCHAT_ASSUME_QUIET (the test suite sets it: its load is its own) skips the counters; unset, the judge
    reads this machine."""
    from specchat.engine.contention import ASSUME_QUIET_ENV

    monkeypatch.setenv(ASSUME_QUIET_ENV, "1")
    vouched = MachineWatch()
    assert vouched.mark() is None and not vouched.judge(vouched.mark()).busy
    monkeypatch.delenv(ASSUME_QUIET_ENV)
    assert MachineWatch().mark() is not None  # psutil's counters of this machine
