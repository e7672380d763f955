"""``specchat cuda-build``: a CUDA llama-cpp-python and llama-server for this machine's NVIDIA GPU,
built with NVIDIA's compiler from the package index (no CUDA toolkit needed).

Every way it can fail is one line and exit 2 (a ServerError): no GPU, a driver too old for the
toolchain, a card it cannot compile for, no cmake or C++ compiler, no room on the disk, a
download or build that failed (the log's path in the line).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specchat.remote import cuda_toolchain as cuda
from specchat.remote.errors import ServerError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cuda-build", help="build llama-cpp-python and llama-server for this NVIDIA GPU with "
                                          "NVIDIA's compiler from the package index (no CUDA toolkit needed)")
    p.add_argument("--arch", default="", help="the card's architecture (sm_86, 86 or 8.6; default: the first GPU's, "
                                             "through the driver); give it to build for another machine")
    p.add_argument("--jobs", type=int, default=0, help="compile jobs (default: every core)")
    p.add_argument("--check", action="store_true", help="check the GPU, driver, tools and disk, say what would be "
                                                        "built, and stop")
    p.add_argument("--no-server", action="store_true", help="build llama-cpp-python only, not llama-server")
    p.add_argument("--no-install", action="store_true",
                   help="leave the wheel in --wheel-dir instead of installing it into this Python")
    p.add_argument("--wheel-dir", type=Path, default=None, help="where the wheel goes (default: the user cache)")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_cuda_build(args: argparse.Namespace) -> int:
    from specchat.remote.build import build_llama_server, default_build_root, installed_version

    version = installed_version()
    if args.arch:
        arch = cuda.parse_arch(args.arch)
        try:  # the driver's CUDA where there is one here; a build for another machine needs none
            found = cuda.detect_gpu()
            driver = found.driver_cuda if found.arch == arch else 0
            gpu = cuda.Gpu(found.name if found.arch == arch else f"sm_{arch}", arch, driver)
        except ServerError:
            gpu = cuda.Gpu(f"sm_{arch}", arch, 0)
    else:
        gpu = cuda.detect_gpu()
    cuda.check_gpu(gpu)
    cuda.check_tools()
    root = cuda.default_root()
    wheel_dir = args.wheel_dir or root / "wheels"
    have = cuda.installed(root)
    cuda.check_disk(root, (0 if have else cuda.TOOLCHAIN_BYTES) + cuda.BUILD_BYTES * (1 if args.no_server else 2))
    jobs = args.jobs if args.jobs > 0 else os.cpu_count() or 1
    what = "llama-cpp-python" + ("" if args.no_server else " and llama-server")
    _say(f"GPU: {gpu.name}, compute capability {gpu.arch // 10}.{gpu.arch % 10}, driver CUDA {gpu.driver_text}; "
         f"toolchain: CUDA {cuda.SERIES} from the package index "
         f"({'installed' if have else 'to install, about 0.5 GB'}, {root / cuda.SERIES})")
    _say(f"builds {what} {version} for sm_{gpu.arch} with {jobs} job(s): each is about an hour on 2 cores, "
         "minutes on 16")
    if args.check:
        print("ready")
        return 0
    tc = cuda.ensure(root, log=_say)
    wheel = cuda.build_bindings(tc, gpu.arch, wheel_dir, version=version, jobs=jobs,
                                install=not args.no_install, log=_say)
    print(wheel)
    if not args.no_server:
        print(build_llama_server(default_build_root(), accel="cuda", jobs=jobs, log=_say,
                                 extra_args=tc.cmake_args(gpu.arch)))
    return 0
