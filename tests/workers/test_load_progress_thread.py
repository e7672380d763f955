"""A load's steps cross from the generation thread to the GUI thread, throttled, the newest load's only."""

from __future__ import annotations

from pathlib import Path

from helpers.fakes import FakePairFactory, FakeSpec
from specchat.engine.pair import PairConfig
from specchat.engine.progress import LoadPhase
from specchat.workers.generation import GenerationService

LOAD_S = 1.0


def test_a_slow_load_reports_its_phases_in_order_at_most_ten_times_a_second(qtbot):
    factory = FakePairFactory(FakeSpec(load_s=LOAD_S))  # a raw step every 10 ms: ~100 of them
    svc = GenerationService(factory)
    steps = []
    svc.loadProgress.connect(steps.append)
    try:
        with qtbot.waitSignal(svc.pairLoaded, timeout=20_000):
            svc.load(PairConfig(Path("t.gguf"), Path("d.gguf")))
    finally:
        svc.shutdown()
    phases = [s.phase for s in steps]
    assert phases[0] is LoadPhase.TARGET and phases[-1] is LoadPhase.CALIBRATING
    assert phases == sorted(phases, key=list(LoadPhase).index) and LoadPhase.DRAFT in phases
    assert [s.name for s in steps if s.phase is LoadPhase.TARGET][0] == "t.gguf"
    # the throttle: one step per 0.1 s at most, and each phase's first step
    assert 3 <= len(steps) <= LOAD_S * 10 + len(LoadPhase) + 1


def test_a_superseded_load_never_reports_after_the_newer_one_was_asked(qtbot):
    svc = GenerationService(FakePairFactory(FakeSpec(load_s=0.6)))
    before: list = []
    after: list = []
    into = [before]
    svc.loadProgress.connect(lambda s: into[0].append(s))
    try:
        svc.load(PairConfig(Path("first.gguf")))
        qtbot.waitUntil(lambda: bool(before), timeout=10_000)
        into[0] = after
        with qtbot.waitSignal(svc.pairLoaded, timeout=20_000):
            svc.load(PairConfig(Path("second.gguf")))  # the first's steps may still be queued: never shown
    finally:
        svc.shutdown()
    assert all(s.name == "first.gguf" for s in before)
    assert after and all(s.name == "second.gguf" for s in after)
