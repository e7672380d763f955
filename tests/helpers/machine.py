"""A fake machine's CPU counters for the contention judge (engine/contention.py): tests say how busy
it was, never measure it."""

from specchat.engine.contention import CpuReading, MachineWatch


class FakeCpu:
    """Cumulative CPU counters of a 2-core machine; ``run`` advances them as a stretch of work would."""

    def __init__(self) -> None:
        self.now = CpuReading(at=0.0, busy_s=0.0, steal_s=0.0, total_s=0.0, own_s=0.0)

    def run(self, seconds: float, *, ours: float, others: float = 0.0, steal: float = 0.0, cores: int = 2) -> None:
        """``seconds`` of wall time with ``ours`` and ``others`` cores busy and ``steal`` cores stolen."""
        n = self.now
        self.now = CpuReading(n.at + seconds, n.busy_s + (ours + others) * seconds, n.steal_s + steal * seconds,
                              n.total_s + cores * seconds, n.own_s + ours * seconds)

    def __call__(self) -> CpuReading:
        return self.now


def watch(cpu: FakeCpu, ours: int = 2) -> MachineWatch:
    """A 2-core machine's judge whose decodes use ``ours`` cores, reading ``cpu``."""
    return MachineWatch(cores=2, ours=ours, read=cpu)
