"""llama.cpp's CPU kernels on machines that advertise instructions they cannot run (issue 31).

A virtual machine can advertise AMX and fault (SIGILL) on the first tile instruction.  The probe
finds that out in child processes and the loads that follow avoid those kernels.  Most CPUs that run
these tests have no such fault, so the faulting children here are small scripts that die by the same
signal at the same step; the real child (real llama.cpp, a tiny model it writes) runs as well.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.engine import amx_off, cpu_kernels
from specchat.engine.cpu_kernels import CpuVerdict
from specchat.errors import exit_description

FAKE_CHILD = r"""
import json, os, signal, sys
mode, work = sys.argv[1], sys.argv[2]
def say(**m):
    print(json.dumps(m), flush=True)
fault = os.environ.get("FAKE_FAULT", "none")
with open(os.path.join(os.path.dirname(__file__), "modes.txt"), "a") as f:
    f.write(mode + "\n")
if fault == "hang":
    import time; time.sleep(60)
if fault == "error":
    say(error="RuntimeError: llama_model_quantize failed"); sys.exit(1)
say(loaded="q4_0", buffers={"on": ["AMX", "CPU_REPACK"], "noamx": ["CPU_REPACK"], "off": []}[mode])
if fault == "all" or (fault == "extra" and mode != "off") or (fault == "amx" and mode == "on"):
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


def modes(fake_child) -> list[str]:
    return (Path(fake_child[1]).parent / "modes.txt").read_text().split()


@pytest.mark.skipif(not amx_off.supported(), reason="AMX is refused through seccomp on Linux x86-64 only")
def test_where_only_amx_faults_only_amx_is_refused_and_the_repacked_kernels_stay(fake_child, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "amx")
    v = cpu_kernels.probe(fake_child)
    assert modes(fake_child) == ["on", "noamx"]
    assert (v.state, v.extra_buffers, v.amx_off, v.signal) == ("faults", True, True, "SIGILL")
    # --self-test and the About box say it in one line, naming the kernels that fault and those kept
    assert v.line() == ("llama.cpp's AMX kernels fault on this machine (SIGILL): not used; its other CPU kernels "
                        "are (extra buffer types: CPU_REPACK)")


def test_where_the_repacked_kernels_fault_too_no_extra_buffer_type_is_used(fake_child, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "extra")
    v = cpu_kernels.probe(fake_child)
    assert modes(fake_child) == (["on", "noamx", "off"] if amx_off.supported() else ["on", "off"])
    assert (v.state, v.extra_buffers, v.amx_off, v.signal) == ("faults", False, False, "SIGILL")
    assert v.buffers == ("AMX", "CPU_REPACK")
    assert v.line().startswith("llama.cpp's AMX kernels fault on this machine (SIGILL): not used (models load "
                               "without extra buffer types; llama-server gets --no-repack)")
    assert "\n" not in v.line()


def test_a_clean_child_means_nothing_changes(fake_child, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "none")
    v = cpu_kernels.probe(fake_child)
    assert (v.state, v.extra_buffers, v.amx_off) == ("runs", True, False)
    assert "run here" in v.line() and "AMX" in v.line()
    assert modes(fake_child) == ["on"]  # one child where all runs


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
    monkeypatch.setenv(cpu_kernels.ENV, "noamx")
    v = cpu_kernels.verdict()
    assert (v.extra_buffers, v.amx_off) == (True, True) and "AMX refused" in v.line()


def test_the_real_child_writes_quantizes_loads_and_decodes_a_batch(tmp_path):
    """The real probe child on this machine: without extra buffer types it always finishes; with them it
    finishes or dies by a signal (the fault it is there to find), never with an error of its own."""
    off = cpu_kernels.run_child(cpu_kernels.child_command("off", tmp_path))
    assert off.finished, off
    assert [m.get("decoded") for m in off.said if "decoded" in m] == ["q4_0", "q8_0", "q4_k_m"]
    assert off.buffers == ()
    on = cpu_kernels.run_child(cpu_kernels.child_command("on", tmp_path))
    assert on.finished or (on.returncode is not None and on.returncode < 0), on
    assert not on.error
    if amx_off.supported():  # AMX refused: the child still loads, and keeps the other extra buffer types
        narrow = cpu_kernels.run_child(cpu_kernels.child_command("noamx", tmp_path))
        assert narrow.finished or (narrow.returncode is not None and narrow.returncode < 0), narrow
        assert "AMX" not in narrow.buffers


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


# -- AMX refused, the rest kept (engine/amx_off.py) --------------------------------------------------

AMX_OFF_CHILD = r"""
import errno, json, subprocess, sys
import specchat
from specchat.engine import amx_off, cpu_kernels
from specchat.engine.cpu_kernels import CpuVerdict
from specchat.engine.runtime import LoadedModel, ModelOptions
before = amx_off.tile_permission_errno()
cpu_kernels._verdict = CpuVerdict("faults", True, ("AMX", "CPU_REPACK"), "SIGILL", "x", amx_off=True)
with LoadedModel(sys.argv[1], ModelOptions(n_ctx=128, n_gpu_layers=0, n_batch=64)) as model:
    model.decode(list(range(3, 35)))
    out = {"extra": model.extra_buffers, "buffers": model.buffer_types}
grandchild = subprocess.run([sys.executable, "-c", "from specchat.engine import amx_off; "
                             "print(amx_off.tile_permission_errno())"], capture_output=True, text=True)
out |= {"before": errno.errorcode.get(before, "granted"), "after": errno.errorcode.get(amx_off.tile_permission_errno()),
        "grandchild": errno.errorcode.get(int(grandchild.stdout)), "server_args": cpu_kernels.server_args({"--no-repack"})}
print(json.dumps(out))
"""


@pytest.mark.skipif(not amx_off.supported(), reason="AMX is refused through seccomp on Linux x86-64 only")
def test_an_amx_off_verdict_refuses_the_tile_permission_to_the_process_and_its_children(tiny_q4_0, tmp_path):
    """In a child process (the refusal cannot be undone): a load under the verdict asks llama.cpp for its
    extra buffer types and refuses AMX's tiles to this process and the processes it starts (a llama-server
    inherits it, so it needs no --no-repack), on every CPU: granted or not before, EPERM after."""
    proc = subprocess.run([sys.executable, "-c", AMX_OFF_CHILD, str(tiny_q4_0)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["extra"] is True and "AMX" not in out["buffers"]
    assert out["after"] == "EPERM" and out["grandchild"] == "EPERM"
    assert out["server_args"] == []
