"""How many threads a decode runs now: the cores that other work leaves free.

llama.cpp's CPU threads meet at a barrier after every graph node and spin while they wait.  With a
thread per core and other work on the cores, one of them is always descheduled and the others wait
for it at each node: on two cores beside two busy processes, two threads decoded the 1.5B target at
0.3 tok/s where one thread decoded 12.5 (docs/benchmarks.md, "Two decode threads beside two busy
processes").  On a quiet machine two threads were 1.6x one.

So the thread count is fitted to the machine, while it answers: :class:`ThreadFit` reads how many
cores other processes (and the hypervisor, in stolen time) took over the last stretch, and runs on
the cores left, rounded, at least one and at most what the model was loaded with.  It re-judges at
most once every :data:`FIT_EVERY_S`, between rounds (``llama_set_n_threads`` takes effect at the next
decode and costs nothing); the first judgement covers the time since the pair loaded.  Only where the
threads were left to SpecChat (the ``threads`` setting at 0): a count the user chose is kept as it is.

Thread counts do not change what a model computes: the same prompt decoded on one thread and on two
gave bit-identical logits with this llama.cpp (each output row is one thread's dot products), so a
fitted answer is the answer a fixed count gives.  Qt-free; the readings and the clock are injectable.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import psutil

from .contention import CpuReading, read_cpu

__all__ = ["FIT_EVERY_S", "ThreadFit", "threads_for"]

FIT_EVERY_S = 1.0  # the shortest stretch judged: shorter ones are dominated by the scheduler's tick


def threads_for(others: float, *, cores: int, most: int) -> int:
    """The threads to run when other work keeps ``others`` cores busy (fractional, averaged): the cores
    left, rounded to the nearest, at least 1 and at most ``most``."""
    free = cores - max(others, 0.0)
    return max(1, min(most, math.floor(free + 0.5)))


class ThreadFit:
    """The decode thread count for the next round, fitted to what other work leaves free.

    ``most``: the threads the model was loaded with (one per physical core by default), never
    exceeded.  ``cores``: the machine's logical CPUs.  ``read`` gives the cumulative counters
    (:func:`~.contention.read_cpu`; always the real machine, since how fast we decode is not a claim
    a test suite vouches for); a reading that fails leaves the count as it was.
    """

    def __init__(self, most: int, *, cores: int | None = None, read: Callable[[], CpuReading] = read_cpu,
                 clock: Callable[[], float] = time.monotonic, every_s: float = FIT_EVERY_S) -> None:
        self.most = max(1, most)
        self.cores = max(1, cores or psutil.cpu_count() or os.cpu_count() or 1)
        self.now = self.most
        self._read, self._clock, self._every_s = read, clock, every_s
        self._checked = -math.inf
        self._mark: CpuReading | None = None
        self.mark()

    def mark(self) -> None:
        """Start a stretch now (the pair's load; nothing about the stretch before is kept)."""
        self._checked = self._clock()
        self._mark = self._reading()

    def fit(self) -> int:
        """The threads to run now, re-judged once the stretch since the last judgement is long enough."""
        now = self._clock()
        if now - self._checked < self._every_s:
            return self.now
        reading = self._reading()
        if reading is None:
            return self.now
        since, self._mark, self._checked = self._mark, reading, now
        if since is not None:
            others = self.others(since, reading)
            if others is not None:
                self.now = threads_for(others, cores=self.cores, most=self.most)
        return self.now

    @staticmethod
    def others(since: CpuReading, now: CpuReading) -> float | None:
        """The cores other work kept busy between two readings (others' busy time and stolen time, per
        second of wall clock); None when the readings cannot tell."""
        wall = now.at - since.at
        if wall <= 0 or now.total_s <= since.total_s:
            return None
        busy = (now.busy_s - since.busy_s) - (now.own_s - since.own_s)
        stolen = now.steal_s - since.steal_s
        return max(busy + stolen, 0.0) / wall

    def _reading(self) -> CpuReading | None:
        try:
            return self._read()
        except (OSError, AttributeError, psutil.Error):
            return None
