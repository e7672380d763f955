"""Add the prompts' agreement (what ``auto`` measures at prefill: engine/generate.py, ``prompt_agreement``) to a
trace recorded before the trace carried it, with the pair that recorded it.

``specchat bench --trace`` records it with every new trace.  The builtin trace
(docs/traces/qwen2.5-coder-1.5b+0.5b.builtin.json) was recorded before, on the pinned Qwen2.5-Coder pair that
``scripts/test_models.py`` downloads; this measures each of its prompts on that pair through the target's chat
template, checks the prompt is the one recorded (its length in tokens), and writes the trace back::

    python scripts/trace_prompt_agreement.py [TRACE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "app"))
TRACE = ROOT / "docs" / "traces" / "qwen2.5-coder-1.5b+0.5b.builtin.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?", default=TRACE)
    args = ap.parse_args(argv)

    import specchat  # noqa: F401  (llama.cpp before numpy)
    import test_models
    from specchat.engine.pair import PairConfig, SpeculativePair
    from specchat.engine.runtime import ModelOptions
    from specchat.harness.suite import BUILTIN
    from specchat.harness.trace import load_trace, measure_prompt_agreement

    trace = load_trace(args.trace)
    suite = {p.id: p for p in BUILTIN}
    target, draft = test_models.ensure("qwen-1.5b", quiet=True), test_models.ensure("qwen-0.5b", quiet=True)
    cache = Path(tempfile.gettempdir()) / "specchat-trace-agreement-calibration.json"
    with SpeculativePair(PairConfig(target, draft, ModelOptions(n_ctx=4096), calibration_cache=cache)) as pair:
        assert pair.draft is not None
        prompts = []
        for pt in trace.prompts:
            bench = suite.get(pt.id)
            if bench is None:
                print(f"{pt.id}: not a builtin prompt, left as it is", file=sys.stderr)
                prompts.append(pt)
                continue
            tokens = pair.chat_prompt(list(bench.messages)).tokens
            if len(tokens) != pt.prompt_tokens:
                print(f"{pt.id}: {len(tokens)} prompt tokens where the trace recorded {pt.prompt_tokens}: "
                      "not the prompt it recorded", file=sys.stderr)
                return 1
            agreement = measure_prompt_agreement(pair.target, pair.draft, tokens)
            print(f"{pt.id:18s} {pt.task:9s} {len(tokens):4d} tokens  prompt agreement "
                  f"{'-' if agreement is None else f'{agreement:.3f}'}")
            prompts.append(dataclasses.replace(pt, prompt_agreement=agreement))
    dataclasses.replace(trace, prompts=prompts).save(args.trace)
    print(f"written: {args.trace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
