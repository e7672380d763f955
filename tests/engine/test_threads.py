"""Decode threads fitted to the cores other work leaves free (engine/threads.py), on fake readings:
two threads beside two busy processes decoded 40x slower than one (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fakes import FakeSpec, fake_pair
from specchat.engine import Done
from specchat.engine.contention import CpuReading
from specchat.engine.pair import PairConfig
from specchat.engine.threads import ThreadFit, threads_for
from specchat.stats_line import stats_line
from specchat.store import MessageStats


class Machine:
    """Cumulative counters of a machine of ``cores`` CPUs where other work keeps ``others`` cores busy
    and we keep ``ours`` busy; ``advance`` moves its clock."""

    def __init__(self, cores: int = 2, others: float = 0.0, ours: float = 0.0) -> None:
        self.cores, self.others, self.ours = cores, others, ours
        self.t = 100.0
        self.busy = self.own = 0.0
        self.fail = False

    def advance(self, s: float) -> None:
        self.t += s
        self.busy += (self.others + self.ours) * s
        self.own += self.ours * s

    def read(self) -> CpuReading:
        if self.fail:
            raise OSError("no /proc")
        return CpuReading(self.t, self.busy, 0.0, self.t * self.cores, self.own)

    def clock(self) -> float:
        return self.t


def fit_on(machine: Machine, most: int = 2) -> ThreadFit:
    return ThreadFit(most, cores=machine.cores, read=machine.read, clock=machine.clock)


@pytest.mark.parametrize(("others", "cores", "most", "threads"), [
    (0.0, 2, 2, 2),  # a quiet machine: a thread per core
    (0.3, 2, 2, 2),  # a browser tab's worth: still both
    (0.67, 2, 2, 1),  # one busy process beside our two threads (it gets two thirds of a core)
    (1.0, 2, 2, 1),  # one busy process beside our one thread
    (2.0, 2, 2, 1),  # two busy processes: never fewer than one
    (10.0, 16, 8, 6),  # a big machine: the cores left, up to what the model was loaded with
    (0.0, 16, 8, 8),
    (-1.0, 2, 2, 2),  # a counter that went backwards counts as nothing
])
def test_the_threads_are_the_cores_other_work_leaves(others: float, cores: int, most: int, threads: int) -> None:
    assert threads_for(others, cores=cores, most=most) == threads


def test_two_busy_processes_drop_the_decode_to_one_thread_and_it_comes_back_when_they_stop() -> None:
    machine = Machine(others=2.0)
    fit = fit_on(machine)
    assert fit.fit() == 2  # nothing judged yet: the stretch since the load is too short
    machine.advance(1.5)
    assert fit.fit() == 1
    machine.others, machine.ours = 1.33, 0.67  # with one thread we get two thirds of a core: still one
    machine.advance(1.5)
    assert fit.fit() == 1
    machine.others, machine.ours = 0.0, 1.0  # the busy processes ended
    machine.advance(1.5)
    assert fit.fit() == 2


def test_our_own_decoding_is_never_counted_as_other_work() -> None:
    machine = Machine(others=0.0, ours=2.0)
    fit = fit_on(machine)
    machine.advance(3.0)
    assert fit.fit() == 2


def test_the_count_is_judged_at_most_once_a_second_and_kept_when_the_counters_cannot_be_read() -> None:
    machine = Machine(others=2.0)
    fit = fit_on(machine)
    machine.advance(0.5)
    assert fit.fit() == 2  # too short a stretch to judge
    machine.advance(0.6)
    assert fit.fit() == 1
    machine.others = 0.0
    machine.advance(0.5)
    assert fit.fit() == 1  # judged 0.5 s ago
    machine.fail = True
    machine.advance(5.0)
    assert fit.fit() == 1  # no reading: as it was
    machine.fail = False
    machine.advance(5.0)
    assert fit.fit() == 2


def test_stolen_time_counts_as_other_work() -> None:
    t = [0.0]
    readings = iter([CpuReading(0.0, 0.0, 0.0, 0.0, 0.0), CpuReading(2.0, 0.2, 2.4, 4.0, 0.0)])
    fit = ThreadFit(2, cores=2, read=lambda: next(readings), clock=lambda: t[0])
    t[0] = 2.0
    assert fit.fit() == 1  # the hypervisor ran someone else for 1.2 of our 2 cores


def answer(pair) -> Done:
    prompt = pair.chat_prompt([{"role": "user", "content": "hello"}]).tokens
    done = [ev for ev in pair.generate(prompt, mode="draft", max_tokens=40) if isinstance(ev, Done)]
    return done[0]


def test_an_answer_beside_busy_work_runs_both_models_on_the_free_core_and_its_stats_line_says_so() -> None:
    pair = fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf")), FakeSpec(threads=2, decode_s=0.0))
    machine = Machine(others=2.0)
    pair.threads = fit_on(machine)
    machine.advance(2.0)  # the busy work ran while the pair sat loaded
    done = answer(pair)
    assert pair.target.thread_calls and set(pair.target.thread_calls) == {1}
    assert pair.draft.thread_calls and set(pair.draft.thread_calls) == {1}
    assert done.stats.threads == (1, 2)
    stats = MessageStats.from_generation(done.stats, done.stop_reason)
    assert MessageStats.from_json(stats.to_json()) == stats  # stored and read back
    assert "1 of 2 threads: other work held the rest" in stats_line(stats, "done")


def test_a_quiet_machine_runs_every_thread_and_the_stats_line_says_nothing_of_threads() -> None:
    pair = fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf")), FakeSpec(threads=2))
    machine = Machine(others=0.1)
    pair.threads = fit_on(machine)
    machine.advance(2.0)
    done = answer(pair)
    assert set(pair.target.thread_calls) == {2}
    stats = MessageStats.from_generation(done.stats, done.stop_reason)
    assert stats.threads == (2, 2)
    assert "threads" not in stats_line(stats, "done")


def test_a_thread_count_the_user_chose_is_kept() -> None:
    config = PairConfig(Path("t.gguf"), Path("d.gguf"))
    from dataclasses import replace

    config = replace(config, target_options=replace(config.target_options, n_threads=2))
    pair = fake_pair(config, FakeSpec(threads=2))
    assert pair.threads is None
    done = answer(pair)
    assert pair.target.thread_calls == []
    assert MessageStats.from_generation(done.stats, done.stop_reason).threads is None


@pytest.mark.parametrize("stored", ['[0, 2]', '[3, 2]', '"2"', '[1]', '[1, 2, 3]', '[1.5, 2]', '[-1, 2]'])
def test_stored_thread_counts_that_cannot_be_right_are_left_out_with_a_line(stored: str) -> None:
    told: list[str] = []
    doc = '{"counts": {}, "mode": "draft", "threads": ' + stored + '}'
    stats = MessageStats.from_json(doc, told.append)
    assert stats is not None and stats.threads is None
    assert told and "threads" in told[0]
