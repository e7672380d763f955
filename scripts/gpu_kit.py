"""The GPU kit: SpecChat beside llama-server on a GPU machine with no network, in two device calls.
Never run in CI (its CPU proof is: tests/scripts/test_gpu_kit.py).

- ``pack`` (here, with the network): the carry folder ``gpu-kit/`` (git-ignored, ~9.4 MiB): the
  llama-cpp-python 0.3.36 sdist stripped to what one build of its vendored llama.cpp reads (the
  server's and llama-bench's sources kept), the Qwen tokenizer as a tensor-less GGUF copied from the
  test model's header, and the pure-Python wheels SpecChat needs that the GPU image lacks.
- ``build`` (on the GPU machine, its own call: about 5.5 min at -j16 for CUDA sm_90): one cmake tree
  of the vendored llama.cpp (shared libllama/libggml*, llama-server, llama-bench) and the bindings
  laid over it in ``--site``, so SpecChat and llama-server run the same llama.cpp.  ``--detach``
  runs it in a session of its own that outlives the call; ``--wait S`` waits for it.
- ``measure`` (the next call, while the machine is warm: /tmp is kept only until it goes back,
  30 s after a call): agreement pairs, llama-bench, SpecChat's per-shape decode costs, and one
  interleaved ``specchat bench`` per alpha beside llama-server; ``OUT/report.md``,
  ``OUT/results.json``, ``OUT/logs.tar.gz``.
- ``pairs [--check]``: the agreement pairs alone; ``run``: the random-weight cost profile.

One device call, the CUDA tree built here first (no GPU time spent on compiling)::

    python scripts/gpu_kit.py pack
    python scripts/gpu_kit.py build --cuda-from-index --jobs 2 --site /tmp/kit-cuda/site --detach --wait 0
    python scripts/gpu_kit.py build --site /tmp/kit-cuda/site --wait 7200     # about 1 h 30 on two cores
    run(command="python3 scripts/gpu_kit.py build && PYTHONUNBUFFERED=1 python3 "
                "scripts/gpu_kit.py measure --out $OUT", carry=["gpu-kit"], timeout_s=480)

``build --cuda-from-index`` installs NVIDIA's compiler from the package index
(``specchat cuda-build``'s toolchain, :mod:`specchat.remote.cuda_toolchain`), builds the tree for
sm_90 and packs it into ``gpu-kit/prebuilt-cuda-sm90.tar.xz``; ``build`` on the GPU machine then
unpacks it (seconds) and links the machine's CUDA 13 runtime and cuBLAS beside it.  ``measure``
writes ``results.json`` after every stage, so a call cut short still returns what it measured.

Without a prebuilt tree, two device calls (the build there takes about 5.5 min at -j16)::

    run(command="python3 scripts/gpu_kit.py build --detach --wait 560", carry=["gpu-kit"], timeout_s=600)
    run(command="python3 scripts/gpu_kit.py build --wait 300 && PYTHONUNBUFFERED=1 python3 "
                "scripts/gpu_kit.py measure --out $OUT", carry=["gpu-kit"], timeout_s=600)

Proven here without a GPU (the CPU build takes ~3.5 min on two cores)::

    .venv/bin/python scripts/gpu_kit.py build --cpu --jobs 2 --detach --wait 600
    .venv/bin/python scripts/gpu_kit.py measure --cpu --shape tiny --f16 --alphas 0.6,0.9 --out /tmp/kit-out

The code is the package ``scripts/gpukit/``, one module per step: ``pack.py`` (the carry folder and
the prebuilt tree's archive), ``build.py``, ``models.py`` (the tokenizer and the GGUF synthesiser),
``pairs.py``, ``measure.py``, ``cost_profile.py`` (``run``) and ``common.py`` (paths and helpers);
this file is the command line.  All of it imports the standard library only until a command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gpukit.build import cmd_build, preload_cuda_shim
from gpukit.common import DEFAULT_SITE, DEFAULT_WORK, ROOT, SDIST_NAME, TEST_MODEL, TOKENIZER_FILE, use_site
from gpukit.cost_profile import cmd_run
from gpukit.measure import cmd_measure
from gpukit.models import SHAPES
from gpukit.pack import cmd_pack
from gpukit.pairs import cmd_pairs

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "pack": cmd_pack, "build": cmd_build, "run": cmd_run, "pairs": cmd_pairs, "measure": cmd_measure}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_kit.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="make the carry folder (here, with the network)")
    pack.add_argument("--sdist", type=Path, help=f"{SDIST_NAME}.tar.gz (default: pip download it)")
    pack.add_argument("--out", type=Path, default=ROOT / "gpu-kit")
    pack.add_argument("--tokenizer-from", type=Path, help=f"a Qwen2.5 GGUF (default: the test model {TEST_MODEL})")
    for name, help_ in (("build", "one cmake tree: llama.cpp's libraries for SpecChat, llama-server, llama-bench "
                              "(its own device call)"),
                        ("run", "synthesise, measure, write the profile (the next device call)")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--kit", type=Path, default=ROOT / "gpu-kit")
        s.add_argument("--site", type=Path, default=DEFAULT_SITE)
        s.add_argument("--cpu", action="store_true", help="no GPU: CPU build, n_gpu_layers=0")
        s.add_argument("--jobs", type=int, default=16)
    b = sub.choices["build"]
    b.add_argument("--detach", action="store_true", help="build in a process of its own session (outlives the call)")
    b.add_argument("--wait", type=float, default=0.0, help="wait up to S seconds for a detached build")
    b.add_argument("--attached", action="store_true", help=argparse.SUPPRESS)
    b.add_argument("--cuda-from-index", action="store_true",
                   help="CUDA with NVIDIA's compiler from the package index (specchat cuda-build's): on a machine "
                        "without a GPU or toolkit, for sm_90")
    run = sub.choices["run"]
    run.add_argument("--out", type=Path, default=Path("gpu-kit-out"))
    run.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where the GGUFs are made (~20 GB for qwen7b)")
    run.add_argument("--shapes", choices=sorted(SHAPES), default="qwen7b")
    run.add_argument("--skip-build", action="store_true", help="use the build of the previous call (or this Python's)")
    run.add_argument("--depth", type=int, default=256, help="tokens in the cache while measuring")
    run.add_argument("--k", type=int, default=8, help="the fixed draft length of the overhead rounds")
    run.add_argument("--reps", type=int, default=7, help="repeats of each verify size")
    run.add_argument("--plain-tokens", type=int, default=128)
    run.add_argument("--round-tokens", type=int, default=200)
    run.add_argument("--seed", type=int, default=0)
    pairs = sub.add_parser("pairs", help="agreement pairs: a target and drafts that agree with it on a share alpha")
    pairs.add_argument("--kit", type=Path, default=ROOT / "gpu-kit")
    pairs.add_argument("--site", type=Path, default=DEFAULT_SITE)
    pairs.add_argument("--shape", choices=sorted(SHAPES), default="qwen7b")
    pairs.add_argument("--alphas", default="0.6,0.8,0.9", help="the drafts' agreement shares")
    pairs.add_argument("--out", type=Path, default=DEFAULT_WORK / "pairs")
    pairs.add_argument("--tokenizer", type=Path, default=None,
                       help=f"a GGUF with the tokenizer (default: the kit's {TOKENIZER_FILE}, or the test model)")
    pairs.add_argument("--f16", action="store_true", help="keep F16 (no Q4_K_M): quicker, for tests")
    pairs.add_argument("--check", action="store_true", help="decode with llama.cpp and print the measured agreement")
    pairs.add_argument("--cpu", action="store_true", help="check on the CPU")
    pairs.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    m = sub.add_parser("measure", help="agreement pairs, llama-bench, SpecChat's shape costs and one bench per "
                                       "alpha beside llama-server: report.md, results.json, logs.tar.gz")
    m.add_argument("--kit", type=Path, default=ROOT / "gpu-kit")
    m.add_argument("--site", type=Path, default=DEFAULT_SITE)
    m.add_argument("--out", type=Path, default=Path("gpu-kit-out"))
    m.add_argument("--work", type=Path, default=DEFAULT_WORK / "pairs", help="where the pairs are made")
    m.add_argument("--shape", choices=sorted(SHAPES), default="qwen7b")
    m.add_argument("--alphas", default="0.6,0.8,0.9")
    m.add_argument("--tokenizer", type=Path, default=None)
    m.add_argument("--f16", action="store_true", help="F16 pairs (no Q4_K_M): quicker, for the CPU proof")
    m.add_argument("--cpu", action="store_true", help="no GPU: n_gpu_layers 0 everywhere")
    m.add_argument("--llama-server", type=Path, default=None, help="default: the kit build's")
    m.add_argument("--llama-bench", type=Path, default=None, help="default: the kit build's (left out if missing)")
    m.add_argument("--depth", type=int, default=256)
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--bench-tokens", type=int, default=128, help="llama-bench's tg length")
    m.add_argument("--max-tokens", type=int, default=256)
    m.add_argument("--repeat", type=int, default=1)
    m.add_argument("--tasks", default="code,chat")
    return p



def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command != "pack":
        use_site(args.site)
        preload_cuda_shim(args.site)
    import specchat  # noqa: F401  (before numpy: llama.cpp's library first, specchat/__init__.py says why)

    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
