"""Command line: ``specchat chat``, ``specchat bench``, ``specchat models ...``.

Bad input (a missing, truncated or non-GGUF file, a bad flag) exits 2 with one
line and no traceback; an incompatible pair exits 3 with the reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

from specchat.config import AppConfig, ConfigError, example_toml

EXIT_BAD_INPUT = 2
EXIT_INCOMPATIBLE = 3


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise CliError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text}")
    return v


def _add_model_args(p: argparse.ArgumentParser, config: AppConfig, *, draft: bool = True) -> None:
    """Model and decoding flags; their defaults come from the config file (``--config FILE``)."""
    target = config.model_path("target")
    p.add_argument("--target", required=target is None, default=target, type=Path,
                   help="target GGUF file" + (f" (default from the config: {target})" if target else ""))
    if draft:
        d = config.model_path("draft")
        p.add_argument("--draft", type=Path, default=d,
                       help="draft GGUF file (same tokenizer as the target)" + (f"; default {d}" if d else ""))
    p.add_argument("--ctx", type=_positive_int, default=config["n_ctx"],
                   help=f"context size in tokens (default {config['n_ctx']})")
    p.add_argument("--threads", type=int, default=config["threads"], help="CPU threads (0: physical cores)")
    p.add_argument("--gpu-layers", type=int, default=config["gpu_layers"],
                   help=f"target layers on the GPU (-1 all, 0 none; default {config['gpu_layers']})")
    p.add_argument("--draft-gpu-layers", type=int, default=config["draft_gpu_layers"],
                   help=f"draft layers on the GPU (default {config['draft_gpu_layers']})")
    p.add_argument("--k-max", type=_positive_int, default=config["k_max"],
                   help=f"longest draft (default {config['k_max']})")
    p.add_argument("--temp", type=float, default=0.0, help="temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0xC0FFEE)


def build_parser(config: AppConfig | None = None) -> argparse.ArgumentParser:
    from specchat import __version__

    config = config or AppConfig.defaults()

    parser = _Parser(prog="specchat", description="Local GGUF chat with visible speculative decoding.")
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    chat = sub.add_parser("chat", help="stream one answer in the terminal")
    _add_model_args(chat, config)
    mode = {"off": "baseline"}.get(str(config["default_mode"]), str(config["default_mode"]))
    chat.add_argument("--mode", choices=["auto", "draft", "lookup", "baseline"], default=mode)
    chat.add_argument("--system", default=None, help="system prompt")
    chat.add_argument("--max-tokens", type=_positive_int, default=512)
    chat.add_argument("--reasoning", choices=["on", "off"], default=None,
                      help="turn the model's reasoning mode on or off (templates with enable_thinking)")
    chat.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    chat.add_argument("prompt", help="the user message")

    bench = sub.add_parser("bench", help="plain vs speculative decoding speed, same run")
    _add_model_args(bench, config)
    bench.add_argument("--modes", default="baseline,draft,lookup,auto",
                       help="comma-separated modes (default: baseline,draft,lookup,auto)")
    bench.add_argument("--suite", default="builtin", help="'builtin' or a JSONL file of {id, task, messages}")
    bench.add_argument("--max-tokens", type=_positive_int, default=128)
    bench.add_argument("--repeat", type=_positive_int, default=1)
    bench.add_argument("--json", type=Path, default=None, help="write every run as JSON here")
    bench.add_argument("--reference", action="store_true",
                       help="also measure llama-bench-style raw decode speed (no sampling, no loop)")

    models = sub.add_parser("models", help="the model manager: list, pull, import, check, fit")
    msub = models.add_subparsers(dest="models_command", parser_class=_Parser, required=True)
    lst = msub.add_parser("list", help="catalog pairs and installed models")
    lst.add_argument("--json", action="store_true")
    pull = msub.add_parser("pull", help="download a catalog pair (or owner/repo/file.gguf) from the hub")
    pull.add_argument("pair", help="a pair id from 'models list', or owner/repo/file.gguf")
    pull.add_argument("--draft-index", type=int, default=0, help="which of the pair's drafts (default: first)")
    pull.add_argument("--no-check", action="store_true", help="skip the header-only compatibility check")
    imp = msub.add_parser("import", help="validate local GGUF files and add them to the registry")
    imp.add_argument("paths", nargs="+", type=Path)
    imp.add_argument("--json", action="store_true")
    check = msub.add_parser("check", help="can DRAFT serve TARGET? exit 0 yes, 3 no (files or owner/repo/file)")
    check.add_argument("target")
    check.add_argument("draft")
    check.add_argument("--json", action="store_true")
    fit = msub.add_parser("fit", help="will TARGET [DRAFT] fit in this machine's memory?")
    fit.add_argument("target", type=Path)
    fit.add_argument("draft", type=Path, nargs="?")
    fit.add_argument("--ctx", type=_positive_int, default=4096)
    fit.add_argument("--no-flash-attn", action="store_true", help="estimate without flash attention")
    fit.add_argument("--json", action="store_true")
    cfg = sub.add_parser("config", help="show the settings in force and where they come from")
    cfg.add_argument("--example", action="store_true", help="print every setting with its default, as TOML")
    add = msub.add_parser("add", help="add your own pair (or single model) to the catalog")
    add.add_argument("id")
    add.add_argument("--target", required=True, help="owner/repo/file.gguf")
    add.add_argument("--draft", action="append", default=[], help="owner/repo/file.gguf (repeatable)")
    add.add_argument("--name", default="")
    add.add_argument("--task", default="chat")
    return parser


def _pair_config(args: argparse.Namespace):
    from platformdirs import user_cache_dir

    from specchat.engine.pair import PairConfig
    from specchat.engine.runtime import ModelOptions
    for path in (args.target, getattr(args, "draft", None)):
        if path is not None and not path.is_file():
            raise CliError(f"{path}: no such file")
    config: AppConfig = getattr(args, "config", None) or AppConfig.defaults()
    c = config.controller()  # thresholds, K bounds, p_min from the config; --k-max wins
    controller = replace(c, k_max=args.k_max, k_min=min(c.k_min, args.k_max))
    topts = ModelOptions(n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads)
    dl = args.draft_gpu_layers if args.draft_gpu_layers is not None else args.gpu_layers
    dopts = ModelOptions(n_ctx=args.ctx, n_gpu_layers=dl, n_threads=args.threads)
    return PairConfig(
        target=args.target, draft=getattr(args, "draft", None), target_options=topts, draft_options=dopts,
        controller=controller,
        calibration_cache=Path(user_cache_dir("specchat")) / "calibration.json",
    )


def _sampling(args: argparse.Namespace):
    from specchat.engine.settings import SamplingSettings

    s = SamplingSettings(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                         repeat_penalty=args.repeat_penalty, seed=args.seed)
    try:
        s.validate()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return s


def _load_pair(args: argparse.Namespace):
    from specchat.engine.pair import IncompatiblePair, SpeculativePair
    from specchat.engine.runtime import LlamaError

    try:
        return SpeculativePair(_pair_config(args))
    except IncompatiblePair as exc:
        raise CliError(str(exc), EXIT_INCOMPATIBLE) from None
    except LlamaError as exc:
        raise CliError(str(exc)) from None


def cmd_chat(args: argparse.Namespace) -> int:
    from specchat.engine import Done, Error, Fallback, Mode, TokensEmitted
    from specchat.engine.reasoning import ReasoningParser

    sampling = _sampling(args)
    pair = _load_pair(args)
    with pair:
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        reasoning = None if args.reasoning is None else args.reasoning == "on"
        if reasoning is not None and not pair.chat_format.supports_reasoning_switch:
            print("note: this model's chat template has no reasoning switch; --reasoning ignored", file=sys.stderr)
        prompt = pair.chat_prompt(messages, reasoning=reasoning)
        parser = ReasoningParser(prompt.starts_in_reasoning)
        out = sys.stdout
        in_reasoning_shown = False
        rc = 0
        for ev in pair.generate(prompt.tokens, mode=Mode(args.mode), sampling=sampling,
                                max_tokens=args.max_tokens, stop=args.stop):
            if isinstance(ev, TokensEmitted):
                split = parser.feed(ev.text)
                if split.reasoning:
                    if not in_reasoning_shown:
                        print("[reasoning] ", end="", file=sys.stderr)
                        in_reasoning_shown = True
                    print(split.reasoning, end="", file=sys.stderr, flush=True)
                if split.answer:
                    out.write(split.answer)
                    out.flush()
            elif isinstance(ev, Fallback):
                print(f"\n[{'warning' if ev.warning else 'note'}] {ev.reason}", file=sys.stderr)
            elif isinstance(ev, Error):
                print(f"\nspecchat: {ev.message}", file=sys.stderr)
                rc = 1
            elif isinstance(ev, Done):
                rest = parser.flush()
                out.write(rest.answer)
                s = ev.stats
                print(f"\n\n-- {s.summary()} · prompt {s.prompt_tokens} tok at {s.prefill_tok_s:.0f} tok/s"
                      f" · stop: {ev.stop_reason.value}" + (f" ({ev.message})" if ev.message else ""))
                if ev.stop_reason.value == "error":
                    rc = EXIT_BAD_INPUT if "prompt is" in ev.message else 1
    return rc


def cmd_bench(args: argparse.Namespace) -> int:
    from specchat.engine.bench import format_table, run_bench, summarize
    from specchat.engine.runtime import backend_info
    from specchat.engine.settings import Mode
    from specchat.engine.suite import SuiteError, load_suite

    try:
        modes = [Mode(m.strip()) for m in args.modes.split(",") if m.strip()]
    except ValueError:
        raise CliError(f"bad --modes '{args.modes}' (choose from baseline, draft, lookup, auto)") from None
    if not modes:
        raise CliError("--modes is empty")
    if Mode.DRAFT in modes and args.draft is None:
        raise CliError("mode 'draft' needs --draft")
    try:
        prompts = load_suite(args.suite)
    except SuiteError as exc:
        raise CliError(str(exc)) from None
    sampling = _sampling(args)
    pair = _load_pair(args)
    with pair:
        info = backend_info()
        print(f"target {args.target.name}" + (f", draft {args.draft.name}" if args.draft else "")
              + f"; backend {info['backend']}, threads {pair.target.n_threads}, ctx {pair.target.n_ctx}, "
              f"temp {sampling.temperature}, max tokens {args.max_tokens}, repeat {args.repeat}", flush=True)
        c = pair.costs
        print("calibration: verify " + ", ".join(f"{n} tok {v * 1e3:.1f} ms" for n, v in sorted(c.verify_s.items()))
              + (f"; draft token {c.draft_s['model'] * 1e3:.1f} ms" if "model" in c.draft_s else ""), flush=True)

        def progress(run) -> None:
            acc = "" if run.token_acceptance is None else f", {run.token_acceptance:.0%} accepted"
            print(f"  {run.prompt_id:<16} {run.mode:<9} #{run.repeat}: {run.tokens} tok, "
                  f"{run.decode_tok_s:.1f} tok/s{acc}", file=sys.stderr, flush=True)

        calibrated = {"verify_s": dict(c.verify_s), "draft_s": dict(c.draft_s)}  # before the run's learning
        reference = args.reference and Mode.BASELINE in modes
        runs, refs = run_bench(pair, prompts, modes, max_tokens=args.max_tokens, repeat=args.repeat,
                               sampling=sampling, reference=reference, progress=progress)
        rows = summarize(runs, modes)
        print(format_table(rows))
        if refs:
            ratios = sorted(r.ratio for r in refs)
            raw = sum(r.tokens - 1 for r in refs) / sum((r.tokens - 1) / r.raw_decode_tok_s for r in refs)
            print(f"llama-bench-style raw decode (same prompts, depth and token count, right after each baseline "
                  f"run): {raw:.1f} tok/s; baseline/raw median {statistics.median(ratios):.1%} "
                  f"(range {ratios[0]:.1%} to {ratios[-1]:.1%}, {len(refs)} pairs)")
        if args.json:
            doc = {
                "target": args.target.name, "draft": args.draft.name if args.draft else None,
                "backend": info["backend"], "llama_cpp_python": info["llama_cpp_python"],
                "threads": pair.target.n_threads, "ctx": pair.target.n_ctx, "temp": sampling.temperature,
                "max_tokens": args.max_tokens, "repeat": args.repeat,
                "calibration": calibrated,
                "costs_at_end": {"verify_s": c.verify_s, "draft_s": c.draft_s},
                "reference": [asdict(r) for r in refs],
                "summary": [asdict(r) for r in rows],
                "runs": [r.to_json() for r in runs],
            }
            args.json.write_text(json.dumps(doc, indent=1))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from specchat.cli_models import run_models

    return run_models(args)


def cmd_config(args: argparse.Namespace) -> int:
    if args.example:
        print(example_toml())
        return 0
    config: AppConfig = args.config
    where = str(config.path) + ("" if config.path.exists() else " (not there: all defaults)")
    print(f"# settings in force, from {where}")
    for key, value in config.values.items():
        print(f"{key} = {json.dumps(value)}")
    return 0


def main(argv: list[str] | None = None, *, config_path: Path | None = None) -> int:
    try:
        try:
            config = AppConfig(config_path, must_exist=config_path is not None)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        args = build_parser(config).parse_args(argv)
        args.config = config
        if args.command == "config":
            return cmd_config(args)
        if args.command == "chat":
            return cmd_chat(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "models":
            return cmd_models(args)
        raise CliError("no command given")
    except CliError as exc:
        print(f"specchat: {exc}" if not str(exc).startswith("specchat") else str(exc), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
