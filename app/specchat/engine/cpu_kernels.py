"""Which of llama.cpp's CPU kernels this machine can run: found once, in a child process, and kept.

llama.cpp puts weights that stay on the CPU into *extra buffer types* where it has faster kernels
for them: ``AMX`` (Intel's tile instructions, on CPUs that advertise them) and ``CPU_REPACK``
(interleaved layouts for AVX2/AVX-512 and ARM), chosen from what the CPU advertises.  A virtual
machine can advertise AMX (``amx_tile amx_int8`` in /proc/cpuinfo, ``arch_prctl`` granting the
tile state) and still fault on the first tile instruction: ``tileloadd`` raises SIGILL at the first
batch of more than one token, and the process dies with no word (llama.cpp #28756, #28328).  A
one-token decode does not touch the tiles, so a model loads and even answers "hi".

So before the first model loads, :func:`verdict` runs :mod:`.cpu_kernels_probe` in a child
process: a tiny model written on the spot, quantized to the types those kernels take (Q4_0, Q8_0,
Q4_K/Q6_K), loaded with the extra buffer types and fed a 32-token batch.  If the child dies from a
signal and AMX was in use, a second child tries again with AMX's tile permission refused
(:mod:`.amx_off`), and if that dies too, a third without extra buffer types.  The verdict is kept in
the user cache, keyed by the llama.cpp build (its libraries' sizes and times) and the CPU (model name
and flags), so the probe runs once per machine and build (about 0.5 s), never in the process that
would crash.

- runs: nothing changes (llama.cpp's default, extra buffer types on);
- faults, AMX alone: AMX's tile permission is refused in this process (a seccomp filter its children
  inherit, so SpecChat's llama-servers too) and the repacked kernels stay: the narrowest switch
  (turning every extra buffer type off costs 1.18-1.25x per decoded token here, docs/benchmarks.md);
- faults: models load with ``use_extra_bufts = false`` and SpecChat's llama-servers get
  ``--no-repack`` (the same switch); the extra buffer types seen are named ("AMX faults ...");
- broken: even plain kernels fault (a llama.cpp built for another CPU): a load is refused in one
  line that says to rebuild llama-cpp-python on this machine;
- unknown: the probe could not run (a timeout, an unreadable answer); llama.cpp's default stands and
  nothing is kept, so the next start asks again.

``SPECCHAT_EXTRA_BUFFERS=on|noamx|off`` decides without a probe.  This module never imports llama.cpp:
the server side (which must not load a model) asks it too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from specchat import bounded_json
from specchat.engine import amx_off
from specchat.errors import UserError, exit_description, one_line
from specchat.files import write_text_atomically

log = logging.getLogger("specchat")

ENV = "SPECCHAT_EXTRA_BUFFERS"  # on | noamx | off: skip the probe (a user's way out, and the tests')
CACHE_NAME = "cpu-kernels.json"
FORMAT = 2  # the cache file's layout; another one is probed again
PROBE_TIMEOUT_S = 180.0  # a child on a loaded two-core machine imports and probes in 2-10 s
STATES = ("runs", "faults", "broken", "unknown", "forced")


class CpuKernelError(UserError):
    """This llama.cpp build cannot run on this CPU at all; one line saying what to do."""


@dataclass(frozen=True, slots=True)
class CpuVerdict:
    state: str  # one of STATES
    extra_buffers: bool  # load weights with llama.cpp's extra buffer types
    buffers: tuple[str, ...] = ()  # the extra buffer types the probe saw llama.cpp choose
    signal: str = ""  # what killed the child ("SIGILL"), when one died
    detail: str = ""  # one line, for --self-test, the About box and a refused load
    amx_off: bool = False  # only AMX faults: refuse its tile permission (engine/amx_off.py), keep the rest

    def line(self) -> str:
        """One line for --self-test and the About box."""
        return self.detail or f"llama.cpp's CPU kernels: {self.state}"


# Windows ends a process that faults with its exception code as the exit status, not a signal
_WINDOWS_FAULTS = {0xC000001D: "STATUS_ILLEGAL_INSTRUCTION", 0xC0000005: "STATUS_ACCESS_VIOLATION",
                   0xC0000096: "STATUS_PRIVILEGED_INSTRUCTION"}


def _crashed(returncode: int | None) -> bool:
    """Whether a child ended by a fault (a signal; on Windows, a fault's exception code)."""
    return returncode is not None and (returncode < 0 or (returncode & 0xFFFFFFFF) in _WINDOWS_FAULTS)


def _signal_name(returncode: int) -> str:
    if (returncode & 0xFFFFFFFF) in _WINDOWS_FAULTS:
        return _WINDOWS_FAULTS[returncode & 0xFFFFFFFF]
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


# -- the key: which build on which CPU -------------------------------------------------------------


def _library_files() -> list[Path]:
    """llama-cpp-python's native libraries (found without importing it)."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.origin is None:
        return []
    lib = Path(spec.origin).parent / "lib"
    try:
        return sorted(p for p in lib.iterdir()
                      if p.is_file() and (".so" in p.name or p.suffix in (".dylib", ".dll")))
    except OSError:
        return []


def _cpu_identity() -> str:
    """The CPU as the kernels see it: model name and feature flags (Linux), else what platform says."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("model name", "flags", "Features", "CPU implementer", "CPU part") and name not in fields:
                    fields[name] = " ".join(value.split())
    except OSError:
        pass
    return json.dumps(fields, sort_keys=True) if fields else f"{platform.machine()} {platform.processor()}"


def machine_key() -> str:
    """A digest of the llama.cpp build and the CPU: a kept verdict holds only while both are the same."""
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    libs = []
    for p in _library_files():
        try:
            st = p.stat()
        except OSError:
            continue
        libs.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    text = json.dumps({"format": FORMAT, "llama_cpp_python": version, "libs": libs, "cpu": _cpu_identity(),
                       "machine": platform.machine(), "frozen": bool(getattr(sys, "frozen", False))}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cache_file() -> Path:
    """Where the verdict is kept: the user cache (XDG_CACHE_HOME moves it, as the tests do)."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specchat")) / CACHE_NAME


# -- the probe ---------------------------------------------------------------------------------------


CHILD_MODES = ("on", "noamx", "off")  # extra buffer types; the same with AMX's tiles refused; none


def child_command(mode: str, work: Path) -> list[str]:
    """The probe's child: this program again (``specchat --probe-cpu-kernels on|noamx|off DIR``)."""
    args = ["--probe-cpu-kernels", mode, str(work)]
    if getattr(sys, "frozen", False):  # the packaged app: its executable is SpecChat itself
        return [sys.executable, *args]
    return [sys.executable, "-m", "specchat", *args]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU's kernels are the question; a GPU would only slow the start
    env.pop(ENV, None)
    env.pop("SPECCHAT_LLAMA_LOG", None)
    return env


@dataclass(frozen=True, slots=True)
class ChildResult:
    returncode: int | None  # None: killed at the timeout
    said: tuple[dict[str, object], ...]  # its JSON lines, in order (what it reached before it died)

    @property
    def finished(self) -> bool:
        return self.returncode == 0 and any(m.get("ok") for m in self.said)

    @property
    def buffers(self) -> tuple[str, ...]:
        seen: list[str] = []
        for m in self.said:
            for b in m.get("buffers", ()) or ():  # type: ignore[attr-defined]
                if isinstance(b, str) and b not in seen:
                    seen.append(b)
        return tuple(seen)

    @property
    def error(self) -> str:
        return next((str(m["error"]) for m in self.said if "error" in m), "")


def run_child(command: Sequence[str], timeout_s: float = PROBE_TIMEOUT_S) -> ChildResult:
    """Run one probe child; what it printed (JSON lines) and how it ended."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                    env=_child_env(), close_fds=True)
        except OSError as exc:
            return ChildResult(127, ({"error": f"could not start the probe: {exc}"},))
        try:
            rc: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        out.seek(0)
        text = out.read(1 << 20).decode("utf-8", errors="replace")
    said = []
    for line in text.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            said.append(msg)
    return ChildResult(rc, tuple(said))


def probe(command: Sequence[str] | None = None, *, timeout_s: float = PROBE_TIMEOUT_S) -> CpuVerdict:
    """Find out, in child processes, which of llama.cpp's extra CPU kernels run here.

    First with every extra buffer type; if that child dies by a fault and AMX was among them, again with
    AMX's tile permission refused (the repacked kernels kept); if that dies too (or AMX cannot be refused
    here), without extra buffer types.  ``command`` + ``[mode, work]`` is the child's command line (the
    tests give their own)."""
    if amx_off.installed():  # the children would inherit the refusal: what they say proves nothing
        return CpuVerdict("unknown", True, detail="llama.cpp's CPU kernels were not checked again "
                                                  "(AMX is already refused in this process)", amx_off=True)
    with tempfile.TemporaryDirectory(prefix="specchat-cpu-probe-") as tmp:
        work = Path(tmp)

        def child(mode: str) -> ChildResult:
            argv = [*command, mode, str(work)] if command is not None else child_command(mode, work)
            return run_child(argv, timeout_s)

        first = child("on")
        if first.finished:
            used = ", ".join(first.buffers) or "none"
            return CpuVerdict("runs", True, first.buffers,
                              detail=f"llama.cpp's CPU kernels run here (extra buffer types: {used})")
        if not _crashed(first.returncode):
            if first.returncode is None:
                why = f"the probe took over {timeout_s:g} s"
            else:
                why = first.error or f"the probe {exit_description(first.returncode)}"
            return CpuVerdict("unknown", True, first.buffers,
                              detail=f"llama.cpp's CPU kernels were not checked ({one_line(why, 200)}): "
                                     "its defaults are used")
        assert first.returncode is not None
        sig = _signal_name(first.returncode)
        if "AMX" in first.buffers and amx_off.supported():
            narrow = child("noamx")
            if narrow.finished:
                kept = ", ".join(narrow.buffers) or "none"
                return CpuVerdict("faults", True, first.buffers, sig, amx_off=True,
                                  detail=f"llama.cpp's AMX kernels fault on this machine ({sig}): not used; its "
                                         f"other CPU kernels are (extra buffer types: {kept})")
        second = child("off")
        faulty = ", ".join(b for b in first.buffers if b != "CPU_REPACK") or ", ".join(first.buffers) or "extra buffer"
        if second.finished:
            return CpuVerdict("faults", False, first.buffers, sig,
                              detail=f"llama.cpp's {faulty} kernels fault on this machine ({sig}): not used "
                                     "(models load without extra buffer types; llama-server gets --no-repack)")
        if _crashed(second.returncode):
            return CpuVerdict("broken", False, first.buffers, sig,
                              detail=f"llama.cpp's CPU kernels fault on this machine ({sig}, with and without "
                                     "extra buffer types): this llama-cpp-python was built for another CPU; "
                                     "reinstall it here: pip install --force-reinstall --no-cache-dir "
                                     "llama-cpp-python")
        return CpuVerdict("faults", False, first.buffers, sig,
                          detail=f"llama.cpp's {faulty} kernels fault on this machine ({sig}): not used")


# -- the verdict, once per process --------------------------------------------------------------------

_lock = threading.Lock()
_verdict: CpuVerdict | None = None
_warned_no_refusal = False


def _forced() -> CpuVerdict | None:
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("on", "1", "true", "yes"):
        return CpuVerdict("forced", True, detail=f"llama.cpp's extra buffer types: on ({ENV}={value})")
    if value in ("off", "0", "false", "no"):
        return CpuVerdict("forced", False, detail=f"llama.cpp's extra buffer types: off ({ENV}={value})")
    if value == "noamx":
        return CpuVerdict("forced", True, amx_off=True,
                          detail=f"llama.cpp's extra buffer types: on, AMX refused ({ENV}={value})")
    return None


def _read_kept(path: Path, key: str) -> CpuVerdict | None:
    try:
        doc = bounded_json.loads(path.read_text(encoding="utf-8"))  # a deep file is damaged, not a crash
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None
        v = doc["verdict"]
        verdict = CpuVerdict(str(v["state"]), bool(v["extra_buffers"]), tuple(str(b) for b in v["buffers"]),
                             str(v["signal"]), one_line(str(v["detail"])), bool(v["amx_off"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none, unreadable or another layout: probed again
    return verdict if verdict.state in STATES else None


def verdict(*, refresh: bool = False) -> CpuVerdict:
    """The verdict for this build on this CPU: the environment's, the kept one, or a new probe's."""
    global _verdict
    forced = _forced()
    if forced is not None:
        return forced
    with _lock:
        if _verdict is not None and not refresh:
            return _verdict
        path, key = cache_file(), machine_key()
        found = None if refresh else _read_kept(path, key)
        if found is None:
            t0 = time.monotonic()
            found = probe()
            log.info("probed llama.cpp's CPU kernels in %.1f s: %s", time.monotonic() - t0, found.detail)
            if found.state != "unknown":
                try:
                    write_text_atomically(path, json.dumps({"key": key, "verdict": asdict(found)}, indent=1) + "\n")
                except (OSError, UserError) as exc:  # kept for this process only; the next one asks again
                    log.warning("could not keep the CPU kernel verdict in %s: %s", path, exc)
            if found.state in ("faults", "broken"):
                log.warning("%s", found.detail)
        _verdict = found
        return found


def known() -> CpuVerdict | None:
    """The verdict if one is at hand (this process's, the environment's or the kept one), never probing
    and never waiting for a probe under way: for the About box, on the GUI thread."""
    forced = _forced()
    if forced is not None:
        return forced
    current = _verdict  # one reference read: no lock, so a probe running in another thread never blocks this
    if current is not None:
        return current
    return _read_kept(cache_file(), machine_key())


def forget() -> None:
    """Drop the kept verdict (after a crash in llama.cpp: the next load probes again)."""
    global _verdict
    with _lock:
        _verdict = None
        with contextlib.suppress(OSError):
            cache_file().unlink()


def extra_buffers() -> bool:
    """Whether models load with llama.cpp's extra buffer types (:class:`CpuKernelError` when no kernel runs).
    Where only AMX faults, its tile permission is refused in this process first (and its children)."""
    v = verdict()
    if v.state == "broken":
        raise CpuKernelError(v.detail)
    if v.extra_buffers and v.amx_off:
        if amx_off.deny():
            return True
        global _warned_no_refusal
        if not _warned_no_refusal:  # not Linux x86-64, or seccomp refused here: none of them, then
            _warned_no_refusal = True
            log.warning("AMX's tile permission cannot be refused here: llama.cpp's extra CPU kernels are off instead")
        return False
    return v.extra_buffers


def server_args(supports: set[str] | frozenset[str]) -> list[str]:
    """The llama-server (or llama-bench) flags that keep it off kernels that fault here, among the flags
    ``supports`` lists: ``--no-repack`` (llama-server, the same switch as ``use_extra_bufts``) or
    ``--repack 0`` (llama-bench)."""
    try:
        if extra_buffers():  # AMX refused in this process where it faults: the server inherits that
            return []
    except CpuKernelError:
        pass  # no kernel runs: the server dies as a model load would, and says so

    if "--no-repack" in supports:
        return ["--no-repack"]
    if "--repack" in supports:
        return ["--repack", "0"]
    return []
