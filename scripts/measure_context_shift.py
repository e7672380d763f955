"""How much a context shift saves in a long chat: the same chat past the context under a policy, once
with the KV cache shifted after the cut and once with the kept turns prefilled again (``can_shift`` off),
turn by turn, interleaved.  CPU or GPU, whatever llama-cpp-python was built for.

    python scripts/measure_context_shift.py [--policy rolling_window] [--n-ctx 2048] [--turns 16]

Prints each turn's prompt, reused and prefilled tokens, and prefill time, both ways, and the totals.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import specchat  # noqa: F401,I001  (loads llama.cpp's library before numpy)
import test_models

from specchat.engine.answer import AnswerRequest, Started
from specchat.context_policy import ContextPolicy
from specchat.engine import Done, Mode, TokensEmitted
from specchat.backends.local import LocalBackend
from specchat.engine.pair import CancelToken, PairConfig, SpeculativePair
from specchat.engine.runtime import ModelOptions
from specchat.engine.settings import SamplingSettings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen-1.5b", help="a model of scripts/test_models.py (default qwen-1.5b)")
    ap.add_argument("--policy", default="rolling_window", choices=[p.value for p in ContextPolicy if p.value != "stop"])
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    path = test_models.ensure(args.model, quiet=True)
    cfg = PairConfig(path, None, ModelOptions(n_ctx=args.n_ctx), calibration_cache=Path("/tmp/specchat-shift-cal.json"))
    totals = {True: [0, 0.0], False: [0, 0.0]}
    with SpeculativePair(cfg) as shifting, SpeculativePair(cfg) as plain:
        plain.target.can_shift = False
        chats = {True: (LocalBackend(shifting), [{"role": "system", "content": "You answer at length."}]),
                 False: (LocalBackend(plain), [{"role": "system", "content": "You answer at length."}])}
        print(f"{args.model}, n_ctx {args.n_ctx}, {args.policy}, {args.max_tokens} tokens an answer")
        print("turn  left-out  prompt | shift: reused prefilled  ms | re-prefill: reused prefilled  ms")
        for i in range(args.turns):
            row = []
            for shift in (True, False):  # interleaved: the same moment of the machine for both
                backend, messages = chats[shift]
                messages.append({"role": "user", "content": f"Part {i}: tell me about the number {i * 37}."})
                request = AnswerRequest(tuple(messages), mode=Mode.BASELINE, sampling=SamplingSettings(temperature=0.0),
                                        max_tokens=args.max_tokens, context_policy=ContextPolicy(args.policy))
                t0 = time.perf_counter()
                events = list(backend.answer(request, CancelToken()))
                started = next(e for e in events if isinstance(e, Started))
                done = events[-1]
                assert isinstance(done, Done), done
                c = done.stats.counts
                prefilled = c.prompt_tokens - c.reused_tokens
                totals[shift][0] += prefilled
                totals[shift][1] += c.prefill_s
                row.append((started, c, prefilled))
                messages.append({"role": "assistant",
                                 "content": "".join(e.answer for e in events if isinstance(e, TokensEmitted)) or "ok"})
                del t0
            (s, cs, ps), (_p, cp, pp) = row
            print(f"{i:>4} {s.left_out:>9} {cs.prompt_tokens:>7} | {cs.reused_tokens:>13} {ps:>9} {cs.prefill_s * 1e3:>4.0f}"
                  f" | {cp.reused_tokens:>18} {pp:>9} {cp.prefill_s * 1e3:>4.0f}")
    (ts, ss), (tp, sp) = totals[True], totals[False]
    print(f"total prefilled: shift {ts} tokens in {ss:.2f} s; re-prefill {tp} tokens in {sp:.2f} s"
          f" ({sp / ss if ss else float('nan'):.2f}x the prefill time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
