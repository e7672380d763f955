"""What auto's prompt agreement costs at prefill: the prompt's last 64 rows of logits on both models and their
greedy choices (engine/generate.py, ``prompt_agreement``), against the one row (target) and none (draft) a
prefill takes without it.

Loads the pinned Qwen2.5-Coder pair (1.5B target, 0.5B draft) as the pair does (64 rows of logits each), and
for prompts of about ``--sizes`` tokens times, ``--repeat`` times and interleaved, a prefill from an empty
cache with and without the rows (the choices' argmax included).  Prints the medians and their ratio; what
else runs on the machine moves both alike.

    python scripts/measure_prompt_rows.py [--sizes 40,180,1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "app"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="40,180,1000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    import specchat  # noqa: F401  (llama.cpp before numpy)
    import test_models
    from specchat.engine.generate import PROMPT_ROWS
    from specchat.engine.runtime import LoadedModel, ModelOptions
    from specchat.engine.sampling import last_choices
    from specchat.models.fit import OUTPUT_ROWS

    opts = ModelOptions(n_ctx=2048)
    target = LoadedModel(test_models.ensure("qwen-1.5b", quiet=True), opts, n_outputs=OUTPUT_ROWS)
    draft = LoadedModel(test_models.ensure("qwen-0.5b", quiet=True), opts, n_outputs=OUTPUT_ROWS)
    line = "def f{i}(x):\n    return x * {i} + {j}  # step {i} of the table\n"
    for size in (int(s) for s in args.sizes.split(",")):
        text, i = "Explain what this code does.\n", 0
        while len(target.tokenize(text, add_special=True)) < size:
            text += line.format(i=i, j=i * 7 % 13)
            i += 1
        tokens = target.tokenize(text, add_special=True)[:size]
        rows = min(PROMPT_ROWS, len(tokens))
        times: dict[str, list[float]] = {"plain": [], "rows": []}
        for _ in range(args.repeat):
            for how in ("plain", "rows"):
                target.clear()
                draft.clear()
                t0 = time.perf_counter()
                if how == "rows":
                    target.decode(tokens, logits=rows)
                    last_choices(target, rows)
                    draft.decode(tokens, logits=rows)
                    last_choices(draft, rows, target.n_vocab)
                else:
                    target.decode(tokens, logits="last")
                    draft.decode(tokens, logits="none")
                times[how].append(time.perf_counter() - t0)
        plain, with_rows = statistics.median(times["plain"]), statistics.median(times["rows"])
        print(f"{len(tokens):5d}-token prompt: prefill of both models {plain * 1e3:7.1f} ms, with {rows} rows "
              f"of choices {with_rows * 1e3:7.1f} ms ({with_rows / plain:.3f}x, +{(with_rows - plain) * 1e3:.1f} ms)")
    target.close()
    draft.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
