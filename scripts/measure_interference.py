"""Does a draft decode slow the target's next decode on a CPU?  One process, both models, interleaved.

Loads a target and a draft (CPU, ``--threads`` each, as the loop runs them) and, ``--repeat`` times,
times the target's one-token decode in a steady stream, right after one draft decode, after one
draft decode and a 5 ms pause, and after three draft decodes; prints the median of each in ms.
Where "after" is no slower than "steady", the two models do not get in each other's way (OpenMP
threads, caches) and a slower plain round beside a draft is the machine's other work.

    python scripts/measure_interference.py                       # the pinned 1.5B + 0.5B pair
    python scripts/measure_interference.py --target T.gguf --draft D.gguf --repeat 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, default=None, help="default: the pinned Qwen2.5-Coder 1.5B")
    ap.add_argument("--draft", type=Path, default=None, help="default: the pinned Qwen2.5-Coder 0.5B")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=40)
    args = ap.parse_args()
    if not 1 <= args.repeat <= 400:  # 8 target decodes a repeat must fit the 4,096-token context
        ap.error("--repeat: 1 to 400")

    import specchat  # noqa: F401  (llama.cpp before numpy)
    import test_models
    from specchat.engine.runtime import LoadedModel, ModelOptions

    target_path = args.target or test_models.ensure("qwen-1.5b", quiet=True)
    draft_path = args.draft or test_models.ensure("qwen-0.5b", quiet=True)
    options = ModelOptions(n_ctx=4096, n_gpu_layers=0, n_threads=args.threads)
    target, draft = LoadedModel(target_path, options), LoadedModel(draft_path, options)
    prompt = list(range(1000, 1064))  # any tokens: only the time is read
    target.decode(prompt)
    draft.decode(prompt)
    clock = time.perf_counter

    def target_step() -> float:
        start = clock()
        target.decode([1234])
        return clock() - start

    def draft_step() -> float:
        start = clock()
        draft.decode([1234])
        return clock() - start

    times: dict[str, list[float]] = {"steady": [], "after_draft": [], "after_draft_5ms": [], "after_3_drafts": [],
                                     "draft": []}
    for _ in range(args.repeat):  # 8 target and 5 draft decodes a repeat
        target_step(), target_step()
        times["steady"] += [target_step() for _ in range(3)]
        times["draft"].append(draft_step())
        times["after_draft"].append(target_step())
        draft_step()
        time.sleep(0.005)
        times["after_draft_5ms"].append(target_step())
        draft_step(), draft_step(), draft_step()
        times["after_3_drafts"].append(target_step())
    medians = {k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()}
    print(json.dumps({"target": target_path.name, "draft": draft_path.name, "threads": args.threads,
                      "repeat": args.repeat, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", ""),
                      "median_ms": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
