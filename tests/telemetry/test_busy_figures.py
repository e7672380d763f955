"""Issue 38: the panel's plain rate and "x vs plain" come from plain answers the app believes (not
stopped, not measured while the machine was busy), count the pair's stored runs across reloads,
and pause while the machine is busy.  The machine's business is injected (helpers.machine)."""

from dataclasses import replace

import pytest

from helpers.event_streams import R, answer_events, feed_all
from helpers.machine import FakeCpu, watch
from specchat.engine.contention import PAUSED
from specchat.engine.events import Done, StopReason
from specchat.metrics import Counts, runs_phrase
from specchat.store import PlainReference
from specchat.telemetry import TelemetryRecorder

PLAIN = answer_events([R(0, 0, 0, 0.0, 0.030, 0.002)] * 20, mode="baseline")
SPEC = answer_events([R(4, 4, 3)] * 10)


class Machine:
    """Feeds answers while the fake machine runs quiet or with two CPU hogs."""

    def __init__(self) -> None:
        self.cpu = FakeCpu()
        self.recorder = TelemetryRecorder(machine=watch(self.cpu))
        self.t = 0.0
        self.request = 0

    def answer(self, events, *, busy: bool = False) -> None:
        self.request += 1
        first, rest = events[:1], events[1:]
        feed_all(self.recorder, self.request, "c", first, t0=self.t + 1)
        self.cpu.run(2.0, ours=1.0 if busy else 2.0, others=1.0 if busy else 0.0)
        self.t = feed_all(self.recorder, self.request, "c", rest, t0=self.t + 1)


def stopped(events):
    done = events[-1]
    assert isinstance(done, Done)
    return [*events[:-1], replace(done, stop_reason=StopReason.CANCELLED)]


def test_plain_answers_measured_while_busy_or_stopped_teach_no_plain_rate():
    m = Machine()
    m.answer(PLAIN, busy=True)
    m.answer(stopped(PLAIN))
    assert m.recorder.snapshot().plain_answers == 0
    for _ in range(3):
        m.answer(PLAIN)
    assert m.recorder.snapshot().plain_answers == 3 and m.recorder.plain_rate == pytest.approx(
        PLAIN[-1].stats.decode_tok_s)


def test_figures_pause_while_the_machine_is_busy_and_come_back_when_it_is_quiet():
    m = Machine()
    for _ in range(3):
        m.answer(PLAIN)
    m.answer(SPEC, busy=True)
    snap = m.recorder.snapshot()
    assert "other work kept 1.0 of 2 cores busy" in snap.busy  # the hogs held a core
    assert snap.answer.multiplier is None and snap.total.multiplier is None  # no claim from a busy answer
    m.answer(SPEC)
    snap = m.recorder.snapshot()
    assert snap.busy == "" and snap.answer.multiplier == pytest.approx(
        SPEC[-1].stats.decode_tok_s / PLAIN[-1].stats.decode_tok_s)
    assert PAUSED == "machine busy: figures paused"


def test_a_reload_keeps_the_pairs_stored_plain_runs_and_x_vs_plain_shows_at_once():
    m = Machine()
    stored = PlainReference((10.0, 11.0, 9.0), Counts(decoded=300, decode_s=30.0))
    m.recorder.reset_plain_rate(stored)  # the pair loads: its three plain runs from earlier sessions
    assert m.recorder.snapshot().plain_answers == 3 and m.recorder.plain_rate == pytest.approx(10.0)
    m.answer(SPEC)
    assert m.recorder.snapshot().answer.multiplier == pytest.approx(SPEC[-1].stats.decode_tok_s / 10.0)
    m.recorder.reset_plain_rate(PlainReference((10.0,), Counts(decoded=100, decode_s=10.0)))  # another pair
    assert m.recorder.snapshot().plain_answers == 1 and m.recorder.plain_rate is None


def test_one_phrase_for_the_count_of_plain_runs():
    assert [runs_phrase(n) for n in (0, 2, 3, 7)] == ["0 of 3 plain runs", "2 of 3 plain runs", "3 plain runs",
                                                       "7 plain runs"]
    assert runs_phrase(1, "spec.") == "1 of 3 spec. runs"
