"""What a pair's load reports while it runs.  Qt-free.

Loading a pair is three phases: the target's weights, the draft's weights (llama.cpp's
progress callback gives the fraction read) and the calibration (a known number of timed
decodes, skipped when the cache has this setup).  Each step is one frozen
:class:`LoadProgress`, handed to a sink the loader's caller gives: the generation thread
sends them on to the window, throttled by :class:`Throttle` so a fast callback (llama.cpp
calls it per tensor) never floods the GUI thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class LoadPhase(StrEnum):
    TARGET = "loading target"
    DRAFT = "loading draft"
    CALIBRATING = "calibrating"
    WAITING = "waiting for a quieter machine"  # a noisy calibration, before it measures again (engine/contention.py)


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """One step of a load: ``done`` of ``total`` of its phase (weights: a fraction of 1.0;
    calibration: timed decodes)."""

    phase: LoadPhase
    name: str  # the model file loading, or what is calibrated ("the draft", the target's file)
    done: float
    total: float

    @property
    def fraction(self) -> float:
        return min(max(self.done / self.total, 0.0), 1.0) if self.total > 0 else 0.0

    @property
    def text(self) -> str:
        """One line for the window: "Loading Qwen2.5-7B.gguf… 43%", "Calibrating the draft: 5 of 12"."""
        if self.phase is LoadPhase.WAITING:
            return (f"Waiting for a quieter machine to calibrate {self.name} again: "
                    f"{self.done:.0f} of {self.total:.0f} s")
        if self.phase is LoadPhase.CALIBRATING:
            return f"Calibrating {self.name}: {int(self.done)} of {int(self.total)} timed decodes"
        return f"Loading {self.name}… {self.fraction:.0%}"


ProgressSink = Callable[[LoadProgress], None]

MIN_INTERVAL_S = 0.1  # at most ~10 updates a second reach the window


class Throttle:
    """A sink that passes a step on when ``MIN_INTERVAL_S`` has passed since the last one it passed,
    or when the phase changed (a new phase is never hidden behind the last one's fraction)."""

    def __init__(self, sink: ProgressSink, interval_s: float = MIN_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._interval = interval_s
        self._clock = clock
        self._last: LoadProgress | None = None
        self._at = 0.0

    def __call__(self, step: LoadProgress) -> None:
        now = self._clock()
        last = self._last
        if last is not None and last.phase is step.phase and last.name == step.name \
                and now - self._at < self._interval:
            return
        self._last, self._at = step, now
        self._sink(step)


def report(sink: ProgressSink | None, phase: LoadPhase, name: str) -> Callable[[float, float], None] | None:
    """``sink`` as a ``(done, total)`` callback for one phase, or None when nothing listens."""
    if sink is None:
        return None

    def step(done: float, total: float) -> None:
        sink(LoadProgress(phase, name, done, total))

    return step
