"""Memory samplers: VRAM per GPU and this process's share from NVML where it can tell, RAM otherwise."""

import os
from types import SimpleNamespace

import pynvml
import pytest

from specchat.models.fit import ModelMemory
from specchat.telemetry.samplers import (
    NO_GPU,
    MemorySample,
    MemorySampler,
    NvmlSampler,
    RamSampler,
    default_sampler,
    estimated_shares,
)

MIB = 1024**2
GIB = 1024**3


class FakeNvml:
    """The few pynvml functions the sampler uses, for one or more fake GPUs."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported

    def __init__(self, gpus=1, compute=None, graphics=None, name=b"Fake GPU 24GB"):
        self.gpus = gpus
        self.compute = compute if compute is not None else []
        self.graphics = graphics if graphics is not None else []
        self.name = name
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetName(self, handle):
        return self.name

    def nvmlDeviceGetMemoryInfo(self, handle):
        i = handle[1]
        return SimpleNamespace(total=24 * GIB, used=(3 + i) * GIB, free=(21 - i) * GIB)

    def _procs(self, procs):
        if isinstance(procs, Exception):
            raise procs
        return procs

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._procs(self.compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._procs(self.graphics)


def proc(pid, used):
    return SimpleNamespace(pid=pid, usedGpuMemory=used)


def test_without_nvml_the_ram_sampler_says_so(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    sampler = default_sampler()
    assert isinstance(sampler, RamSampler) and isinstance(sampler, MemorySampler)
    assert sampler.description == NO_GPU == "no NVIDIA GPU: showing RAM"
    sample = sampler.sample()
    assert isinstance(sample, MemorySample)
    assert sample.rss > 0 and 0 < sample.ram_available <= sample.ram_total
    assert sample.gpus == () and sample.process_vram is None
    with pytest.raises(AttributeError):
        sample.rss = 0  # frozen: safe to hand to the GUI
    sampler.close()


def test_one_gpu_with_our_process_on_it():
    me = os.getpid()
    nvml = FakeNvml(compute=[proc(me + 1, 5 * GIB), proc(me, 1200 * MIB)])
    sampler = default_sampler(nvml)
    assert isinstance(sampler, NvmlSampler) and isinstance(sampler, MemorySampler)
    assert sampler.description == "Fake GPU 24GB"  # bytes from older pynvml become text
    sample = sampler.sample()
    (gpu,) = sample.gpus
    assert (gpu.index, gpu.used, gpu.total) == (0, 3 * GIB, 24 * GIB)
    assert gpu.process_used == 1200 * MIB  # ours, not the other process's
    assert sample.process_vram == 1200 * MIB
    assert sample.rss > 0  # RAM is sampled too
    sampler.close()
    sampler.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_per_process_numbers_that_nvml_cannot_tell_are_none():
    me = os.getpid()
    not_supported = pynvml.NVMLError_NotSupported(pynvml.NVML_ERROR_NOT_SUPPORTED)
    # compute list not supported (e.g. WDDM): the graphics list still tells
    s = NvmlSampler(FakeNvml(compute=not_supported, graphics=[proc(me, 300 * MIB)])).sample()
    assert s.gpus[0].process_used == 300 * MIB
    # neither list supported: unknown, not zero
    s = NvmlSampler(FakeNvml(compute=not_supported, graphics=not_supported)).sample()
    assert s.gpus[0].process_used is None and s.process_vram is None
    assert s.gpus[0].used == 3 * GIB  # the card's total still shows
    # listed, but the driver does not say how much (usedGpuMemory None)
    s = NvmlSampler(FakeNvml(compute=[proc(me, None)])).sample()
    assert s.gpus[0].process_used is None
    # not listed at all (another pid namespace, or no context yet)
    s = NvmlSampler(FakeNvml(compute=[proc(me + 1, GIB)])).sample()
    assert s.gpus[0].process_used is None


def test_two_gpus_and_the_process_total():
    me = os.getpid()
    s = NvmlSampler(FakeNvml(gpus=2, compute=[proc(me, GIB)]), pid=me).sample()
    assert [g.used for g in s.gpus] == [3 * GIB, 4 * GIB]
    assert s.process_vram == 2 * GIB


def test_a_machine_with_nvml_but_no_gpu_shows_ram():
    nvml = FakeNvml(gpus=0)
    sampler = default_sampler(nvml)
    assert isinstance(sampler, RamSampler) and sampler.description == NO_GPU
    assert nvml.shutdowns == 1


def test_ram_sampler_uses_the_given_clock():
    assert RamSampler(clock=lambda: 42.0).sample().t == 42.0


QWEN_15B = ModelMemory("target", weights=1000 * MIB, per_layer=30 * MIB, n_layers=28, kv_cache=200 * MIB,
                       compute=100 * MIB, repack=500 * MIB)
QWEN_05B = ModelMemory("draft", weights=400 * MIB, per_layer=15 * MIB, n_layers=24, kv_cache=100 * MIB,
                       compute=50 * MIB, repack=200 * MIB)


def test_estimated_shares_of_a_pair():
    shares = {s.label: s for s in estimated_shares([QWEN_15B, QWEN_05B])}
    assert list(shares) == ["target weights", "draft weights", "KV caches", "buffers"]
    assert shares["target weights"].bytes == 1000 * MIB
    assert shares["draft weights"].bytes == 400 * MIB
    assert shares["KV caches"].bytes == 300 * MIB  # both caches
    assert shares["buffers"].bytes == 150 * MIB + 700 * MIB  # compute + the CPU's repacked copies
    total = QWEN_15B.total + QWEN_05B.total
    assert sum(s.bytes for s in shares.values()) == total
    assert sum(s.share for s in shares.values()) == pytest.approx(1.0)
    assert shares["target weights"].share == pytest.approx(1000 / 2550)


def test_estimated_shares_on_the_gpu_and_without_a_draft():
    gpu = {s.label: s.bytes for s in estimated_shares([QWEN_15B, QWEN_05B], on_gpu=True)}
    assert gpu["buffers"] == 150 * MIB  # no repacking when offloaded
    alone = [s.label for s in estimated_shares([QWEN_15B])]
    assert alone == ["target weights", "KV caches", "buffers"]
    assert estimated_shares([]) == ()
