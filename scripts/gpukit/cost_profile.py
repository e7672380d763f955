"""``run``: the random-weight cost profile (harness/profiles/): an agreement pair at alpha 0.9
synthesised, measured through SpecChat's runtime, written as a profile and simulated."""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .build import build, install_wheels, preload_cuda_shim
from .common import ROOT, TOKENIZER_FILE, hardware_name, test_model_path, use_site, write_json
from .measure import STEADY_WARMUP, fill_to, measure_draft, timed_decode
from .models import SHAPES, Tokenizer
from .pairs import make_pairs

# --------------------------------------------------------------------------------------------
# measurement, all through SpecChat's runtime
# --------------------------------------------------------------------------------------------

def measure_verify(target: Any, *, depth: int, sizes: Sequence[int], reps: int) -> dict[int, list[float]]:
    """Every repeat of a target decode of n tokens at ``depth`` tokens in the cache, in steady state.

    Sizes are interleaved across repeats, so drift on a shared machine hits every size alike, but
    each timed decode follows STEADY_WARMUP of its own size: a loop that keeps its shapes pays the
    replayed graph.  Cycling the sizes call by call re-captures every time and overstates the curve
    (on the H100, 4 tokens cost 2.7x one token that way and 1.40x repeated)."""
    fill_to(target, depth)
    out: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps):
        for n in sizes:
            for _ in range(STEADY_WARMUP):
                timed_decode(target, n)
            out[n].append(timed_decode(target, n))
    target.clear()
    return out


def _consume(events: Iterable[Any]) -> tuple[Any, list[Any]]:
    from specchat.engine.events import Done, Error, RoundStats

    done, rounds = None, []
    for ev in events:
        if isinstance(ev, RoundStats):
            rounds.append(ev)
        elif isinstance(ev, Error):
            raise SystemExit(f"generation failed: {ev.message}")
        elif isinstance(ev, Done):
            done = ev
    if done is None:
        raise SystemExit("generation ended without its Done event")
    return done, rounds


def measure_plain(pair: Any, prompt: list[int], *, max_tokens: int, repeats: int) -> list[dict[str, float]]:
    """Plain decode through ``pair.generate(mode=baseline)`` and, right after, llama-bench-style raw
    decode on the same prompt, depth and count (``bench.raw_decode_rate``): the bench's reference."""
    from specchat.engine.settings import Mode
    from specchat.harness.bench import raw_decode_rate

    runs = []
    for _ in range(repeats):
        pair.target.clear()
        done, rounds = _consume(pair.generate(prompt, mode=Mode.BASELINE, max_tokens=max_tokens))
        tokens = done.stats.tokens
        raw = raw_decode_rate(pair, prompt, max(tokens - 1, 1))
        base = done.stats.decode_tok_s or 0.0
        runs.append({"tokens": tokens, "baseline_tok_s": base, "raw_tok_s": raw,
                     "ratio": base / raw if raw else 0.0,
                     "overhead_s_per_step": statistics.fmean(r.overhead_s for r in rounds) if rounds else 0.0})
    return runs


def measure_rounds(pair: Any, prompt: list[int], *, k: int, max_tokens: int) -> dict[str, Any]:
    """``Mode.DRAFT`` with the pair's fixed K: the draft, verify and overhead seconds of every round
    that drafted K tokens (the last rounds draft fewer, to stay within ``max_tokens``)."""
    from specchat.engine.settings import Mode

    pair.target.clear()
    if pair.draft is not None:
        pair.draft.clear()
    done, rounds = _consume(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=max_tokens))
    drafting = [r for r in rounds if r.drafted == k]
    return {
        "rounds": len(rounds), "drafting_rounds": len(drafting), "tokens": done.stats.tokens,
        "k": [r.k for r in drafting], "accepted": [r.accepted for r in drafting],
        "draft_s": [r.draft_s for r in drafting], "verify_s": [r.verify_s for r in drafting],
        "overhead_s": [r.overhead_s for r in drafting],
    }


def measure_lookup(pair: Any, history: list[int], k: int, reps: int) -> list[float]:
    """Prompt-lookup proposals as a round pays them (the drafter's own timer): the index is built once
    per answer, then each round adds the few tokens the last one emitted.  (Timing ``reset()`` plus a
    proposal re-indexed the whole history every time: 273 us at depth 256 on the H100 run, against
    3 us a round at 4k tokens on a 2-core CPU this way.)"""
    from specchat.engine.settings import Drafter

    lookup = pair.drafters[Drafter.LOOKUP]
    lookup.reset()
    grown = list(history)
    lookup.propose(grown, k)
    out = []
    for i in range(reps):
        grown.extend(history[i % len(history): i % len(history) + 3])
        lookup.propose(grown, k)
        out.append(lookup.last_seconds)
    return out


def realistic_prompt(model: Any, depth: int) -> list[int]:
    """``depth`` tokens of ordinary text through the real tokenizer."""
    text = ("Speculative decoding lets a small draft model propose tokens that the large model "
            "verifies in one batch; accepted tokens cost a fraction of a step. ") * 64
    tokens = model.tokenize(text, add_special=False)
    while len(tokens) < depth:
        tokens = tokens + tokens
    return tokens[:depth]


# --------------------------------------------------------------------------------------------
# the profile
# --------------------------------------------------------------------------------------------

PROFILE_KEYS = ("specchat_cost_profile", "name", "title", "kind", "hardware", "target", "draft", "token_s",
                "verify_x", "draft_x", "overhead_s", "notes")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown"


def robust_rsd(values: Sequence[float]) -> float:
    """The relative standard deviation, estimated from the median absolute deviation."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return 1.4826 * mad / med if med > 0 else 0.0


def _sourced(value: float, source: str, key: str = "") -> dict[str, Any]:
    """A measured number with its source, held to the simulator's bounds for ``key`` (``PROFILE_BOUNDS``): a
    busy machine times a one-token draft decode at 160 target tokens, which no profile may hold, and the
    profile this wrote then failed to load.  A number outside them is written at the bound, and its source
    says what was measured."""
    from specchat.harness.simulate import PROFILE_BOUNDS

    if key in PROFILE_BOUNDS:
        lo, hi = PROFILE_BOUNDS[key]
        if not lo <= value <= hi:
            source = (f"{source}; measured {value:.6g}, outside the {lo:g}-{hi:g} a profile may hold, written at "
                      f"{min(max(value, lo), hi):g}: the machine was busy or stalled while this was timed")
            value = min(max(value, lo), hi)
    return {"value": round(value, 9), "source": source}


def build_profile(m: dict[str, Any], *, hardware: str, kind: str, shapes: str, date: str) -> dict[str, Any]:
    """The cost profile (docs: the schema) from :func:`measure_all`'s numbers."""
    verify = {int(n): min(v) for n, v in m["verify_s"].items()}
    token_s = verify[1]
    src = f"measured by scripts/gpu_kit.py on {hardware}, {date}, llama-cpp-python {m['llama_cpp_python']}"
    src += f" {m['backend']}"
    depth = m["depth"]
    draft_token = min(m["draft"]["decode_s"]) + statistics.median(m["draft"]["greedy_choice_s"])
    overhead = statistics.median(m["rounds"]["overhead_s"]) if m["rounds"]["overhead_s"] else 0.0
    ones = m["verify_s"]["1"] if "1" in m["verify_s"] else m["verify_s"][1]
    # robust: a shared machine adds rare long stalls that would swamp a plain standard deviation
    noise = robust_rsd(ones)
    capped = " (capped at 1: too few or too scattered repeats to say more)" if noise > 1.0 else ""
    noise = min(noise, 1.0)
    target, draft = SHAPES[shapes]
    name = f"{slug(hardware)}-{shapes}"
    plain = m["plain"]
    return {
        "specchat_cost_profile": 1,
        "name": name,
        "title": f"{hardware}, {target.name} Q4_K_M target with a {draft.name} Q4_K_M draft (agreement pair, alpha 0.9)",
        "kind": kind,
        "hardware": f"{hardware}, llama.cpp {m['backend']} (llama-cpp-python {m['llama_cpp_python']})",
        "target": f"{target.name} shape, Q4_K_M, agreement pair (bigram weights)",
        "draft": f"{draft.name} shape, Q4_K_M, agreement pair (alpha 0.9)",
        "token_s": _sourced(token_s, f"{src}: min of {len(ones)} one-token target decodes at depth {depth}", "token_s"),
        "verify_x": verify_curve(verify, {n: len(m["verify_s"][str(n)]) for n in verify}, src),
        "draft_x": _sourced(draft_token / token_s, f"derived: (min one-token draft decode + median greedy "
                                                   f"choice) {draft_token:.6f} s / token_s; {src}", "draft_x"),
        "overhead_s": _sourced(overhead, f"{src}: median RoundStats.overhead_s of "
                                         f"{len(m['rounds']['overhead_s'])} draft rounds at K={m['k']}", "overhead_s"),
        "lookup_s": _sourced(statistics.median(m["lookup_s"]),
                             f"{src}: median of {len(m['lookup_s'])} prompt-lookup proposals over {depth} tokens",
                             "lookup_s"),
        "noise": _sourced(noise, f"derived: 1.4826 * MAD / median of the {len(ones)} one-token target decodes{capped}; {src}"),
        "notes": [
            "agreement pair: full-size matrices (true costs), bigram weights (peaked logits), meaningless "
            "text; verify costs in steady state (each size repeated)",
            f"n_gpu_layers {m.get('n_gpu_layers', -1)} (-1: all on the GPU), n_ctx {m['n_ctx']}, "
            f"decodes at depth {depth}",
            f"plain decode through SpecChat: {statistics.median(r['ratio'] for r in plain):.3f} of "
            "llama-bench-style raw decode (median of the runs in measurements.json)",
            f"the attention and FFN matrices are copies of one pool of N(0, 0.02) values (seed {m['seed']})",
        ],
    }


def verify_curve(verify: dict[int, float], reps: dict[int, int], src: str) -> dict[str, Any]:
    """verify_x from the minimum decode times: the measured ratios, each raised to the largest ratio
    of a smaller batch (a profile's curve may not fall as the batch grows; kernels switch tiles, a
    busy machine adds noise); measurements.json keeps every raw time."""
    token_s = verify[1]
    out: dict[str, Any] = {"1": 1.0}
    floor, floor_n = 1.0, 1
    for n in sorted(verify):
        if n == 1:
            continue
        ratio = verify[n] / token_s
        what = f"derived: min of {reps[n]} decodes of {n} tokens ({verify[n]:.6f} s) / token_s ({token_s:.6f} s)"
        if ratio < floor:
            what += f" = {ratio:.3f}, raised to the n={floor_n} value"
            ratio = floor
        else:
            floor, floor_n = ratio, n
        out[str(n)] = _sourced(ratio, f"{what}; {src}", "verify_x")
    return out


def check_profile(profile: dict[str, Any]) -> None:
    missing = [k for k in PROFILE_KEYS if k not in profile]
    if missing or "1" not in profile.get("verify_x", {}):
        raise ValueError(f"profile lacks {', '.join(missing) or 'verify_x[1]'}")
    if not re.fullmatch(r"[a-z0-9._-]+", profile["name"]):
        raise ValueError(f"profile name {profile['name']!r} is not [a-z0-9._-]+")


# --------------------------------------------------------------------------------------------
# the whole run
# --------------------------------------------------------------------------------------------

def measure_all(target_path: Path, draft_path: Path, *, cpu: bool, depth: int, k: int, reps: int,
                plain_tokens: int, round_tokens: int, seed: int) -> dict[str, Any]:
    import llama_cpp

    from specchat.engine.calibration import measure
    from specchat.engine.pair import PairConfig, SpeculativePair
    from specchat.engine.runtime import LoadedModel, ModelOptions, backend_info
    from specchat.engine.settings import ControllerSettings

    n_ctx = 4096
    opts = ModelOptions(n_ctx=n_ctx, n_gpu_layers=0 if cpu else -1)
    sizes = list(range(1, 18))
    # a fixed K, every draft kept going (p_min 0) and no guard rail: every round drafts K tokens
    controller = ControllerSettings(k_min=k, k_max=k, p_min=0.0, min_token_acceptance=0.0,
                                    min_sequence_acceptance=0.0)
    config = PairConfig(target=target_path, draft=draft_path, target_options=opts, controller=controller)
    target = LoadedModel(target_path, opts, n_outputs=max(sizes))
    try:
        draft = LoadedModel(draft_path, opts, n_outputs=1)
    except BaseException:
        target.close()
        raise
    costs = measure(target, draft, k)  # the calibration the pair would run, kept among the numbers
    with SpeculativePair.from_models(config, target, draft, costs) as pair:
        info = backend_info()
        print(f"  backend {info['backend']}, target {target.describe()}, draft {draft.describe()}", flush=True)
        prompt = realistic_prompt(target, depth)
        verify = measure_verify(target, depth=depth, sizes=sizes, reps=reps)
        drafted = measure_draft(draft, depth=depth, reps=reps * 4)
        plain = measure_plain(pair, prompt, max_tokens=plain_tokens, repeats=3)
        rounds = measure_rounds(pair, prompt, k=k, max_tokens=round_tokens)
        lookup = measure_lookup(pair, prompt, k, reps * 4)
        return {
            "llama_cpp_python": llama_cpp.__version__, "backend": info["backend"],
            "system_info": info["system_info"], "target_file": target_path.name, "draft_file": draft_path.name,
            "target_desc": target.describe(), "draft_desc": draft.describe(),
            "target_bytes": target.size_bytes, "draft_bytes": draft.size_bytes, "n_ctx": n_ctx,
            "n_threads": target.n_threads, "n_gpu_layers": opts.n_gpu_layers, "depth": depth, "k": k, "seed": seed,
            "calibration": {"verify_s": {str(n): v for n, v in costs.verify_s.items()},
                            "draft_s": dict(costs.draft_s)},
            "verify_s": {str(n): v for n, v in verify.items()}, "draft": drafted, "plain": plain,
            "rounds": rounds, "lookup_s": lookup,
        }


def run_simulate(profile: Path, site: Path) -> str:
    """``specchat simulate`` on every committed trace; says so when there is none, or no command."""
    traces = sorted((ROOT / "docs" / "traces").glob("*.json"))
    if not traces:
        return "no committed traces in docs/traces: nothing simulated\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(site) if site.is_dir() else "",
                                                                   str(ROOT / "app")) if p))
    parts = []
    for trace in traces:
        cmd = [sys.executable, "-m", "specchat", "simulate", "--trace", str(trace), "--profile", str(profile)]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        head = f"$ specchat simulate --trace docs/traces/{trace.name} --profile {profile.name}"
        body = res.stdout + res.stderr
        if res.returncode != 0 and "simulate" in body and "unknown command" in body.lower():
            body = "specchat simulate is not there yet (harness/simulate.py): " + body.strip() + "\n"
        parts.append(f"{head}\n{body}(exit {res.returncode})\n")
    return "\n".join(parts)


def summary_lines(m: dict[str, Any], profile: dict[str, Any]) -> list[str]:
    verify = profile["verify_x"]
    x = {n: (v if isinstance(v, float) else v["value"]) for n, v in verify.items()}
    plain = m["plain"]
    r = m["rounds"]
    wall = [d + v + o for d, v, o in zip(r["draft_s"], r["verify_s"], r["overhead_s"], strict=True)]
    share = statistics.median(o / w for o, w in zip(r["overhead_s"], wall, strict=True) if w > 0) if wall else 0.0
    return [
        f"hardware: {profile['hardware']}",
        f"target {m['target_desc']} ({m['target_bytes'] / 1e9:.2f} GB), draft {m['draft_desc']} "
        f"({m['draft_bytes'] / 1e9:.2f} GB), depth {m['depth']}",
        "plain decode: " + ", ".join(f"{p['baseline_tok_s']:.1f} vs raw {p['raw_tok_s']:.1f} tok/s "
                                     f"({p['ratio']:.3f})" for p in plain),
        f"token_s {profile['token_s']['value'] * 1e3:.3f} ms; verify_x "
        + " ".join(f"{n}:{x[n]:.2f}" for n in sorted(x, key=int)),
        f"draft token {profile['draft_x']['value'] * profile['token_s']['value'] * 1e3:.3f} ms "
        f"(draft_x {profile['draft_x']['value']:.3f}; greedy choice "
        f"{statistics.median(m['draft']['greedy_choice_s']) * 1e3:.3f} ms of it)",
        f"loop overhead per round (K={m['k']}, {len(r['overhead_s'])} rounds): median "
        f"{profile['overhead_s']['value'] * 1e3:.3f} ms, {share:.1%} of a round "
        f"(round {statistics.median(wall) * 1e3 if wall else 0:.2f} ms)",
        f"prompt lookup {profile['lookup_s']['value'] * 1e6:.1f} us; noise {profile['noise']['value']:.3f}",
    ]


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    if args.shapes == "qwen7b" and args.cpu:
        print("note: the 7B shape on a CPU takes a long time and ~20 GB of disk", flush=True)
    if not args.skip_build:
        install_wheels(args.kit, args.site)
        build(args.kit, args.site, cpu=args.cpu, jobs=args.jobs, log=args.site.parent / "build.log")
    elif (args.kit / "wheels").is_dir():
        install_wheels(args.kit, args.site)
    use_site(args.site)
    preload_cuda_shim(args.site)
    try:
        import llama_cpp
    except ImportError:
        raise SystemExit(f"no llama_cpp in {args.site} or this Python: run the build call first "
                         "(a machine that went back keeps no build)") from None
    if not args.cpu and not llama_cpp.llama_supports_gpu_offload():
        raise SystemExit(f"{llama_cpp.__file__}: this llama-cpp-python has no GPU offload: run the build call "
                         "(or use --cpu)")
    tok_file = args.kit / TOKENIZER_FILE
    if not tok_file.is_file():
        source = test_model_path()
        if source is None or not source.is_file():
            raise SystemExit(f"{tok_file}: missing: run 'python scripts/gpu_kit.py pack' first")
        tok_file = source
    tokenizer = Tokenizer.from_gguf(tok_file)
    target_shape, draft_shape = SHAPES[args.shapes]
    threads = os.cpu_count() or 1
    print(f"synthesising {target_shape.name} and {draft_shape.name} in {args.work}", flush=True)
    # an agreement pair at alpha 0.9: full-size matrices (true costs) and the draft's peaked logits, so
    # its greedy choice costs what it costs on a real draft (random weights' flat logits forced the
    # full-vocabulary softmax: 1.7 of 2.9 ms a drafted token on the H100)
    pairs = make_pairs(args.shapes, tokenizer, [0.9], args.work, threads=threads, cycle_seed=args.seed + 1)
    target, draft = pairs.target, pairs.drafts[0.9]
    print("measuring", flush=True)
    m = measure_all(target, draft, cpu=args.cpu, depth=args.depth, k=args.k, reps=args.reps,
                    plain_tokens=args.plain_tokens, round_tokens=args.round_tokens, seed=args.seed)
    hardware = hardware_name(args.cpu)
    date = _dt.date.today().isoformat()
    m["hardware"], m["date"] = hardware, date
    profile = build_profile(m, hardware=hardware, kind="measured-cpu" if args.cpu else "measured-gpu",
                            shapes=args.shapes, date=date)
    check_profile(profile)
    args.out.mkdir(parents=True, exist_ok=True)
    profile_path = args.out / f"profile-{profile['name']}.json"
    write_json(profile_path, profile)
    write_json(args.out / "measurements.json", m)
    lines = summary_lines(m, profile)
    print("\n".join(lines), flush=True)
    sim = run_simulate(profile_path, args.site)
    from specchat.files import write_text_atomically

    write_text_atomically(args.out / "simulate.txt", sim)
    print(sim, flush=True)
    print(f"wrote {profile_path}, {args.out / 'measurements.json'}, {args.out / 'simulate.txt'}")
    return 0
