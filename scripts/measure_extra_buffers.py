"""What llama.cpp's extra CPU buffer types (repacked weights, AMX) are worth on this CPU: the cost of the
fallback that engine/cpu_kernels.py takes where they fault.

The same model is loaded twice in one process, with the extra buffer types and without, and the two
are timed in alternation (A B A B, so drift on a shared machine hits both alike): a one-token decode
and verifies of 3, 5 and 9 tokens at a fixed depth, each size after warm-up decodes of its own.

    python scripts/measure_extra_buffers.py [--model qwen-1.5b | --file MODEL.gguf] [--reps 15] [--depth 256]

Where this machine's probe found the extra kernels fault, only the fallback is measured (the other
would kill this process).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import specchat  # noqa: F401,I001  (loads llama.cpp's library before numpy)
import test_models
from gpukit.measure import fill_to, timed_decode

from specchat.engine import cpu_kernels
from specchat.engine.runtime import LoadedModel, ModelOptions

SIZES = (1, 3, 5, 9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen-1.5b", help="a model of scripts/test_models.py (default qwen-1.5b)")
    ap.add_argument("--file", type=Path, help="any GGUF file instead")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--depth", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="0: physical cores")
    args = ap.parse_args()
    path = args.file or test_models.ensure(args.model, quiet=True)
    verdict = cpu_kernels.verdict()
    print(f"{path.name}; {verdict.line()}", flush=True)
    ways = [False] if not verdict.extra_buffers else [True, False]
    models = {extra: LoadedModel(path, ModelOptions(n_ctx=args.depth + 64, n_gpu_layers=0, n_threads=args.threads,
                                                    extra_buffers=extra), n_outputs=max(SIZES))
              for extra in ways}
    for extra, model in models.items():
        print(f"  extra buffer types {'on ' if extra else 'off'}: weights in {', '.join(model.buffer_types)}",
              flush=True)
        fill_to(model, args.depth)
    times: dict[tuple[bool, int], list[float]] = {(e, n): [] for e in ways for n in SIZES}
    for _ in range(args.reps):
        for n in SIZES:
            for extra in ways:
                for _ in range(2):
                    timed_decode(models[extra], n)
                times[extra, n].append(timed_decode(models[extra], n))
    print(f"\nmedian of {args.reps}, {args.depth} tokens in the cache, {models[ways[0]].n_threads} threads")
    print("| tokens | " + " | ".join(f"extra {'on' if e else 'off'} ms" for e in ways)
          + " | " + " | ".join(f"x one token ({'on' if e else 'off'})" for e in ways)
          + (" | off / on |" if len(ways) == 2 else " |"))
    print("|---:|" + "---:|" * (2 * len(ways) + (len(ways) == 2)))
    one = {e: statistics.median(times[e, 1]) for e in ways}
    for n in SIZES:
        med = {e: statistics.median(times[e, n]) for e in ways}
        row = [f"{med[e] * 1e3:.1f}" for e in ways] + [f"{med[e] / one[e]:.2f}" for e in ways]
        if len(ways) == 2:
            row.append(f"{med[False] / med[True]:.2f}x")
        print(f"| {n} | " + " | ".join(row) + " |")
    for model in models.values():
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
