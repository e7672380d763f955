"""Memory samplers for the telemetry panel: VRAM from NVML where there is an NVIDIA GPU, RAM always.

Users ask two things: "how full is my card?" and "how much of that is this app?".
NVML answers the first per GPU and, where the driver allows it, the second by listing
the processes holding memory on each GPU (not on every platform: Windows WDDM and some
containers report no per-process numbers, or other pids).  Whatever NVML cannot tell
is None, never a guess.  Without NVIDIA's driver the panel shows RAM and says so.

The per-model estimate (which part is target weights, draft weights, KV caches) is not
measurable from outside llama.cpp, so it comes from the model manager's fit estimate
(:mod:`specchat.models.fit`) and is labelled an estimate.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol, runtime_checkable

import psutil

from specchat.models.fit import ModelMemory

NO_GPU = "no NVIDIA GPU: showing RAM"


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """One GPU at one moment, in bytes."""

    index: int
    name: str
    used: int
    total: int
    process_used: int | None  # this process's VRAM on this GPU; None where NVML cannot tell


@dataclass(frozen=True, slots=True)
class MemorySample:
    """Memory at one moment, in bytes; ``t`` is wall-clock seconds (time.time())."""

    t: float
    rss: int  # this process's resident set
    ram_available: int
    ram_total: int
    gpus: tuple[GpuMemory, ...] = ()

    @property
    def process_vram(self) -> int | None:
        """This process's VRAM over all GPUs, or None if NVML could tell it for none of them."""
        known = [g.process_used for g in self.gpus if g.process_used is not None]
        return sum(known) if known else None


@runtime_checkable
class MemorySampler(Protocol):
    """Something the panel's timer can ask for a :class:`MemorySample` (about once a second)."""

    description: str  # shown above the memory plot, e.g. "NVIDIA RTX 3090" or NO_GPU

    def sample(self) -> MemorySample: ...

    def close(self) -> None: ...


class RamSampler:
    """This process's RSS and the system's available RAM (psutil)."""

    def __init__(self, *, description: str = "RAM", clock: Callable[[], float] = time.time,
                 process: psutil.Process | None = None) -> None:
        self.description = description
        self._clock = clock
        self._process = process or psutil.Process(os.getpid())

    def sample(self) -> MemorySample:
        vm = psutil.virtual_memory()
        rss = int(self._process.memory_info().rss)
        return MemorySample(self._clock(), rss, int(vm.available), int(vm.total))

    def close(self) -> None:
        pass


class NvmlSampler:
    """VRAM per GPU and this process's share, plus RAM.

    Opens NVML in the constructor (raising ``pynvml.NVMLError`` when there is no
    driver) and shuts it down in :meth:`close`.  ``nvml`` is the pynvml module, or a
    stand-in with the same functions for tests.
    """

    def __init__(self, nvml: ModuleType | None = None, *, pid: int | None = None,
                 clock: Callable[[], float] = time.time, ram: RamSampler | None = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        self._pid = os.getpid() if pid is None else pid
        self._ram = ram or RamSampler(clock=clock)
        nvml.nvmlInit()
        self._open = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._names = [_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        except Exception:
            self.close()
            raise
        self.description = ", ".join(self._names) if self._names else NO_GPU

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    def _process_used(self, handle: object) -> int | None:
        """Our bytes on one GPU, from the compute list, else the graphics list; None if unknown.

        A process with a CUDA context shows up in the compute list; it may also appear in
        the graphics list with the same memory, so the lists are not added up.
        """
        nvml = self._nvml
        for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(nvml, query, None)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except nvml.NVMLError:  # NotSupported (e.g. WDDM), NoPermission ...: try the other list
                continue
            mine = [p.usedGpuMemory for p in procs if p.pid == self._pid]
            if mine:
                known = [m for m in mine if m is not None]  # None: the driver does not say
                return int(sum(known)) if known else None
        return None

    def sample(self) -> MemorySample:
        ram = self._ram.sample()
        gpus = []
        for i, handle in enumerate(self._handles):
            info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(GpuMemory(i, self._names[i], int(info.used), int(info.total),
                                  self._process_used(handle)))
        return MemorySample(ram.t, ram.rss, ram.ram_available, ram.ram_total, tuple(gpus))

    def close(self) -> None:
        if self._open:
            self._open = False
            self._handles = []
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()


def _text(name: str | bytes) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def default_sampler(nvml: ModuleType | None = None, *, pid: int | None = None,
                    clock: Callable[[], float] = time.time, ram: RamSampler | None = None) -> MemorySampler:
    """NVML when it starts and finds a GPU, else RAM only, described as such.

    Any failure to reach NVML (no package, no driver library, no device) means the
    same thing to the user: there is no NVIDIA GPU to show.
    """
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        sampler = NvmlSampler(nvml, pid=pid, clock=clock, ram=ram)
    except Exception:  # ImportError, pynvml.NVMLError (LibraryNotFound, DriverNotLoaded ...), OSError
        return RamSampler(description=NO_GPU)
    if sampler.gpu_count == 0:
        sampler.close()
        return RamSampler(description=NO_GPU)
    return sampler


# -- the estimated shares ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryShare:
    label: str
    bytes: int
    share: float  # of the estimated total, 0..1


def estimated_shares(models: Sequence[ModelMemory], *, on_gpu: bool = False) -> tuple[MemoryShare, ...]:
    """Split the fit estimate into what a user can act on: target and draft weights, KV caches, buffers.

    ``models`` is ordered as in :func:`specchat.models.fit.fit_pair` (target first, then the
    draft, if any).  "buffers" are the compute buffers and, on the CPU, the repacked copy
    of Q4_0/Q4_K/IQ4_NL matrices llama.cpp makes for its SIMD kernels (not made when the
    layers are offloaded, hence ``on_gpu``).  Shares with no bytes are left out.
    """
    if not models:
        return ()
    target, drafts = models[0], models[1:]
    parts = [
        ("target weights", target.weights),
        ("draft weights", sum(m.weights for m in drafts)),
        ("KV caches", sum(m.kv_cache for m in models)),
        ("buffers", sum(m.compute + (0 if on_gpu else m.repack) for m in models)),
    ]
    total = sum(b for _, b in parts)
    return tuple(MemoryShare(label, int(b), b / total) for label, b in parts if b > 0)
