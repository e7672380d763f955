"""llama.cpp's CPU kernels on machines that advertise instructions they cannot run (issue 31).

A virtual machine can advertise AMX and fault (SIGILL) on the first tile instruction.  The probe
finds that out in child processes and the loads that follow avoid those kernels.  Most CPUs that run
these tests have no such fault, so the faulting children here are small scripts that die by the same
signal at the same step; the real child (real llama.cpp, a tiny model it writes) runs as well.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specchat.engine import cpu_kernels
from specchat.engine.cpu_kernels import CpuVerdict
from specchat.errors import exit_description

FAKE_CHILD = r"""
import json, os, signal, sys
mode, work = sys.argv[1], sys.argv[2]
def say(**m):
    print(json.dumps(m), flush=True)
fault = os.environ.get("FAKE_FAULT", "none")
if fault == "hang":
    import time; time.sleep(60)
if fault == "error":
    say(error="RuntimeError: llama_model_quantize failed"); sys.exit(1)
say(loaded="q4_0", buffers=["AMX", "CPU_REPACK"] if mode == "on" else [])
if fault == "all" or (fault == "extra" and mode == "on"):
    signal.signal(signal.SIGILL, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGILL)
say(decoded="q4_0")
say(ok=True)
"""


@pytest.fixture
def fake_child(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    return [sys.executable, str(script)]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No verdict in this process, none kept, no override: the next verdict() asks."""
    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "_verdict", None)
    kept = tmp_path / "cache" / cpu_kernels.CACHE_NAME
    monkeypatch.setattr(cpu_kernels, "cache_file", lambda: kept)
    return kept


def test_a_child_killed_by_sigill_with_extra_buffers_means_they_are_not_used(fake_child, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "extra")
    v = cpu_kernels.probe(fake_child)
    assert (v.state, v.extra_buffers, v.signal) == ("faults", False, "SIGILL")
    assert v.buffers == ("AMX", "CPU_REPACK")
    # --self-test and the About box say it in one line, naming the kernels that fault
    assert v.line().startswith("llama.cpp's AMX kernels fault on this machine (SIGILL): not used")
    assert "\n" not in v.line()


def test_a_clean_child_means_nothing_changes(fake_child, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "none")
    v = cpu_kernels.probe(fake_child)
    assert (v.state, v.extra_buffers) == ("runs", True)
    assert "run here" in v.line() and "AMX" in v.line()


def test_kernels_that_fault_even_without_extra_buffers_refuse_a_load_in_one_line(fake_child, monkeypatch, fresh):
    monkeypatch.setenv("FAKE_FAULT", "all")
    v = cpu_kernels.probe(fake_child)
    assert (v.state, v.extra_buffers) == ("broken", False)
    monkeypatch.setattr(cpu_kernels, "_verdict", v)
    with pytest.raises(cpu_kernels.CpuKernelError, match="built for another CPU; reinstall it here") as info:
        cpu_kernels.extra_buffers()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fault, said", [("hang", "took over 2 s"), ("error", "llama_model_quantize failed")])
def test_a_probe_that_cannot_answer_keeps_llamas_default_and_is_not_kept(fake_child, monkeypatch, fresh, fault, said):
    monkeypatch.setenv("FAKE_FAULT", fault)
    v = cpu_kernels.probe(fake_child, timeout_s=2)
    assert (v.state, v.extra_buffers) == ("unknown", True) and said in v.line()
    monkeypatch.setattr(cpu_kernels, "probe", lambda: v)
    assert cpu_kernels.verdict() == v
    assert not fresh.exists()  # the next start asks again


def test_the_verdict_is_probed_once_per_build_and_cpu_and_kept(monkeypatch, fresh):
    calls = []
    found = CpuVerdict("faults", False, ("AMX",), "SIGILL", "llama.cpp's AMX kernels fault on this machine")
    monkeypatch.setattr(cpu_kernels, "probe", lambda: calls.append(1) or found)
    monkeypatch.setattr(cpu_kernels, "machine_key", lambda: "build-1 cpu-1")
    assert cpu_kernels.verdict() == found and len(calls) == 1
    assert cpu_kernels.verdict() == found and len(calls) == 1  # this process
    monkeypatch.setattr(cpu_kernels, "_verdict", None)
    assert cpu_kernels.verdict() == found and len(calls) == 1  # the next process reads the kept one
    assert json.loads(fresh.read_text())["key"] == "build-1 cpu-1"
    monkeypatch.setattr(cpu_kernels, "_verdict", None)
    monkeypatch.setattr(cpu_kernels, "machine_key", lambda: "build-2 cpu-1")  # llama-cpp-python reinstalled
    assert cpu_kernels.verdict() == found and len(calls) == 2
    monkeypatch.setattr(cpu_kernels, "_verdict", None)
    fresh.write_text("{not json")  # damaged: asked again, never a reason to fail
    assert cpu_kernels.verdict() == found and len(calls) == 3
    cpu_kernels.forget()
    assert not fresh.exists()


def test_the_environment_decides_without_a_probe(monkeypatch, fresh):
    monkeypatch.setattr(cpu_kernels, "probe", lambda: pytest.fail("probed"))
    monkeypatch.setenv(cpu_kernels.ENV, "off")
    assert cpu_kernels.extra_buffers() is False and "SPECCHAT_EXTRA_BUFFERS=off" in cpu_kernels.verdict().line()
    assert cpu_kernels.server_args(frozenset({"--no-repack", "--repack"})) == ["--no-repack"]
    assert cpu_kernels.server_args(frozenset({"--repack"})) == ["--repack", "0"]  # llama-bench's spelling
    monkeypatch.setenv(cpu_kernels.ENV, "on")
    assert cpu_kernels.extra_buffers() is True and cpu_kernels.server_args(frozenset({"--no-repack"})) == []


def test_the_real_child_writes_quantizes_loads_and_decodes_a_batch(tmp_path):
    """The real probe child on this machine: without extra buffer types it always finishes; with them it
    finishes or dies by a signal (the fault it is there to find), never with an error of its own."""
    off = cpu_kernels.run_child(cpu_kernels.child_command(False, tmp_path))
    assert off.finished, off
    assert [m.get("decoded") for m in off.said if "decoded" in m] == ["q4_0", "q8_0", "q4_k_m"]
    assert off.buffers == ()
    on = cpu_kernels.run_child(cpu_kernels.child_command(True, tmp_path))
    assert on.finished or (on.returncode is not None and on.returncode < 0), on
    assert not on.error


def test_the_exit_of_a_child_is_said_in_words():
    assert exit_description(-4) == "was killed by SIGILL (illegal instruction)"
    assert exit_description(-11) == "was killed by SIGSEGV (segmentation fault)"
    assert exit_description(2) == "exited with status 2"
    assert exit_description(None) == "is still running"


# -- the verdict reaches every load ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_q4_0(tmp_path_factory) -> Path:
    """The probe's own tiny model, Q4_0 (a type every CPU backend repacks where it can)."""
    from specchat.engine.cpu_kernels_probe import quantize, write_model

    work = tmp_path_factory.mktemp("tiny")
    write_model(work / "f32.gguf")
    quantize(work / "f32.gguf", work / "q4_0.gguf", 2)
    return work / "q4_0.gguf"


def test_a_faults_verdict_loads_without_extra_buffer_types_and_decodes_batches(tiny_q4_0, monkeypatch):
    from specchat.engine.runtime import LoadedModel, ModelOptions

    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "_verdict", CpuVerdict("faults", False, ("AMX",), "SIGILL"))
    with LoadedModel(tiny_q4_0, ModelOptions(n_ctx=128, n_gpu_layers=0, n_batch=64)) as model:
        assert model.extra_buffers is False
        assert set(model.buffer_types) <= {"CPU", "CPU_Mapped"}, model.buffer_types
        model.decode(list(range(3, 35)))
        model.decode([40])
        assert len(model.tokens) == 33


def test_a_runs_verdict_changes_nothing(tiny_q4_0, monkeypatch):
    """Where the probe says the kernels run, a load is llama.cpp's default (extra buffer types on)."""
    from specchat.engine.runtime import LoadedModel, ModelOptions

    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "_verdict", CpuVerdict("runs", True))
    options = ModelOptions(n_ctx=128, n_gpu_layers=0, n_batch=64)
    with LoadedModel(tiny_q4_0, options) as model:
        assert model.extra_buffers is True
        chosen = model.buffer_types
    with LoadedModel(tiny_q4_0, ModelOptions(n_ctx=128, n_gpu_layers=0, n_batch=64, extra_buffers=True)) as model:
        assert model.buffer_types == chosen


def test_a_broken_verdict_refuses_the_load_in_one_line(tiny_q4_0, monkeypatch):
    from specchat.engine.runtime import LlamaError, LoadedModel, ModelOptions

    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "_verdict", CpuVerdict("broken", False, (), "SIGILL", "llama.cpp's CPU kernels "
                                                            "fault on this machine (SIGILL): reinstall it"))
    with pytest.raises(LlamaError, match="reinstall it"):
        LoadedModel(tiny_q4_0, ModelOptions(n_ctx=128, n_gpu_layers=0))
