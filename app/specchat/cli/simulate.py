"""``specchat simulate`` and the trace / cost-profile half of ``specchat bench``.

``bench --trace FILE`` records an agreement trace of the suite with the loaded
pair after the timed runs, makes a cost profile of this machine from the same
runs (``--save-profile FILE`` keeps it) and checks the simulator against the
bench: the multiplier it predicts for each mode, on the same prompts with the
same schedule, next to the one just measured.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from specchat.engine.events import RoundStats
from specchat.engine.pair import SpeculativePair
from specchat.engine.settings import Mode
from specchat.errors import UserError
from specchat.files import write_text_atomically
from specchat.harness.bench import BenchRow
from specchat.harness.simulate import (
    CostProfile,
    format_result,
    load_drafter_costs,
    load_profile,
    measured_profile,
    replay_bench,
    result_json,
    save_profile,
    shipped_profiles,
    simulate,
    simulate_agreement,
    with_drafter,
    with_noise,
)
from specchat.harness.suite import BenchPrompt
from specchat.harness.trace import PromptTrace, Trace, load_trace, record_trace

VALIDATION_TOLERANCE = 0.10  # the simulator's multiplier must be within 10% of the measured one


def cmd_simulate(args: argparse.Namespace) -> int:
    names: list[str] = []
    for spec in args.cost_profile:
        names.extend(shipped_profiles() if spec == "all" else [spec])
    profiles = [load_profile(n) for n in names]
    if args.drafter_costs is not None:
        costs = load_drafter_costs(args.drafter_costs)
        profiles = [with_drafter(p, costs) for p in profiles]
    if args.noise is not None:
        profiles = [with_noise(p, args.noise) for p in profiles]
    if not args.trace and not args.agreement:
        raise UserError("simulate needs --trace FILE or --agreement ALPHAS")
    sources: list[Trace | None] = [load_trace(t) for t in args.trace]
    if args.agreement:
        sources.append(None)  # the agreement pairs, one controller per share
    docs = []
    first = True
    for trace in sources:
        for profile in profiles:
            result = (simulate(trace, profile, seed=args.seed) if trace is not None
                      else simulate_agreement(args.agreement, profile, seed=args.seed))
            if not first:
                print()
            first = False
            print(format_result(result), flush=True)
            docs.append(result_json(result))
    if args.json:
        write_text_atomically(args.json, json.dumps(docs, indent=1) + "\n")
    return 0


# -- the bench's part ------------------------------------------------------------


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_profile(pair: SpeculativePair, rounds: Sequence[RoundStats], calibration, backend: str) -> CostProfile:
    target = pair.target.path.name
    draft = pair.draft.path.name if pair.draft is not None else ""
    stem = re.sub(r"[^a-z0-9._-]+", "-", target.lower().removesuffix(".gguf"))[:40].strip("-.")
    kind = "measured-cpu" if backend.lower() == "cpu" else "measured-gpu"
    hardware = f"{cpu_name()}, {pair.target.n_threads} threads, backend {backend}"
    name = f"{'cpu' if kind == 'measured-cpu' else 'gpu'}-{pair.target.n_threads}t-{stem}"
    return measured_profile(name, f"{hardware}: {target}" + (f" + {draft}" if draft else ""), rounds,
                            calibration, kind=kind, hardware=hardware, target=target, draft=draft,
                            source=f"specchat bench on {hardware}")


def bench_extras(args: argparse.Namespace, pair: SpeculativePair, prompts: list[BenchPrompt], modes: list[Mode],
                 rows: list[BenchRow], rounds: list[RoundStats], calibration, backend: str) -> None:
    """After the timed runs: the machine's cost profile, the trace, and the simulator's check."""
    if not (args.trace or args.save_profile):
        return
    profile = machine_profile(pair, rounds, calibration, backend)
    if args.save_profile:
        save_profile(profile, args.save_profile)
        print(f"cost profile of this machine: {args.save_profile} (one target token {profile.token_s * 1e3:.1f} ms, "
              f"a draft token {profile.draft_x:.2f}x, verify 2/5/9 tokens "
              + "/".join(f"{profile.verify_s(n) / profile.token_s:.2f}x" for n in (2, 5, 9)) + ")", flush=True)
    if not args.trace:
        return
    k_max = max(args.trace_k_max, pair.controller.settings.k_max)

    def progress(pt: PromptTrace) -> None:
        print(f"  trace {pt.id:<16} {len(pt.tokens)} tok", file=sys.stderr, flush=True)

    trace = record_trace(pair, prompts, max_tokens=args.max_tokens, k_max=k_max, progress=progress)
    trace.save(args.trace)
    print(f"agreement trace: {args.trace} ({len(trace.prompts)} prompts, drafts up to {k_max} tokens, "
          f"recorded in {trace.seconds:.0f} s)", flush=True)
    print(validation_table(trace, profile, modes, rows, repeat=args.repeat, settings=pair.controller.settings))


def validation_table(trace, profile: CostProfile, modes: list[Mode], rows: list[BenchRow], *, repeat: int,
                     settings) -> str:
    """Predicted vs measured multiplier per task and mode, from the same prompts and schedule."""
    if Mode.BASELINE not in modes:
        return "simulator check: needs the baseline mode in --modes"
    predicted = replay_bench(trace, profile, modes, repeat=repeat, settings=settings)
    plain = predicted[Mode.BASELINE.value]
    lines = ["simulator check (this machine's profile, the bench's schedule, the trace just recorded):",
             f"{'task':<9} {'mode':<9} {'measured':>9} {'simulated':>10} {'sim/meas':>9}"]
    worst = 0.0
    for row in rows:
        if row.mode == Mode.BASELINE.value or row.multiplier is None:
            continue
        sim_rate = predicted[row.mode][row.task].decode_tok_s or 0.0
        base = plain[row.task].decode_tok_s or 0.0
        sim = sim_rate / base if base else 0.0
        ratio = sim / row.multiplier if row.multiplier else 0.0
        if row.task == "all":
            worst = max(worst, abs(ratio - 1))
        lines.append(f"{row.task:<9} {row.mode:<9} {row.multiplier:>8.3f}x {sim:>9.3f}x {ratio:>9.3f}")
    verdict = "within" if worst <= VALIDATION_TOLERANCE else "NOT within"
    lines.append(f"simulator check: every mode's overall multiplier {verdict} {VALIDATION_TOLERANCE:.0%} of the "
                 f"measured one (worst {worst:.1%})")
    return "\n".join(lines)
