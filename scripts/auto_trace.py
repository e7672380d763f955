"""Why auto did what it did: a simulated run, answer by answer, and one answer round by round.

`scripts/auto_goals.py` says which task columns miss; this says why, on one profile and seed.  It
replays the builtin trace (or the kit's agreement pair at ``--alpha``) with auto and plain on the
same clock draws, prints each answer's auto x plain and drafted/accepted tokens, and for
``--answer N`` every round of that answer: what the controller planned (drafter:K, its confidence
stop, a probe or a round with rows for itself, the verify size held) and what the round did and cost
(its draft, verify and whole round in milliseconds)::

    python scripts/auto_trace.py --profile h100-qwen7b-q4km-steady --seed 0 --answer 5
    python scripts/auto_trace.py --profile cpu-2t-epyc-qwen7b-q4_k_m --alpha 0.9 --seed 3 --answer 1
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy)
from specchat.engine.controller import DraftController, Plan  # noqa: E402
from specchat.engine.events import RoundStats  # noqa: E402
from specchat.harness import simulate as sim  # noqa: E402
from specchat.harness.trace import Trace, agreement_trace, load_trace  # noqa: E402

TRACE = ROOT / "docs" / "traces" / "qwen2.5-coder-1.5b+0.5b.builtin.json"


class TracedController(DraftController):
    """The controller, remembering each plan and the verify size held when it was made."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.plans: list[tuple[Plan, int]] = []

    def plan(self, *args, **kwargs) -> Plan:
        p = super().plan(*args, **kwargs)
        self.plans.append((p, kwargs.get("held", 0)))
        return p


@dataclass(frozen=True)
class AnswerRow:
    task: str
    multiplier: float  # auto's tok/s over plain's on this answer
    drafted: int
    accepted: int
    rounds: list[tuple[Plan, int, RoundStats]]  # auto's rounds: the plan, the held size, what happened


def run(trace: Trace, profile: sim.CostProfile, seed: int) -> list[AnswerRow]:
    """Plain and auto answer every prompt in order, each on its own controller and clock (as simulate)."""
    policies = {p.key: p for p in sim.standard_policies()}
    plain_rates = []
    clock = sim.Clock(profile, seed)
    controller = sim.controller_for(policies["plain"], clock)
    for pt in trace.prompts:
        plain_rates.append(sim.answer(controller, policies["plain"], pt, clock).decode_tok_s or 0.0)
    auto = policies["auto"]
    clock = sim.Clock(profile, seed)
    s = auto.settings
    traced = TracedController(s, clock.calibration(max(s.k_max, s.lookup_k_max)))
    rows = []
    for pt, plain in zip(trace.prompts, plain_rates, strict=True):
        traced.plans.clear()
        stats: list[RoundStats] = []
        counts = sim.answer(traced, auto, pt, clock, on_round=stats.append)
        rounds = [(p, held, r) for (p, held), r in zip(traced.plans, stats, strict=True)]
        rows.append(AnswerRow(pt.task, (counts.decode_tok_s or 0.0) / plain if plain else 0.0,
                              counts.drafted, counts.accepted, rounds))
    return rows


def format_round(plan: Plan, held: int, r: RoundStats) -> str:
    stop = f" stop {plan.p_min:.2f}" if plan.p_min is not None else ""
    kind = " probe" if plan.probe else " own rows" if plan.one_off else ""
    return (f"  {plan.drafter.value}:{plan.k}{stop}{kind}, held {held} | drafted {r.drafted}, accepted "
            f"{r.accepted}, spare {r.spare}, rows {r.verify_rows}{' re-captured' if r.verify_fresh else ''} | "
            f"draft {r.draft_s * 1e3:.2f} ms, verify {r.verify_s * 1e3:.2f} ms, round {r.wall_s * 1e3:.2f} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="a shipped profile's name or a profile file")
    p.add_argument("--alpha", type=float, help="the kit's agreement pair at this share (default: the builtin trace)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answer", type=int, help="print this answer's rounds (0: the first)")
    args = p.parse_args(argv)
    profile = sim.load_profile(args.profile)
    trace = agreement_trace(args.alpha, seed=args.seed) if args.alpha is not None else load_trace(TRACE)
    rows = run(trace, profile, args.seed)
    for i, row in enumerate(rows):
        print(f"answer {i} {row.task}: auto {row.multiplier:.2f}x plain, drafted {row.drafted}, "
              f"accepted {row.accepted}, {len(row.rounds)} rounds")
        if i == args.answer:
            for plan, held, r in row.rounds:
                print(format_round(plan, held, r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
