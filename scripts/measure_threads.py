"""Decode speed beside busy processes: threads fitted to the machine (engine/threads.py) against a fixed
thread per core, interleaved in one run.

Loads the pinned 1.5B target (plain decoding, no draft) once, then for each ``--busy`` level starts that
many ``while 1: pass`` processes, lets them run ``--settle`` seconds (as other work would, while the app
sat loaded), and alternates answers of ``--tokens`` tokens with the threads fitted (the app's default,
``threads = 0``) and fixed at one per physical core (``threads = N``), ``--repeat`` times each.  Prints
each answer's decode tok/s and the threads it ran on, and a median per level and way.

    python scripts/measure_threads.py [--busy 0 1 2] [--tokens 32] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="busy-loop processes at each level")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds the busy processes run before the first answer")
    ap.add_argument("--json", type=Path, default=None, help="append the figures as one JSON line here")
    args = ap.parse_args()

    import specchat  # noqa: F401  (llama.cpp before numpy)
    import test_models
    from specchat.engine import Done, Mode
    from specchat.engine.pair import PairConfig, SpeculativePair
    from specchat.engine.runtime import ModelOptions
    from specchat.engine.threads import ThreadFit

    target = test_models.ensure("qwen-1.5b", quiet=True)
    cache = Path(tempfile.gettempdir()) / "specchat-measure-threads-calibration.json"
    pair = SpeculativePair(PairConfig(target, None, ModelOptions(n_ctx=2048), calibration_cache=cache))
    most = pair.target.n_threads
    prompt = pair.chat_prompt([{"role": "user", "content": "Write a Python function that merges two sorted lists."}]).tokens
    print(f"target {target.name}, loaded with {most} threads; {args.tokens} tokens an answer", flush=True)

    def answer(fit: ThreadFit | None) -> tuple[float, tuple[int, int]]:
        pair.threads = fit
        if fit is None:
            pair.target.set_threads(most)
        for ev in pair.generate(prompt, mode=Mode.BASELINE, max_tokens=args.tokens):
            if isinstance(ev, Done):
                return ev.stats.counts.decode_tok_s, ev.stats.threads
        raise RuntimeError("no Done")

    results: dict[str, dict[str, list[float]]] = {}
    for level in args.busy:
        busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(level)]
        try:
            fit = ThreadFit(most)  # the app's: made at load, judging the stretch since
            time.sleep(args.settle)
            runs: dict[str, list[float]] = {"fitted": [], f"fixed {most}": []}
            for r in range(args.repeat):
                for way in runs:
                    tok_s, threads = answer(fit if way == "fitted" else None)
                    runs[way].append(tok_s)
                    ran = f"threads {threads[0]} of {threads[1]}" if threads[1] else f"threads {most} (fixed)"
                    print(f"  busy {level}  #{r + 1}  {way:>8}: {tok_s:6.2f} tok/s  ({ran})", flush=True)
        finally:
            for p in busy:
                p.kill()
                p.wait()
        line = ", ".join(f"{way} median {statistics.median(v):.2f} tok/s" for way, v in runs.items())
        print(f"busy {level}: {line}", flush=True)
        results[str(level)] = runs
    pair.close()
    if args.json is not None:
        with args.json.open("a") as f:
            f.write(json.dumps({"tokens": args.tokens, "most": most, "results": results}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
