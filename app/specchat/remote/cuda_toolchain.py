"""NVIDIA's CUDA compiler and libraries from the package index: a CUDA build without the CUDA toolkit.

NVIDIA publishes nvcc, the runtime, CCCL, the C runtime headers, NVVM and cuBLAS as wheels
(``nvidia-cuda-nvcc`` and friends).  Installed side by side with ``pip install --target`` they
lay out one toolkit-shaped folder, ``nvidia/cu13/{bin,include,lib,nvvm}``, that CMake's
``FindCUDAToolkit`` accepts once the unversioned library links a toolkit has are added
(``libcudart.so``, ``libcublas.so``, ``libcublasLt.so``) and ``lib64`` points at ``lib``.
One toolchain per CUDA series in the user cache::

    <cache>/cuda/13.0/nvidia/cu13/bin/nvcc ...
    <cache>/cuda/13.0/toolchain.json          the stamp: series, packages and versions

This module knows the toolchain, the card it builds for, and how llama-cpp-python is built with
it (:func:`build_bindings`); llama-server's build is :mod:`specchat.remote.build`, given
:meth:`Toolchain.cmake_args`.  Qt-free; its one error type is :class:`~specchat.remote.errors.ServerError`,
one line each: no NVIDIA GPU, a driver too old for the series, a card the series cannot
compile for, no compiler, no room on the disk, a download or install that failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from specchat.errors import one_line
from specchat.files import write_text_atomically
from specchat.remote.build import DIST, installed_version, last_error_line, run_logged
from specchat.remote.errors import ServerError

SERIES = "13.0"  # CUDA 13.0: the GPU machines' driver 580 and every card from Turing on
PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-nvvm",
            "nvidia-cublas")
# NVML's nvmlSystemGetCudaDriverVersion for the newest CUDA the driver runs (13000 = 13.0): a build
# against a newer runtime than that fails at the first call with "CUDA driver version is insufficient"
DRIVER_FOR_SERIES = {"13.0": (13000, "580")}
# CUDA 13 compiles for compute capability 7.5 (Turing) and newer; 5.x-7.0 left with CUDA 12
MIN_ARCH = {"13.0": 75}
KNOWN_ARCHES = (75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)
# measured on this project's machine: the six wheels are 0.53 GB and 0.84 GB installed; a
# llama.cpp CUDA tree for one architecture is about 1.5 GB while it builds
TOOLCHAIN_BYTES = 1_400_000_000
BUILD_BYTES = 2_000_000_000
STAMP = "toolchain.json"
# runs a command in a folder, its output appended to a log (remote.build.run_logged; env= the environment)
Runner = Callable[..., int]
_LINKS = {"libcudart.so": "libcudart.so.", "libcublas.so": "libcublas.so.", "libcublasLt.so": "libcublasLt.so."}


@dataclass(frozen=True, slots=True)
class Gpu:
    """The card a build is for: its name, compute capability (86 for 8.6) and the driver's CUDA (13000)."""

    name: str
    arch: int
    driver_cuda: int  # 0: not known (no driver asked: an architecture given by hand)

    @property
    def driver_text(self) -> str:
        return f"{self.driver_cuda // 1000}.{self.driver_cuda % 1000 // 10}" if self.driver_cuda else "unknown"


def parse_arch(text: str) -> int:
    """An architecture as a user writes it: ``sm_86``, ``86``, ``8.6`` or ``compute_86`` -> 86."""
    t = text.strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})", t) or re.fullmatch(r"(\d{1,2})\.(\d)", t)
    if m is None:
        raise ServerError(f"CUDA architecture {text[:40]!r}: give it as sm_86, 86 or 8.6")
    arch = int(m.group(1)) if m.lastindex == 1 else int(m.group(1)) * 10 + int(m.group(2))
    if arch not in KNOWN_ARCHES and arch >= MIN_ARCH[SERIES]:
        raise ServerError(f"CUDA architecture {arch}: not one CUDA {SERIES} knows "
                          f"({', '.join(map(str, KNOWN_ARCHES))})")
    return arch


def detect_gpu(nvml: ModuleType | None = None) -> Gpu:
    """The first NVIDIA GPU through NVML (the driver's own library), with its compute capability and
    the newest CUDA its driver runs.  Raises ServerError where there is no driver or no GPU."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            raise ServerError("no NVIDIA GPU found: the NVML bindings (nvidia-ml-py) are not installed; "
                              "give the card's architecture with --arch") from None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded ...
        raise ServerError(f"no NVIDIA GPU found: NVML cannot start ({one_line(str(exc)) or type(exc).__name__}); "
                          "install the NVIDIA driver, or give the card's architecture with --arch") from None
    try:
        if int(nvml.nvmlDeviceGetCount()) < 1:
            raise ServerError("no NVIDIA GPU found: the driver sees none; give the architecture with --arch")
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        name = nvml.nvmlDeviceGetName(handle)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        driver = int(nvml.nvmlSystemGetCudaDriverVersion())
    except ServerError:
        raise
    except Exception as exc:
        raise ServerError(f"NVIDIA GPU: NVML could not say what the card is ({one_line(str(exc))}); "
                          "give its architecture with --arch") from None
    finally:
        with contextlib.suppress(Exception):  # shutting down says nothing more
            nvml.nvmlShutdown()
    return Gpu(name.decode() if isinstance(name, bytes) else str(name), int(major) * 10 + int(minor), driver)


def check_gpu(gpu: Gpu, series: str = SERIES) -> None:
    """Raise ServerError where this series cannot build for the card or its driver cannot run the result."""
    if gpu.arch < MIN_ARCH[series]:
        raise ServerError(f"{gpu.name or 'the GPU'} is compute capability {gpu.arch // 10}.{gpu.arch % 10}; "
                          f"CUDA {series} builds for {MIN_ARCH[series] // 10}.{MIN_ARCH[series] % 10} (Turing) "
                          "and newer: install a CUDA 12 toolkit and use 'specchat servers build --cuda'")
    need, driver = DRIVER_FOR_SERIES[series]
    if gpu.driver_cuda and gpu.driver_cuda < need:
        raise ServerError(f"the NVIDIA driver runs CUDA {gpu.driver_text} and this build needs {series}: "
                          f"update the driver to {driver} or newer")


def check_tools() -> str:
    """cmake's path; raises ServerError where cmake or a C++ compiler is missing."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise ServerError("cmake not found: install cmake 3.21 or newer (e.g. apt install cmake, "
                          "or pip install cmake)")
    if not any(c and shutil.which(c) for c in (os.environ.get("CXX", ""), "c++", "g++", "clang++")):
        raise ServerError("C++ compiler not found: install one (e.g. apt install build-essential)")
    return cmake


def check_disk(folder: Path, need: int) -> None:
    """Raise ServerError where the disk that holds ``folder`` has less than ``need`` bytes free."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise ServerError(f"not enough disk for the CUDA build: {free / 1e9:.1f} GB free on {probe}, "
                          f"{need / 1e9:.1f} GB needed; free some space or set XDG_CACHE_HOME elsewhere")


@dataclass(frozen=True, slots=True)
class Toolchain:
    """A toolkit-shaped folder: ``bin/nvcc``, ``include``, ``lib`` (and ``lib64``), ``nvvm``."""

    root: Path
    versions: dict[str, str]

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    def cmake_args(self, arch: int, *, origin: bool = False) -> list[str]:
        """Configure arguments for ggml-cuda with this toolchain, for one architecture.  No VMM: the
        build then needs no libcuda at link time (the driver's library, which a machine without a GPU
        lacks); cudart and cuBLAS come from this toolchain, found at run time through the RPATH
        (``origin``: the binaries' own folder first, so a tree copied elsewhere finds its libraries)."""
        rpath = f"$ORIGIN;{self.lib}" if origin else str(self.lib)
        return [f"-DCMAKE_CUDA_COMPILER={self.nvcc}", f"-DCUDAToolkit_ROOT={self.root}",
                f"-DCMAKE_CUDA_ARCHITECTURES={arch}", "-DGGML_CUDA_NO_VMM=ON",
                f"-DCMAKE_BUILD_RPATH={rpath}", f"-DCMAKE_INSTALL_RPATH={rpath}"]

    def env(self) -> dict[str, str]:
        """The environment a build runs in: nvcc first on PATH, CUDA_PATH and CUDACXX at this toolchain."""
        env = dict(os.environ)
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["CUDA_PATH"] = env["CUDA_HOME"] = str(self.root)
        env["CUDACXX"] = str(self.nvcc)
        return env


def default_root() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specchat")) / "cuda"


def installed(root: Path, series: str = SERIES) -> Toolchain | None:
    """The toolchain of ``series`` under ``root`` when its stamp and nvcc are there, else None."""
    folder = root / series
    try:
        stamp = json.loads((folder / STAMP).read_text(encoding="utf-8")[:65536])
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("series") != series or not isinstance(stamp.get("root"), str):
        return None
    tc = Toolchain(folder / stamp["root"], {str(k): str(v) for k, v in dict(stamp.get("versions", {})).items()})
    return tc if tc.nvcc.is_file() else None


def ensure(root: Path | None = None, *, series: str = SERIES, log: Callable[[str], None] = print,
           run: Runner = run_logged) -> Toolchain:
    """The toolchain of ``series``, installed from the package index into ``root`` the first time.

    The wheels go into a temporary folder beside the final one, which is renamed into place only
    once nvcc answers, so a killed install leaves nothing half there.  ``run`` runs pip and nvcc
    (tests pass a fake)."""
    root = root or default_root()
    done = installed(root, series)
    if done is not None:
        return done
    root.mkdir(parents=True, exist_ok=True)
    check_disk(root, TOOLCHAIN_BYTES)
    pins = [f"{p}=={series}.*" for p in PACKAGES]
    log(f"installing NVIDIA's CUDA {series} compiler and libraries from the package index "
        f"({', '.join(PACKAGES)}; about 0.5 GB to download) into {root / series}")
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{series}-") as tmp:
        work = Path(tmp)
        log_path = root / f"{series}.log"
        rc = run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--disable-pip-version-check",
                  "--target", str(work / "site"), *pins], root, log_path)
        if rc != 0:
            raise ServerError(f"installing the CUDA {series} wheels failed (pip exit {rc}): "
                              f"{last_error_line(log_path)}; the whole output is in {log_path}")
        site = work / "site"
        cu = next((p for p in sorted((site / "nvidia").glob("cu*")) if (p / "bin" / "nvcc").is_file()), None)
        if cu is None:
            raise ServerError(f"the CUDA {series} wheels installed no nvidia/cu*/bin/nvcc; see {log_path}")
        _link_like_a_toolkit(cu)
        versions = _versions(site)
        if run([str(cu / "bin" / "nvcc"), "--version"], root, log_path) != 0:
            raise ServerError(f"nvcc from the CUDA {series} wheels does not run: {last_error_line(log_path)}")
        final = root / series
        if final.exists():
            shutil.rmtree(final)
        site.rename(final)
        stamp = {"series": series, "root": str(cu.relative_to(site)), "versions": versions}
        write_text_atomically(final / STAMP, json.dumps(stamp, indent=1) + "\n")
    tc = installed(root, series)
    if tc is None:  # pragma: no cover - the stamp was just written
        raise ServerError(f"the CUDA {series} toolchain in {root / series} could not be read back")
    log(f"CUDA {series} toolchain ready: {tc.nvcc}")
    return tc


def _link_like_a_toolkit(cu: Path) -> None:
    """The unversioned library names CMake's FindCUDAToolkit looks for, and lib64."""
    lib = cu / "lib"
    for name, prefix in _LINKS.items():
        real = sorted(p.name for p in lib.glob(prefix + "*") if re.fullmatch(re.escape(prefix) + r"\d+", p.name))
        if real and not (lib / name).exists():
            (lib / name).symlink_to(real[-1])
    if not (cu / "lib64").exists():
        (cu / "lib64").symlink_to("lib", target_is_directory=True)


def _versions(site: Path) -> dict[str, str]:
    out = {}
    for info in site.glob("nvidia_*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        out[name.replace("_", "-")] = version
    return dict(sorted(out.items()))




def build_bindings(tc: Toolchain, arch: int, wheel_dir: Path, *, version: str | None = None, jobs: int | None = None,
                   install: bool = True, log: Callable[[str], None] = print, run: Runner = run_logged) -> Path:
    """Build llama-cpp-python (the installed version) for CUDA ``arch`` with ``tc`` into a wheel in
    ``wheel_dir``, and (``install``) put it in place of this Python's llama-cpp-python.  Returns the wheel.

    pip builds it from the package index's source with the toolchain's configure arguments in
    ``CMAKE_ARGS``; the libraries find cudart and cuBLAS in the toolchain through their RPATH.
    On two cores this is about an hour (the CUDA kernels for one architecture); the log says how far."""
    version = version or installed_version()
    wheel_dir.mkdir(parents=True, exist_ok=True)
    check_disk(wheel_dir, BUILD_BYTES)
    log_path = wheel_dir / f"{DIST}-{version}-cuda{arch}.log"
    log_path.write_text(f"{DIST} {version} CUDA sm_{arch} build with {tc.nvcc}\n", encoding="utf-8")
    env = tc.env()
    env["CMAKE_ARGS"] = " ".join(["-DGGML_CUDA=ON", *tc.cmake_args(arch)])
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs if jobs and jobs > 0 else os.cpu_count() or 1)
    for old in wheel_dir.glob(f"{DIST}-{version}-*.whl"):
        old.unlink()
    log(f"building {DIST} {version} for CUDA sm_{arch} with {env['CMAKE_BUILD_PARALLEL_LEVEL']} job(s); "
        f"the log is {log_path}")
    with build_progress(log_path, log):
        rc = run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-binary", DIST, "--no-cache-dir",
                  "--disable-pip-version-check", "-w", str(wheel_dir), f"{DIST}=={version}"], wheel_dir, log_path,
                 env=env)
    if rc != 0:
        raise ServerError(f"building {DIST} for CUDA failed (pip exit {rc}): {last_error_line(log_path)}; "
                          f"the whole log is {log_path}")
    wheels = sorted(wheel_dir.glob(f"{DIST.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        raise ServerError(f"pip finished but left no {DIST} wheel in {wheel_dir}; see {log_path}")
    if install:
        log(f"installing {wheels[-1].name} into {sys.prefix}")
        rc = run([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall",
                  "--disable-pip-version-check", str(wheels[-1])], wheel_dir, log_path)
        if rc != 0:
            raise ServerError(f"installing the CUDA {DIST} failed (pip exit {rc}): {last_error_line(log_path)}")
    return wheels[-1]


# how far a build is: make's "[ 41%]" or Ninja's "[97/339]" (what pip's build of llama-cpp-python prints)
_PERCENT = re.compile(rb"^\s*\[\s*(\d{1,3})%\]|^\s*\[(\d+)/(\d+)\]", re.M)


def _percent(match: tuple[bytes, bytes, bytes]) -> int:
    pct, done, total = match
    return int(pct) if pct else int(done) * 100 // max(int(total), 1)


@contextlib.contextmanager
def build_progress(log_path: Path, log: Callable[[str], None], every_s: float = 30.0) -> Iterator[None]:
    """While the block runs, say every ``every_s`` how far the build in ``log_path`` is (the newest
    ``[ NN%]`` or ``[n/total]`` of its output), so an hour-long build is never silent; stops with the block."""
    stop = threading.Event()
    t0 = time.monotonic()

    def watch() -> None:
        said = -1
        while not stop.wait(every_s):
            try:
                with log_path.open("rb") as f:
                    f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
                    found = _PERCENT.findall(f.read())
            except OSError:
                continue
            if found and _percent(found[-1]) != said:
                said = _percent(found[-1])
                log(f"  {said}% compiled, {(time.monotonic() - t0) / 60:.0f} min so far")

    watcher = threading.Thread(target=watch, name="build-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=5)
