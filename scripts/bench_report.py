"""Turn a ``specchat bench --json`` file into the markdown that docs/benchmarks.md quotes.

    python scripts/bench_report.py bench.json

Prints the per-task table, the per-run spread of ratios (how noisy the machine was),
the baseline/raw reference, and where speculative output first differs from plain output.
"""

from __future__ import annotations

import json
import statistics
import sys


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    print(f"target `{doc['target']}`, draft `{doc['draft']}`, backend {doc['backend']}, threads {doc['threads']}, "
          f"ctx {doc['ctx']}, temp {doc['temp']}, max tokens {doc['max_tokens']}, repeat {doc['repeat']}\n")
    cal = doc["calibration"]
    print("calibration: " + ", ".join(f"{n} tok {v * 1e3:.1f} ms" for n, v in sorted(cal["verify_s"].items(),
                                                                                     key=lambda kv: int(kv[0])))
          + (f"; draft token {cal['draft_s']['model'] * 1e3:.1f} ms" if "model" in cal["draft_s"] else "") + "\n")
    print("| task | mode | decode tok/s | x plain | token acc. | seq. acc. | mean K | overhead | prefill tok/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in doc["summary"]:
        mult = "-" if r["multiplier"] is None else f"{r['multiplier']:.3f}x"
        print(f"| {r['task']} | {r['mode']} | {r['decode_tok_s']:.1f} | {mult} | {pct(r['token_acceptance'])} | "
              f"{pct(r['sequence_acceptance'])} | {r['mean_k']:.1f} | {r['overhead_share']:.2%} | "
              f"{r['prefill_tok_s']:.0f} |")
    runs = doc["runs"]
    base = {(r["prompt_id"], r["repeat"]): r for r in runs if r["mode"] == "baseline"}
    print("\nper-run ratio to the baseline run of the same prompt and repeat (machine noise):")
    for mode in dict.fromkeys(r["mode"] for r in runs):
        if mode == "baseline":
            continue
        ratios = [r["decode_tok_s"] / base[(r["prompt_id"], r["repeat"])]["decode_tok_s"]
                  for r in runs if r["mode"] == mode and (r["prompt_id"], r["repeat"]) in base]
        if ratios:
            print(f"- {mode}: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    if doc.get("reference"):
        ref = sorted(r["baseline_decode_tok_s"] / r["raw_decode_tok_s"] for r in doc["reference"])
        print(f"\nbaseline / llama-bench-style raw decode: median {statistics.median(ref):.1%} "
              f"(range {ref[0]:.1%} to {ref[-1]:.1%}, {len(ref)} pairs)")
    print(f"\nworst overhead share of any run: {max(r['overhead_s'] / r['decode_s'] for r in runs if r['decode_s']):.2%}")
    same = diff = 0
    firsts = []
    for r in runs:
        b = base.get((r["prompt_id"], r["repeat"]))
        if r["mode"] == "baseline" or b is None:
            continue
        if r["token_ids"] == b["token_ids"]:
            same += 1
        else:
            diff += 1
            firsts.append(next((i for i, (x, y) in enumerate(zip(r["token_ids"], b["token_ids"], strict=False))
                                if x != y), min(len(r["token_ids"]), len(b["token_ids"]))))
    print(f"\nspeculative output identical to plain output in {same} of {same + diff} runs; "
          + (f"first difference at token {sorted(firsts)}" if firsts else "no differences"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
