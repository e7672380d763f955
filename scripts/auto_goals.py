"""auto against plain and against the best fixed K, on every shipped profile, over several seeds.

`specchat simulate` prints one seed of one trace; a change to the controller moves single cells by
a few percent either way.  This replays the builtin trace and the kit's agreement pairs (alpha 0.6,
0.8, 0.9) on every shipped profile for each seed, averages each task column over the seeds, and
prints the worst columns and how many miss issue 32's goals (auto >= 0.99x plain, >= 0.97x the
best fixed K)::

    python scripts/auto_goals.py                # seeds 0, 1, 2: about a minute on two cores
    python scripts/auto_goals.py --seeds 3,4,5
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy)
from specchat.harness import simulate as sim  # noqa: E402
from specchat.harness.trace import load_trace  # noqa: E402

TRACE = ROOT / "docs" / "traces" / "qwen2.5-coder-1.5b+0.5b.builtin.json"
ALPHAS = (0.6, 0.8, 0.9)
PLAIN_GOAL, BEST_K_GOAL = 0.99, 0.97


def one(job: tuple[str, int]) -> dict[str, tuple[float, float]]:
    """task -> (auto x plain, auto / best fixed K) for one profile and seed; "builtin" the whole trace."""
    name, seed = job
    profile = sim.load_profile(name)
    out = {}
    for result in (sim.simulate(load_trace(TRACE), profile, seed=seed),
                   sim.simulate_agreement(ALPHAS, profile, seed=seed)):
        for task in result.tasks:
            _key, best = result.best_fixed(task)
            label = "builtin" if task == "all" and "code" in result.tasks else task
            if task != "all" or label == "builtin":
                out[label] = (result.multiplier("auto", task), result.rate("auto", task) / best)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    names = sim.shipped_profiles()
    with ProcessPoolExecutor(2) as pool:
        runs = list(pool.map(one, [(n, s) for n in names for s in seeds]))
    cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for (name, _seed), out in zip([(n, s) for n in names for s in seeds], runs, strict=True):
        for task, v in out.items():
            cells.setdefault((name, task), []).append(v)
    mean = {k: (statistics.fmean(a for a, _ in v), statistics.fmean(b for _, b in v)) for k, v in cells.items()}
    for name in names:
        row = [f"{t} {p:.2f}/{b:.2f}" for (n, t), (p, b) in mean.items() if n == name and t != "builtin"]
        print(f"{name}: all {mean[(name, 'builtin')][0]:.3f}x plain; " + "  ".join(row))
    tasks = [(k, v) for k, v in mean.items() if k[1] != "builtin"]
    worst_plain = sorted(tasks, key=lambda kv: kv[1][0])[:5]
    worst_k = sorted(tasks, key=lambda kv: kv[1][1])[:5]
    print("worst auto x plain:    " + ", ".join(f"{n} {t} {v[0]:.3f}" for (n, t), v in worst_plain))
    print("worst auto / best K:   " + ", ".join(f"{n} {t} {v[1]:.3f}" for (n, t), v in worst_k))
    miss_p = sum(v[0] < PLAIN_GOAL for _, v in tasks)
    miss_k = sum(v[1] < BEST_K_GOAL for _, v in tasks)
    log_p = sum(math.log(min(v[0], 1.0)) for _, v in tasks)
    print(f"columns under {PLAIN_GOAL}x plain: {miss_p} of {len(tasks)}; under {BEST_K_GOAL}x the best K: {miss_k}; "
          f"sum of log shortfalls {log_p:.3f} (seeds {args.seeds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
