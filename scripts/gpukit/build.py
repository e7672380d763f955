"""``build``: one cmake tree of the vendored llama.cpp (the shared libraries SpecChat loads, llama-server,
llama-bench) with llama-cpp-python's bindings laid over it in the site; detached, waited for, or the
prebuilt CUDA tree unpacked instead of compiled."""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from .common import (
    CARRY_LIMIT_BYTES,
    KIT_ARCH,
    KIT_SCRIPT,
    LLAMA_CPP_PYTHON,
    SDIST_NAME,
    build_dir,
    folder_size,
    use_site,
    write_json,
)
from .pack import PREBUILT, pack_prebuilt, unpack_prebuilt

# One cmake tree of the vendored llama.cpp serves both sides of the side-by-side: its shared
# libllama/libggml* are what llama-cpp-python's bindings load (site/llama_cpp/lib links to the
# build's bin/), and llama-server and llama-bench are linked against the very same libraries.
# Built once, it takes about 5.5 min at -j16 for CUDA sm_90 (two separate builds took 11).
BUILD_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
               "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
               "-DLLAMA_BUILD_APP=OFF", "-DGGML_RPC=OFF")
BUILD_TARGETS = ("llama", "llama-server", "llama-bench")


def install_wheels(kit: Path, site: Path) -> None:
    wheels = sorted((kit / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"{kit}/wheels: no wheels: run 'python scripts/gpu_kit.py pack' on a machine with network")
    site.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--upgrade", "--target", str(site), *map(str, wheels)], check=True)


CUDA_SHIM = "specchat-kit-cuda.json"  # in the site: the cuBLAS libraries to preload, when the shim is used


def _cublas_in_toolkit() -> bool:
    nvcc = shutil.which("nvcc")
    roots = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))]
    if nvcc:
        roots.append(Path(nvcc).resolve().parent.parent)
    return any(any(r.glob(f"{d}/libcublas.so")) for r in roots for d in ("lib64", "lib", "targets/*/lib"))


def _find_python_cublas() -> tuple[Path, Path, Path] | None:
    """libcublas, libcublasLt and cublas_v2.h's folder from the Python ``nvidia`` packages
    (PyTorch's own cuBLAS), or None."""
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    found: dict[str, Path] = {}
    for base in map(Path, getattr(nvidia, "__path__", [])):
        for f in base.rglob("*"):
            if re.fullmatch(r"libcublas\.so\.\d+", f.name):
                found.setdefault("cublas", f)
            elif re.fullmatch(r"libcublasLt\.so\.\d+", f.name):
                found.setdefault("cublasLt", f)
            elif f.name == "cublas_v2.h":
                found.setdefault("include", f.parent)
    if len(found) < 3:
        return None
    return found["cublas"], found["cublasLt"], found["include"]


def cublas_flags(site: Path) -> list[str]:
    """CMake flags that point llama.cpp at a cuBLAS when the CUDA toolkit has none (this workplace's
    partial toolkits ship nvcc and cudart only): PyTorch's, through unversioned links."""
    if _cublas_in_toolkit():
        return []
    hit = _find_python_cublas()
    if hit is None:
        print("warning: no libcublas.so in the CUDA toolkit nor in Python's nvidia packages: the build "
              "will stop at CUDA::cublas", flush=True)
        return []
    cublas, cublas_lt, include = hit
    shim = site.parent / "cublas-shim"
    shim.mkdir(parents=True, exist_ok=True)
    for name, real in (("libcublas.so", cublas), ("libcublasLt.so", cublas_lt)):
        link = shim / name
        link.unlink(missing_ok=True)
        link.symlink_to(real)
    site.mkdir(parents=True, exist_ok=True)
    (site / CUDA_SHIM).write_text(json.dumps({"preload": [str(cublas_lt), str(cublas)]}))
    print(f"cuBLAS from {cublas.parent} (the toolkit has none)", flush=True)
    return [f"-DCUDA_cublas_LIBRARY={shim / 'libcublas.so'}", f"-DCUDA_cublasLt_LIBRARY={shim / 'libcublasLt.so'}",
            f"-DCMAKE_CUDA_FLAGS=-I{include}", f"-DCMAKE_CXX_FLAGS=-I{include}"]


def preload_cuda_shim(site: Path) -> None:
    """Load the shim's cuBLAS globally, so the built library finds it without LD_LIBRARY_PATH."""
    marker = site / CUDA_SHIM
    if marker.is_file():
        for lib in json.loads(marker.read_text()).get("preload", []):
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)


BUILD_STATUS = "build-status.json"  # beside the site: running / done / failed, with times (``build --wait``)


def build(kit: Path, site: Path, *, cpu: bool, jobs: int, log: Path, from_index: bool = False) -> None:
    """Unpack the stripped sdist, build one cmake tree of its llama.cpp (the shared libraries,
    llama-server, llama-bench) and lay llama-cpp-python's bindings into ``site`` over those libraries."""
    archives = sorted(kit.glob(f"{SDIST_NAME}*.tar.xz"))
    if not archives:
        raise SystemExit(f"{kit}: no {SDIST_NAME}-stripped.tar.xz: run 'python scripts/gpu_kit.py pack' first")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise SystemExit("cmake not found: the build needs cmake and a C++ compiler")
    src_root = site.parent / "src"
    shutil.rmtree(src_root, ignore_errors=True)
    src_root.mkdir(parents=True)
    with tarfile.open(archives[0], "r:xz") as tar:
        tar.extractall(src_root, filter="data")
    (src,) = [p for p in src_root.iterdir() if p.is_dir()]
    if cpu:
        flags = ["-DGGML_CUDA=OFF"]
    elif from_index:  # NVIDIA's compiler and libraries from the package index, on a machine without a GPU
        from specchat.remote import cuda_toolchain

        tc = cuda_toolchain.ensure(log=lambda line: print(line, flush=True))
        flags = ["-DGGML_CUDA=ON", *tc.cmake_args(KIT_ARCH, origin=True)]
    else:
        flags = ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={KIT_ARCH}", *cublas_flags(site)]
    out_dir = build_dir(site)
    print(f"building llama.cpp {LLAMA_CPP_PYTHON} ({'CPU' if cpu else f'CUDA sm_{KIT_ARCH}'}, -j{jobs}: "
          f"{', '.join(BUILD_TARGETS)}) in {out_dir}; log: {log}", flush=True)
    t0 = time.perf_counter()
    with log.open("w") as out:
        for cmd in ([cmake, "-S", str(src / "vendor" / "llama.cpp"), "-B", str(out_dir), *flags, *BUILD_FLAGS],
                    [cmake, "--build", str(out_dir), "--config", "Release", "-j", str(jobs),
                     "--target", *BUILD_TARGETS]):
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                print("".join(log.read_text(errors="replace").splitlines(True)[-40:]))
                raise SystemExit(f"the build failed ({rc}); the whole log is {log}")
    # the bindings: llama-cpp-python's Python package, its lib/ the tree's bin/ (libllama.so and the
    # libggml*.so it needs, found there by their build RPATH)
    site.mkdir(parents=True, exist_ok=True)
    dest = site / "llama_cpp"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src / "llama_cpp", dest)
    lib = dest / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    lib.symlink_to(out_dir / "bin", target_is_directory=True)
    missing = [n for n in ("libllama.so", "llama-server", "llama-bench") if not (out_dir / "bin" / n).exists()]
    if missing:
        raise SystemExit(f"the build made no {', '.join(missing)} in {out_dir / 'bin'}; see {log}")
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)


def build_status(site: Path) -> dict[str, Any]:
    path = site.parent / BUILD_STATUS
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def set_build_status(site: Path, **fields: Any) -> None:
    site.parent.mkdir(parents=True, exist_ok=True)
    write_json(site.parent / BUILD_STATUS, {**build_status(site), **fields, "at": time.time()})


def wait_for_build(site: Path, seconds: float) -> int:
    """Wait for a detached build (this call or an earlier one); 0 done, 1 failed, 3 still running."""
    deadline = time.monotonic() + seconds
    while True:
        st = build_status(site)
        state = st.get("state")
        if state == "done":
            print(f"build done in {st.get('seconds', 0):.0f} s", flush=True)
            return 0
        if state == "failed" or not st:
            print(f"build {'failed' if st else 'never started here'}: {st.get('error', '')} "
                  f"(log {site.parent / 'build.log'})", flush=True)
            tail = (site.parent / "build.out")
            if tail.is_file():
                print("".join(tail.read_text(errors="replace").splitlines(True)[-20:]), flush=True)
            return 1
        pid = int(st.get("pid", 0))
        if pid and not Path(f"/proc/{pid}").exists():
            print(f"the build process {pid} is gone without a result (the machine went back?)", flush=True)
            return 1
        if time.monotonic() >= deadline:
            print(f"build still running after {time.time() - st.get('started', time.time()):.0f} s: "
                  "call 'build --wait S' again", flush=True)
            return 3
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))  # --wait S waits S, not a whole poll more


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------

def cmd_build(args: argparse.Namespace) -> int:
    """The build, in this process, or (``--detach``) in a process of its own session that outlives
    this device call; ``--wait S`` then waits up to S seconds for it (and is all a later call runs)."""
    if args.detach and not args.attached:
        args.site.parent.mkdir(parents=True, exist_ok=True)
        out = (args.site.parent / "build.out").open("w")
        argv = [sys.executable, str(KIT_SCRIPT), "build", "--attached", "--kit", str(args.kit),
                "--site", str(args.site), "--jobs", str(args.jobs), *(["--cpu"] if args.cpu else []),
                *(["--cuda-from-index"] if args.cuda_from_index else [])]
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        set_build_status(args.site, state="running", pid=proc.pid, started=time.time(), error="")
        print(f"build started (pid {proc.pid}, its own session); output in {args.site.parent / 'build.out'}",
              flush=True)
        return wait_for_build(args.site, args.wait)
    if args.wait and not args.attached:  # a later call: only wait for (or report) the detached build
        return wait_for_build(args.site, args.wait)
    t0 = time.time()
    set_build_status(args.site, state="running", pid=os.getpid(), started=t0, error="")
    try:
        install_wheels(args.kit, args.site)
        # a fresh site (every call on a GPU machine) was not there when main put it on sys.path: what follows
        # imports the carried wheels (platformdirs, as the CUDA runtime is looked for), which the GPU image's
        # python does not have
        use_site(args.site)
        importlib.invalidate_caches()
        if (args.kit / PREBUILT).is_file() and not args.cpu and not args.cuda_from_index:
            print(f"unpacking {PREBUILT} (built on the CPU machine) instead of compiling", flush=True)
            unpack_prebuilt(args.kit, args.site)
        else:
            build(args.kit, args.site, cpu=args.cpu, jobs=args.jobs, log=args.site.parent / "build.log",
                  from_index=args.cuda_from_index)
            if args.cuda_from_index:
                packed = pack_prebuilt(args.site, args.kit)
                size = folder_size(args.kit)
                print(f"{packed}: {packed.stat().st_size / 2**20:.1f} MiB; the kit is {size / 2**20:.1f} MiB"
                      + (f": over the {CARRY_LIMIT_BYTES >> 20} MiB the carry leaves it" if size > CARRY_LIMIT_BYTES
                         else ""), flush=True)
    except BaseException as exc:
        set_build_status(args.site, state="failed", error=str(exc)[:500])
        raise
    set_build_status(args.site, state="done", seconds=time.time() - t0)
    return 0
