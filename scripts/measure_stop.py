"""How long does Stop take while a long prompt is prefilled?  Seconds from ``CancelToken.cancel()`` to the
answer's ``Done``, on the real pair, as the app's generation thread sees it.

Loads the pinned Qwen2.5-Coder pair (1.5B target, 0.5B draft), builds a chat prompt of about
``--tokens`` tokens, and ``--repeat`` times: empties both KV caches, starts the answer on a thread
(``--mode``, so the draft model prefills too), cancels ``--after`` seconds later from the main thread
and times until ``Done``.  ``--busy N`` runs N ``while 1: pass`` processes meanwhile (killed at the end).
Run it with ``PYTHONPATH=OTHER/app`` to measure another checkout (the code before a change) the same way.

    python scripts/measure_stop.py [--tokens 4000] [--after 3] [--repeat 3] [--busy 0] [--mode draft]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4000, help="prompt length to build (default 4000)")
    ap.add_argument("--after", type=float, default=3.0, help="seconds after the answer starts to press Stop")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes running meanwhile")
    ap.add_argument("--mode", default="draft", choices=["auto", "draft", "lookup", "baseline"])
    ap.add_argument("--json", type=Path, default=None, help="append the figures as one JSON line here")
    args = ap.parse_args()

    import specchat  # noqa: F401  (llama.cpp before numpy)
    import test_models
    from specchat.engine import Done, Mode
    from specchat.engine.pair import CancelToken, PairConfig, SpeculativePair
    from specchat.engine.runtime import ModelOptions

    target, draft = test_models.ensure("qwen-1.5b", quiet=True), test_models.ensure("qwen-0.5b", quiet=True)
    cache = Path(tempfile.gettempdir()) / "specchat-measure-stop-calibration.json"
    pair = SpeculativePair(PairConfig(target, draft, ModelOptions(n_ctx=8192), calibration_cache=cache))
    line = "def f{i}(x):\n    return x * {i} + {j}  # step {i} of the table\n"
    text, n = "Explain what this code does.\n", 0
    while n < args.tokens:
        text += "".join(line.format(i=i, j=i * 7 % 13) for i in range(n // 20, n // 20 + 10))
        n = len(pair.chat_prompt([{"role": "user", "content": text}]).tokens)
    prompt = pair.chat_prompt([{"role": "user", "content": text}]).tokens

    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    figures: list[float] = []
    try:
        for r in range(args.repeat):
            pair.target.clear()
            if pair.draft is not None:
                pair.draft.clear()
            cancel = CancelToken()
            ended: dict[str, object] = {}

            def answer(cancel: CancelToken = cancel, ended: dict[str, object] = ended) -> None:
                for ev in pair.generate(prompt, mode=Mode(args.mode), max_tokens=16, cancel=cancel):
                    if isinstance(ev, Done):
                        ended["t"], ended["why"] = time.perf_counter(), ev.stop_reason.value
            thread = threading.Thread(target=answer, name="measure-stop")
            t0 = time.perf_counter()
            thread.start()
            time.sleep(args.after)
            t_stop = time.perf_counter()
            cancel.cancel()
            thread.join()
            t_end = float(ended["t"])  # type: ignore[arg-type]
            figures.append(t_end - t_stop)
            print(f"  #{r + 1}: Stop at {t_stop - t0:.1f} s, answer ended {t_end - t_stop:.3f} s later "
                  f"({ended['why']}); target cache {len(pair.target.tokens)} of {len(prompt)} tokens", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
        pair.close()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"prompt {len(prompt)} tokens, mode {args.mode}, busy loops {args.busy}, load {load:.1f}: Stop to the "
          f"answer's end median {statistics.median(figures):.3f} s, max {max(figures):.3f} s over {len(figures)}")
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps({"tokens": len(prompt), "mode": args.mode, "busy": args.busy, "after_s": args.after,
                                "stop_to_end_s": figures, "load": load, "code": specchat.__file__}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
