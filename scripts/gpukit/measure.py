"""``measure``: SpecChat beside llama-server on agreement pairs, one report (report.md, results.json after
every stage, logs.tar.gz); and the decode timings that it and ``run`` share."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import ROOT, hardware_name, tool_path, write_json
from .models import SHAPES, Tokenizer
from .pairs import (
    EDIT_EVERY,
    AgreementPairs,
    check_pairs,
    edit_suite,
    make_pairs,
    parse_alphas,
    tokenizer_file,
)

FILLER = 198  # "\n" in Qwen's vocabulary; a decode's cost does not depend on the token


# --------------------------------------------------------------------------------------------
# decode timings, all through SpecChat's runtime
# --------------------------------------------------------------------------------------------

def timed_decode(model: Any, n: int, *, logits: str = "all") -> float:
    """One decode of ``n`` filler tokens at the model's current depth, logits read (that waits for
    an asynchronous backend), then trimmed back: the calibration's measurement."""
    base = len(model.tokens)
    t0 = time.perf_counter()
    model.decode([FILLER] * n, logits=logits)
    model.logits(-1)
    dt = time.perf_counter() - t0
    model.trim(base)
    return dt


def fill_to(model: Any, depth: int) -> None:
    model.clear()
    model.decode([FILLER] * depth, logits="none")


STEADY_WARMUP = 3  # decodes of a shape before it is timed: llama.cpp captures a CUDA graph, then replays it


def measure_draft(draft: Any, *, depth: int, reps: int) -> dict[str, list[float]]:
    """A draft token's parts as the drafter pays them: a one-token decode, then its greedy choice
    against the default confidence floor (the rounds below use p_min 0, which skips the softmax)."""
    from specchat.engine.sampling import greedy_choice
    from specchat.engine.settings import ControllerSettings

    p_min = ControllerSettings().p_min

    fill_to(draft, depth)
    timed_decode(draft, 1, logits="last")
    decode_s, choice_s = [], []
    for _ in range(reps):
        decode_s.append(timed_decode(draft, 1, logits="last"))
        draft.decode([FILLER], logits="last")
        t0 = time.perf_counter()
        greedy_choice(draft.logits(-1), p_min)
        choice_s.append(time.perf_counter() - t0)
        draft.trim(depth)
    draft.clear()
    return {"decode_s": decode_s, "greedy_choice_s": choice_s}


# --------------------------------------------------------------------------------------------
# SpecChat beside llama-server on agreement pairs
# --------------------------------------------------------------------------------------------

LOCAL_MODES = ("baseline", "draft", "lookup", "auto")
EDIT_ALPHA = 0.8  # the code-edit prompts run with the pair nearest this share (cmd_measure)
SERVER_N_MAX = (3, 8)  # llama-server's draft-simple default (3) and a longer draft


def server_contenders(cpu: bool) -> list[tuple[str, int | None]]:
    """llama-server's speculative contenders, as (spec type, n_max): draft-simple at each n_max and
    ngram-mod, llama.cpp's best draft-free mode.  On a CPU draft-simple runs at its default only: every
    server holds its own repacked copy of the target (4.4 GB for the 7B shape) in a 24 GB machine."""
    return [("draft-simple", n) for n in (SERVER_N_MAX[:1] if cpu else SERVER_N_MAX)] + [("ngram-mod", None)]


def run_llama_bench(binary: Path, model: Path, *, cpu: bool, depth: int, reps: int, n_gen: int,
                    pp: Sequence[int]) -> list[dict[str, Any]]:
    """llama-bench's JSON rows: tg ``n_gen`` and pp of each size, at ``depth`` tokens in the cache."""
    cmd = [str(binary), "-m", str(model), "-d", str(depth), "-n", str(n_gen), "-p", ",".join(map(str, pp)),
           "-r", str(reps), "-o", "json", "-ngl", "0" if cpu else "99"]
    from specchat.engine import cpu_kernels
    from specchat.errors import exit_description

    cmd += cpu_kernels.server_args(frozenset({"--repack"}))  # llama-bench's switch, where the probe found a fault
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"llama-bench {exit_description(res.returncode)}: {res.stderr.strip().splitlines()[-1:]}")
    return [{k: row.get(k) for k in ("n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "avg_ns")}
            for row in json.loads(res.stdout)]


def measure_shapes(model: Any, *, depth: int, sizes: Sequence[int], reps: int) -> dict[str, Any]:
    """Decode costs as a loop pays them: each size repeated (steady: llama.cpp replays its CUDA graph
    from the third call of a shape) and the sizes cycled (every call a new shape: a re-capture each)."""
    fill_to(model, depth)
    steady: dict[str, list[float]] = {}
    for n in sizes:
        for _ in range(STEADY_WARMUP):
            timed_decode(model, n)
        steady[str(n)] = [timed_decode(model, n) for _ in range(reps)]
    churn: dict[str, list[float]] = {str(n): [] for n in sizes}
    for _ in range(reps):
        for n in sizes:
            churn[str(n)].append(timed_decode(model, n))
    model.clear()
    return {"steady_s": steady, "churn_s": churn}


def measure_costs(pairs: AgreementPairs, *, cpu: bool, depth: int, reps: int) -> dict[str, Any]:
    """SpecChat's per-shape costs on the target and the (alpha-independent) draft: steady and churned
    decode sizes, and a drafted token (one-token decode + greedy choice on the draft's peaked logits)."""
    from specchat.engine.runtime import LoadedModel, ModelOptions

    opts = ModelOptions(n_ctx=4096, n_gpu_layers=0 if cpu else -1)
    sizes = [1, 2, 3, 4, 5, 6, 8, 12, 16]
    out: dict[str, Any] = {}
    for name, path in (("target", pairs.target), ("draft", next(iter(pairs.drafts.values())))):
        model = LoadedModel(path, opts, n_outputs=max(sizes))
        try:
            out[name] = measure_shapes(model, depth=depth, sizes=sizes, reps=reps)
            if name == "draft":
                out["drafted_token"] = measure_draft(model, depth=depth, reps=reps * 4)
        finally:
            model.close()
    return out


# llama-server's speculative types that remember earlier answers for as long as the server runs (ngram-mod's
# pool has no reset but a full table or a streak of misses): such a server is started afresh for each repeat,
# so that its repeats are first questions, as SpecChat's are (--first-sight).  Kept, the pool copied every
# repeat's answer from the one before (7B-shape pairs on a CPU: 53 of 64 tokens drafted and accepted, 1.5x,
# where a first question drafted nothing)
REMEMBERS = frozenset({"ngram-mod"})


def bench_alpha(pairs: AgreementPairs, alpha: float, *, server: Path, cpu: bool, out: Path, max_tokens: int,
                repeat: int, tasks: str, site: Path, suite: Path | None = None, name: str = "") -> Path:
    """An interleaved ``specchat bench`` per repeat: SpecChat in every mode, llama-server with draft-simple at
    each n_max, ngram-mod (restarted before each repeat: :data:`REMEMBERS`) and plain, on the same prompts
    (the builtin suite's ``tasks``, or ``suite``'s); returns the JSON of all of them (each run numbered with its
    repeat, the summary over every run), ``bench-<name>.json`` (``name``: ``a<alpha>`` unless given)."""
    from dataclasses import asdict

    from specchat.errors import exit_description
    from specchat.harness.bench import BenchRun, summarize
    from specchat.remote.llama_server import ManagedServer

    draft = pairs.drafts[alpha]
    gpu_layers = 0 if cpu else -1
    draft_layers = () if cpu else ("-ngld", "99")
    name = name or f"a{alpha:g}"
    logs = out / "logs" / name
    kinds = [*server_contenders(cpu), ("plain", None)]
    servers = [ManagedServer(server, pairs.target, draft if kind == "draft-simple" else None,
                             spec_type=None if kind == "plain" else kind, n_max=n, gpu_layers=gpu_layers,
                             extra_args=draft_layers if kind == "draft-simple" else (),
                             log_dir=logs / (f"n{n}" if n else kind)) for kind, n in kinds]
    json_path = out / f"bench-{name}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(site) if site.is_dir() else "",
                                                                   str(ROOT / "app")) if p))
    docs: list[dict[str, Any]] = []
    pids: dict[str, list[int | None]] = {}  # each server's process in each repeat: a restart is a new one
    try:
        urls = [s.start(timeout_s=300) for s in servers]
        print(f"  alpha {alpha:g}: specchat bench ({', '.join(LOCAL_MODES)}) beside llama-server "
              f"({', '.join(contender_names(cpu)[k] for k in contender_names(cpu) if k.startswith('server'))})",
              flush=True)
        for r in range(repeat):
            for i, (kind, _n) in enumerate(kinds):
                if r and kind in REMEMBERS:
                    servers[i].stop()
                    urls[i] = servers[i].start(timeout_s=300)
            for (kind, n), s in zip(kinds, servers, strict=True):
                pids.setdefault(kind + (f" n_max {n}" if n else ""), []).append(s.pid)
            part = logs / f"bench-r{r}.json"
            cmd = [sys.executable, "-m", "specchat", "--profile", str(out / "profile"), "bench",
                   "--target", str(pairs.target), "--draft", str(draft), "--modes", ",".join(LOCAL_MODES),
                   "--no-fit-check", "--task", tasks, "--max-tokens", str(max_tokens), "--repeat", "1",
                   *(["--suite", str(suite)] if suite is not None else []),
                   # each answer a first question: with the agreement pairs' random-weight target every prompt's
                   # answer is nearly the same text, and prompt lookup's memory of earlier answers made the
                   # repeats copies (1.67x at alpha 0.6, measuring the memory, not the draft)
                   "--first-sight",
                   *[a for u in urls[:-1] for a in ("--server", u)], "--baseline-server", urls[-1],
                   "--json", str(part), *(["--gpu-layers", "0", "--draft-gpu-layers", "0"] if cpu else [])]
            with (logs / f"bench-r{r}.log").open("w") as log:
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=3600).returncode
            if rc != 0:
                tail = (logs / f"bench-r{r}.log").read_text(errors="replace").strip().splitlines()[-5:]
                raise SystemExit(f"specchat bench {exit_description(rc)} at {name}: " + " | ".join(tail))
            doc = json.loads(part.read_text())
            for run in doc["runs"]:
                run["repeat"] = r
            docs.append(doc)
    finally:
        for s in servers:
            s.stop()
    runs = [run for doc in docs for run in doc["runs"]]
    labels = list(dict.fromkeys(run["mode"] for run in runs))
    summary = summarize([BenchRun.from_json(run) for run in runs], labels, base="baseline")
    write_json(json_path, {**docs[0], "repeat": repeat, "restarted_each_repeat": sorted(REMEMBERS), "server_pids": pids,
                           "summary": [asdict(row) for row in summary], "runs": runs})
    return json_path


def contender_names(cpu: bool) -> dict[str, str]:
    """The bench's contender keys (its --server URLs are "server", "server-2", ...) in words."""
    names = {m: f"SpecChat {'plain' if m == 'baseline' else m}" for m in LOCAL_MODES}
    for i, (kind, n) in enumerate(server_contenders(cpu)):
        names["server" if i == 0 else f"server-{i + 1}"] = f"llama-server {kind}" + (f" (n_max {n})" if n else "")
    names["server-plain"] = "llama-server plain"
    return names


def bench_table(doc: dict[str, Any], cpu: bool) -> list[str]:
    """The markdown rows of one alpha's bench (every prompt pooled), x SpecChat plain."""
    from specchat.harness.bench import BenchRun, interval_text, median_runs, summarize
    from specchat.metrics import Counts

    runs = [BenchRun.from_json(r) for r in doc["runs"]]
    names = contender_names(cpu)
    labels = [k for k in names if any(r.mode == k for r in runs)]
    rows = {r.mode: r for r in summarize(runs, labels, base="baseline") if r.task == "all"}
    med = median_runs(runs)
    lines = ["| contender | tok/s | x SpecChat plain | 95% paired | token acceptance | mean K | ms per drafted token | "
             "ms per round's verify |", "|---|---|---|---|---|---|---|---|"]
    for label in labels:
        row = rows[label]
        c = Counts.total(r.counts for r in med if r.mode == label)
        per_draft = f"{c.draft_s / c.drafted * 1e3:.2f}" if c.drafted and c.draft_s else "-"
        per_verify = f"{c.verify_s / c.rounds * 1e3:.2f}" if c.rounds and c.verify_s else "-"
        acc = f"{row.token_acceptance:.0%}" if row.token_acceptance is not None else "-"
        mult = f"{row.multiplier:.2f}x" if row.multiplier is not None else "-"
        lines.append(f"| {names[label]} | {row.decode_tok_s:.1f} | {mult} | {interval_text(row.paired)} | {acc} | "
                     f"{row.mean_k:.1f} | {per_draft} | {per_verify} |")
    return lines


def report(result: dict[str, Any]) -> str:
    """The markdown report of one measure run."""
    costs = result["costs"]
    med = statistics.median
    lines = [f"# SpecChat beside llama-server on agreement pairs: {result['hardware']}", "",
             f"{result['date']}, llama-cpp-python {result['llama_cpp_python']} ({result['backend']}), one cmake "
             f"tree for SpecChat, llama-server and llama-bench; shapes {result['shape']} "
             f"({result['target']}, {result['draft']}); {result['max_tokens']} tokens, tasks {result['tasks']}, "
             f"repeat {result['repeat']}. Command: `{result['command']}`", "",
             "## Agreement (measured: the share of 512 positions of the target's greedy path)", "",
             "| model | follows the target |", "|---|---|"]
    lines += [f"| {k} | {v:.1%} |" for k, v in result["agreement"].items()]
    lines += ["", f"## Raw llama.cpp (llama-bench, depth {result['depth']})", "", "| model | test | tok/s |", "|---|---|---|"]
    for model, rows in result["llama_bench"].items():
        for r in rows:
            test = f"tg{r['n_gen']}" if r.get("n_gen") else f"pp{r['n_prompt']}"
            lines.append(f"| {model} | {test} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} |")
    lines += ["", f"## Decode costs through SpecChat's runtime (depth {result['depth']}, medians)", "",
              "Steady: one batch size repeated (on CUDA, llama.cpp replays its captured graph from the "
              "third call of a shape). Cycled: the sizes in turn, every call a new shape (on CUDA, a graph "
              "re-capture each; on a CPU, caches warmed by another size).", "",
              "| model | tokens | steady ms | x one token | cycled sizes ms | cycled / steady |",
              "|---|---|---|---|---|---|"]
    for model in ("target", "draft"):
        st, ch = costs[model]["steady_s"], costs[model]["churn_s"]
        one = med(st["1"])
        for n in st:
            lines.append(f"| {model} | {n} | {med(st[n]) * 1e3:.3f} | {med(st[n]) / one:.2f} | "
                         f"{med(ch[n]) * 1e3:.3f} | {med(ch[n]) / med(st[n]):.2f}x |")
    d = costs["drafted_token"]
    lines += ["", f"A drafted token: {med(d['decode_s']) * 1e3:.3f} ms decode + "
              f"{med(d['greedy_choice_s']) * 1e3:.3f} ms greedy choice (the draft's peaked logits).", ""]
    if "sampling" in result:
        import backend_sampling

        lines += ["## The draft's greedy choice: on the host or in llama.cpp's graph (scripts/backend_sampling.py)",
                  "", f"A 1-token decode and its choice, {result['sampling']['tokens']} tokens, medians; "
                  "host is the loop's way (with its p_min test).", "", backend_sampling.table(result["sampling"]), ""]
    for alpha, doc in result["bench"].items():
        lines += [f"## alpha {alpha}", "", *bench_table(doc, result.get("cpu", False)), ""]
    if "edit" in result:
        edit = result["edit"]
        lines += [f"## Code-edit prompts (the pair at alpha {edit['alpha']:g})", "",
                  f"Each prompt holds the text its answer writes, with one word in {edit['every']} changed, as a "
                  "file to edit holds the code its answer repeats: prompt lookup and ngram-mod copy it up to each "
                  "change.", "", *bench_table(edit["bench"], result.get("cpu", False)), ""]
    lines += ["## Issue 22's goals", "", *goal_lines(result), ""]
    return "\n".join(lines)


def _rates(doc: dict[str, Any]) -> dict[str, float]:
    """Contender key -> decode tok/s over one bench's prompts (the summary's "all" row)."""
    from specchat.harness.bench import BenchRun, summarize

    runs = [BenchRun.from_json(r) for r in doc["runs"]]
    labels = list(dict.fromkeys(r.mode for r in runs))
    return {r.mode: r.decode_tok_s for r in summarize(runs, labels, base="baseline") if r.task == "all"}


def goal_lines(result: dict[str, Any]) -> list[str]:
    """Issue 22's goals, each met or missed on this run's figures ("-" where this run did not measure it)."""
    from specchat.harness.simulate import AGREEMENT_GOALS

    cpu = result.get("cpu", False)
    names = contender_names(cpu)
    out = []
    for share, modes, floor in AGREEMENT_GOALS:
        doc = result["bench"].get(f"{share:g}")
        if doc is None:
            out.append(f"- alpha {share:g}: {', '.join(modes)} at least {floor:.2f}x SpecChat plain: - (not run)")
            continue
        rates = _rates(doc)
        got = {m: rates.get(m, 0.0) / rates["baseline"] for m in modes}
        met = all(v >= floor for v in got.values())
        out.append(f"- alpha {share:g}: {', '.join(modes)} at least {floor:.2f}x SpecChat plain: "
                   f"{'met' if met else 'MISSED'} ({', '.join(f'{m} {v:.2f}x' for m, v in got.items())})")
    if "edit" in result:
        rates = _rates(result["edit"]["bench"])
        simple = max((v for k, v in rates.items() if names.get(k, "").startswith("llama-server draft-simple")),
                     default=0.0)
        ngram = next((v for k, v in rates.items() if names.get(k) == "llama-server ngram-mod"), 0.0)
        mine = {m: rates.get(m, 0.0) for m in ("draft", "lookup", "auto")}
        for what, bar, floor in (("1.8x llama-server's draft-simple", simple, 1.8),
                                 ("llama-server's ngram-mod", ngram, 1.0)):
            met = bool(bar) and all(v >= floor * bar for v in mine.values())
            out.append(f"- code edits: every speculative mode at least {what}: {'met' if met else 'MISSED'} ("
                       + ", ".join(f"{m} {v / bar:.2f}x" if bar else f"{m} -" for m, v in mine.items()) + ")")
    raw = next((r for r in result.get("llama_bench", {}).get("draft", []) if r.get("n_gen")), None)
    per = [_per_drafted(doc) for doc in result["bench"].values()]
    per = [p for p in per if p]
    if raw and per:
        ratio = max(per) / (1.0 / raw["avg_ts"])
        out.append(f"- a drafted token at most 1.2x the draft's raw decode (llama-bench tg): "
                   f"{'met' if ratio <= 1.2 else 'MISSED'} ({ratio:.2f}x at worst over the alphas)")
    else:
        out.append("- a drafted token at most 1.2x the draft's raw decode: - (no llama-bench or no drafted token)")
    return out


def _per_drafted(doc: dict[str, Any]) -> float:
    """Seconds per drafted token of SpecChat's draft mode in one bench (its median runs); 0 where none."""
    from specchat.harness.bench import BenchRun, median_runs
    from specchat.metrics import Counts

    c = Counts.total(r.counts for r in median_runs([BenchRun.from_json(r) for r in doc["runs"]]) if r.mode == "draft")
    return c.draft_s / c.drafted if c.drafted and c.draft_s else 0.0


def cmd_measure(args: argparse.Namespace) -> int:
    import llama_cpp

    from specchat.engine.runtime import backend_info

    t_start = time.perf_counter()
    if not args.cpu and not llama_cpp.llama_supports_gpu_offload():
        raise SystemExit(f"{llama_cpp.__file__}: this llama.cpp has no GPU offload: run the build call (or --cpu)")
    server = args.llama_server or tool_path(args.site, "llama-server")
    bench_bin = args.llama_bench or tool_path(args.site, "llama-bench")
    if not server.is_file():
        raise SystemExit(f"{server}: no llama-server: run the build call first, or give --llama-server")
    alphas = parse_alphas(args.alphas)
    tokenizer = Tokenizer.from_gguf(tokenizer_file(args))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    target_shape, draft_shape = SHAPES[args.shape]
    result: dict[str, Any] = {
        "complete": False, "hardware": hardware_name(args.cpu), "cpu": args.cpu, "date": _dt.date.today().isoformat(),
        "llama_cpp_python": llama_cpp.__version__, "backend": backend_info()["backend"],
        "shape": args.shape, "target": f"{target_shape.name} {'F16' if args.f16 else 'Q4_K_M'}",
        "draft": f"{draft_shape.name} {'F16' if args.f16 else 'Q4_K_M'}", "depth": args.depth,
        "max_tokens": args.max_tokens, "repeat": args.repeat, "tasks": args.tasks,
        "command": "gpu_kit.py " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["measure"] else "gpu_kit.py measure"}

    def save(stage: str, **found: Any) -> None:
        """What is measured so far, in OUT/results.json: a call cut short still returns it."""
        result.update(found, stage=stage, seconds=time.perf_counter() - t_start)
        write_json(out / "results.json", result)

    save("started")
    print(f"agreement pairs ({args.shape}) in {args.work}", flush=True)
    pairs = make_pairs(args.shape, tokenizer, alphas, args.work, threads=os.cpu_count() or 1,
                       quantized=not args.f16)
    agreement_ = check_pairs(pairs, tokenizer, gpu=not args.cpu)
    print("  " + ", ".join(f"{k} {v:.1%}" for k, v in agreement_.items()), flush=True)
    save("pairs", agreement=agreement_)
    raw: dict[str, Any] = {}
    if bench_bin.is_file():
        for name, path in (("target", pairs.target), ("draft", next(iter(pairs.drafts.values())))):
            raw[name] = run_llama_bench(bench_bin, path, cpu=args.cpu, depth=args.depth, reps=args.reps,
                                        n_gen=args.bench_tokens, pp=(2, 3, 4, 8, 16))
        print("  llama-bench: " + "; ".join(f"{k} tg {next(r['avg_ts'] for r in v if r['n_gen']):.1f} tok/s"
                                            for k, v in raw.items()), flush=True)
    else:
        print(f"  {bench_bin}: no llama-bench; its table is left out", flush=True)
    save("llama-bench", llama_bench=raw)
    costs = measure_costs(pairs, cpu=args.cpu, depth=args.depth, reps=args.reps)
    save("costs", costs=costs)
    sys.path.insert(0, str(ROOT / "scripts"))
    import backend_sampling  # scripts/backend_sampling.py: each way in a child process

    print("  the draft's greedy choice: host or in the graph", flush=True)
    sampling = backend_sampling.measure(next(iter(pairs.drafts.values())), gpu_layers=0 if args.cpu else -1,
                                        tokens=args.bench_tokens, reps=args.reps)
    save("sampling", sampling=sampling)
    bench: dict[str, Any] = {}
    for alpha in alphas:
        path = bench_alpha(pairs, alpha, server=server, cpu=args.cpu, out=out, max_tokens=args.max_tokens,
                           repeat=args.repeat, tasks=args.tasks, site=args.site)
        bench[f"{alpha:g}"] = json.loads(path.read_text())
        save(f"bench {alpha:g}", bench=bench)
    # the code-edit prompts, with the pair nearest the middle share: prompt lookup and ngram-mod beside the rest
    edit_alpha = min(alphas, key=lambda a: abs(a - EDIT_ALPHA))
    suite = edit_suite(pairs, tokenizer, out / "logs" / "edit-suite.jsonl", tokens=args.max_tokens)
    path = bench_alpha(pairs, edit_alpha, server=server, cpu=args.cpu, out=out, max_tokens=args.max_tokens,
                       repeat=args.repeat, tasks="edit", site=args.site, suite=suite, name="edit")
    save("bench edit", edit={"alpha": edit_alpha, "every": EDIT_EVERY, "bench": json.loads(path.read_text())})
    save("done", complete=True)
    from specchat.files import write_text_atomically

    write_text_atomically(out / "report.md", report(result) + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:  # at most 8 files come back from a device call
        tar.add(out / "logs", arcname="logs")
    print(report(result), flush=True)
    print(f"measured in {result['seconds']:.0f} s: {out / 'report.md'}, {out / 'results.json'}, "
          f"{out / 'logs.tar.gz'}", flush=True)
    return 0
