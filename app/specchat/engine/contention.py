"""Is the machine busy?  The one judge of whether a timing can be believed.

A figure SpecChat shows ("best case 2.83x", "x vs plain", a task's multiplier) is only as good as
the timings under it.  With other work on the cores, one decode of 9 tokens was once timed cheaper
than one of 1, and the claims built on it were wrong with no word of why.  Two kinds of evidence
say a timing is noisy, and this module words both:

* **The machine** (:class:`MachineWatch`): over a stretch of time (:meth:`MachineWatch.mark`, then
  :meth:`MachineWatch.judge`), how much CPU other processes took (the system's busy time less this
  process's own) and how much the hypervisor stole (``steal``, Linux guests).  Other work beyond
  what the cores we do not use can absorb, or more than :data:`STEAL_BUSY` stolen, is contention.
  Where psutil cannot tell (no ``steal`` field, a platform without per-CPU times), the part it
  cannot read counts as quiet: the judge never invents contention.
* **The timings themselves** (:func:`curve_noise`, :func:`repeat_noise`): a verify cost that falls
  as the batch grows, or repeats of one decode that disagree by more than :data:`REPEAT_SPREAD`,
  are noisy by construction, whatever the machine says.

A :class:`Verdict` is ``busy`` with a few words of why, or quiet.  The calibration waits a bounded
time for a quieter machine (:func:`wait_for_quiet`: up to :data:`QUIET_WAIT_S`, cancellable, told as
"waiting for a quieter machine"), re-measures once and then marks its costs unreliable, the controller makes no "best case" claim from unreliable
costs, the telemetry recorder learns no plain rate from a busy answer, and the panel says "machine
busy: figures paused" (:data:`PAUSED`).  Qt-free; the readings are injectable (``read``, ``clock``)
so the logic is tested with fake ones, never with real contention.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

__all__ = ["PAUSED", "CURVE_SLACK", "QUIET_WAIT_S", "REPEAT_SPREAD", "STEAL_BUSY", "CpuReading", "MachineWatch",
           "Verdict", "curve_noise", "repeat_noise", "timings_verdict", "wait_for_quiet"]

PAUSED = "machine busy: figures paused"  # the panel's words while the newest verdict is busy
STEAL_BUSY = 0.10  # a tenth of the CPU time stolen by the hypervisor
OTHERS_MIN_CORES = 0.5  # other work using half a core beyond what the cores we leave free absorb
CURVE_SLACK = 0.10  # a bigger batch timed more than 10% cheaper than a smaller one is noise
REPEAT_SPREAD = 1.5  # repeats of one decode whose slowest is 1.5x their fastest disagree
QUIET_WAIT_S = 5.0  # the longest a noisy calibration waits for a quieter machine before it measures again
QUIET_POLL_S = 0.25  # the stretch judged at a time while waiting (and how soon a cancel is heard)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether timings taken now can be believed; ``why`` says what made them noisy."""

    busy: bool = False
    why: str = ""

    @staticmethod
    def quiet() -> Verdict:
        return Verdict()

    @staticmethod
    def noisy(why: str) -> Verdict:
        return Verdict(True, why)

    def also(self, other: Verdict) -> Verdict:
        """Both verdicts: busy when either is, with both reasons."""
        if not other.busy:
            return self
        if not self.busy:
            return other
        return Verdict(True, f"{self.why}; {other.why}")


@dataclass(frozen=True, slots=True)
class CpuReading:
    """Cumulative CPU seconds at one moment: the whole system's busy and stolen time, this process's."""

    at: float  # the clock, seconds
    busy_s: float  # every CPU's non-idle time (user, system, nice, irq, ...), steal excluded
    steal_s: float  # time the hypervisor ran someone else (0 where the platform does not say)
    total_s: float  # every CPU's time, idle and steal included
    own_s: float  # this process's user + system time


def read_cpu() -> CpuReading:
    """This machine's reading through psutil (Linux gives steal; elsewhere it counts as 0)."""
    t = psutil.cpu_times()
    idle = getattr(t, "idle", 0.0) + getattr(t, "iowait", 0.0)
    steal = getattr(t, "steal", 0.0)
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # Linux counts guest in user too
    own = psutil.Process(os.getpid()).cpu_times()
    return CpuReading(time.monotonic(), max(total - idle - steal, 0.0), steal, total, own.user + own.system)


ASSUME_QUIET_ENV = "SPECCHAT_ASSUME_QUIET"  # set (non-empty): the machine's counters are not read, it counts as quiet


def read_this_machine() -> CpuReading:
    """:func:`read_cpu`, unless ``SPECCHAT_ASSUME_QUIET`` says the user (or a test suite, whose other work
    is its own) vouches that the machine is quiet: then no reading, and the judge says quiet."""
    if os.environ.get(ASSUME_QUIET_ENV):
        raise OSError(f"{ASSUME_QUIET_ENV} is set")
    return read_cpu()


class MachineWatch:
    """How busy the machine was between a :meth:`mark` and a :meth:`judge`.

    ``cores`` is how many CPUs the machine has and ``ours`` how many of them our decodes keep
    busy (llama.cpp's threads; by default one per physical core); other work is contention only beyond the ``cores - ours`` left
    free.  ``read`` gives the cumulative counters (:func:`read_cpu`); a reading that fails (a
    sandbox without /proc) makes the judge say quiet.
    """

    def __init__(self, *, cores: int | None = None, ours: int | None = None,
                 read: Callable[[], CpuReading] = read_this_machine) -> None:
        self.cores = max(1, cores or psutil.cpu_count() or os.cpu_count() or 1)
        if ours is None:  # llama.cpp's default: a thread per physical core
            ours = psutil.cpu_count(logical=False) or self.cores
        self.ours = max(0, min(ours, self.cores))
        self._read = read

    def mark(self) -> CpuReading | None:
        try:
            return self._read()
        except (OSError, AttributeError, psutil.Error):
            return None

    def judge(self, since: CpuReading | None) -> Verdict:
        """The verdict on the time since ``since`` (a :meth:`mark`); quiet when it cannot tell."""
        now = self.mark()
        if since is None or now is None:
            return Verdict.quiet()
        wall = now.at - since.at
        total = now.total_s - since.total_s
        if wall <= 0 or total <= 0:
            return Verdict.quiet()
        steal = (now.steal_s - since.steal_s) / total
        if steal > STEAL_BUSY:
            return Verdict.noisy(f"{steal:.0%} of the CPU time was stolen by the hypervisor")
        others = max((now.busy_s - since.busy_s) - (now.own_s - since.own_s), 0.0) / wall  # in cores
        free = self.cores - self.ours
        if others > free + OTHERS_MIN_CORES:
            return Verdict.noisy(f"other work kept {others:.1f} of {self.cores} cores busy")
        return Verdict.quiet()


def curve_noise(verify_s: Mapping[int, float]) -> str:
    """Why a verify curve (seconds per batch of n) cannot be right: a bigger batch timed more than
    :data:`CURVE_SLACK` cheaper than a smaller one ("verifying 9 tokens timed cheaper than 1");
    "" when it rises (or stays flat, as a GPU's does at small sizes)."""
    sizes = sorted(verify_s)
    for i, small in enumerate(sizes):
        for big in sizes[i + 1:]:
            if verify_s[big] < verify_s[small] * (1 - CURVE_SLACK):
                return f"verifying {big} tokens timed cheaper than {small}"
    return ""


def repeat_noise(repeats: Mapping[int, Sequence[float]]) -> str:
    """Why repeated timings of one batch size disagree (slowest over fastest past :data:`REPEAT_SPREAD`);
    "" when they agree or a size was timed once."""
    for n in sorted(repeats):
        times = [t for t in repeats[n] if t > 0]
        if len(times) >= 2 and max(times) > REPEAT_SPREAD * min(times):
            return f"repeats of a {n}-token decode varied {max(times) / min(times):.1f}x"
    return ""


def timings_verdict(verify_s: Mapping[int, float], repeats: Mapping[int, Sequence[float]]) -> Verdict:
    """The timings' own verdict: a falling curve or disagreeing repeats are noise."""
    why = curve_noise(verify_s) or repeat_noise(repeats)
    return Verdict.noisy(why) if why else Verdict.quiet()


def wait_for_quiet(watch: MachineWatch, *, max_s: float = QUIET_WAIT_S, cancelled: Callable[[], bool] | None = None,
                   progress: Callable[[float, float], None] | None = None, poll_s: float = QUIET_POLL_S,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> Verdict:
    """Wait, at most ``max_s`` seconds, for a stretch of ``poll_s`` that ``watch`` judges quiet; the verdict
    of the last stretch judged (quiet: the machine calmed down; busy: the time ran out).

    Bounded and cancellable: ``cancelled`` is asked before each stretch, and a True returns at once
    (the caller gives up: a close or a Stop never waits here longer than one stretch).  ``progress(waited,
    max_s)`` is told after each stretch ("waiting for a quieter machine").  ``sleep`` and ``clock`` are
    injectable, so the waiting is tested without waiting."""
    start = clock()
    verdict = Verdict.quiet()
    while cancelled is None or not cancelled():
        mark = watch.mark()
        sleep(poll_s)
        verdict = watch.judge(mark)
        waited = clock() - start
        if progress is not None:
            progress(min(waited, max_s), max_s)
        if not verdict.busy or waited >= max_s:
            break
    return verdict
