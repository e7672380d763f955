"""Issue 38: the telemetry panel says when the machine was busy and claims no "x vs plain" then; the
count of plain runs reads as it does in the stats line.  The machine's business is injected."""

from __future__ import annotations

import pytest

from helpers.event_streams import R, answer_events
from helpers.machine import FakeCpu, watch
from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.samplers import NO_GPU, RamSampler
from specchat.ui.telemetry_panel import TelemetryPanel


@pytest.fixture
def cpu() -> FakeCpu:
    return FakeCpu()


@pytest.fixture
def panel(qtbot, cpu):
    p = TelemetryPanel(TelemetryRecorder(machine=watch(cpu)), RamSampler(description=NO_GPU))
    qtbot.addWidget(p)
    p.show()
    return p


def answer(panel, cpu: FakeCpu, request_id: int, *, busy: bool, mode: str = "draft") -> None:
    events = answer_events([R(4, 4, 4)] * 5, mode=mode)
    t = 1000.0 * request_id
    panel.recorder.feed(request_id, 7, events[0], now=t)
    cpu.run(2.0, ours=1.0 if busy else 2.0, others=1.0 if busy else 0.0)  # two CPU hogs take a core
    for ev in events[1:]:
        t += 0.05
        panel.recorder.feed(request_id, 7, ev, now=t)
    panel.repaint_now()


def test_a_busy_machine_pauses_the_figures_and_a_quiet_one_brings_them_back(panel, cpu):
    panel.recorder.set_plain_rate(25.0)
    answer(panel, cpu, 1, busy=True)
    text = panel.numbers.text()
    assert "machine busy: figures paused" in text and "other work kept 1.0 of 2 cores busy" in text
    assert "<b>–</b> vs plain" in text and "4.71×" not in text
    answer(panel, cpu, 2, busy=False)
    text = panel.numbers.text()
    assert "figures paused" not in text and "4.71×</b> vs plain" in text


def test_the_panel_counts_plain_runs_in_the_stats_lines_words(panel, cpu):
    answer(panel, cpu, 1, busy=False, mode="baseline")
    answer(panel, cpu, 2, busy=False)
    assert "vs plain (1 of 3 plain runs)" in panel.numbers.text()
