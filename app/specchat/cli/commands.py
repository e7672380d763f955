"""Command line: ``specchat chat``, ``specchat bench``, ``specchat models ...``.

Bad input (a missing, truncated or non-GGUF file, a bad flag) exits 2 with one
line and no traceback; an incompatible pair exits 3 with the reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from specchat.cli.common import (
    EXIT_BAD_INPUT,
    CliError,
)
from specchat.cli.common import load_pair_from_args as _load_pair
from specchat.cli.common import models_from_args as _models
from specchat.cli.common import sampling_from_args as _sampling
from specchat.config import BY_KEY, AppConfig, ConfigError, as_int, example_toml
from specchat.errors import UserError, one_line, printable
from specchat.modes import MENU_NAMES
from specchat.profile import Profile

# the options __main__ takes before any command (split_global_flags), which argparse never sees
GLOBAL_OPTIONS = """\
'specchat' alone opens the desktop app. For the app and every command:
  --profile DIR    keep every file under DIR (DIR/config.toml, DIR/data, DIR/cache):
                   profiles run side by side
  --config FILE    the settings from FILE instead of the profile's config.toml
  --self-test      check the install (models, engine, window) and exit; without a
                   display: QT_QPA_PLATFORM=offscreen specchat --self-test
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        raise CliError(f"{self.prog}: {message}")

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, and every text value of this parser's arguments is checked to be UTF-8."""
        parsed, rest = super().parse_known_args(args, namespace)
        for action in self._actions:
            _check_text(action, getattr(parsed, action.dest, None))
        return parsed, rest


def _check_text(action: argparse.Action, value: object) -> None:
    """CliError naming the argument when ``value`` (a str, or a list of them) is not UTF-8 text.

    Python hands over argv bytes that are not UTF-8 (a Latin-1 terminal) as lone surrogates, which
    no model, server or file can take.  Paths are left alone: a file name is bytes to the OS."""
    for text in value if isinstance(value, list) else [value]:
        if not isinstance(text, str):
            continue
        bad = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
        if bad is not None:
            name = action.option_strings[-1] if action.option_strings else action.metavar or action.dest
            code = ord(text[bad])
            byte = f" (byte 0x{code - 0xDC00:02x})" if 0xDC80 <= code <= 0xDCFF else ""
            raise CliError(f"{name}: not valid UTF-8 text at character {bad + 1}{byte}; "
                           "set the terminal to UTF-8 or convert the text")


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number in lo..hi (a huge --ctx must be refused here, not overflow later)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo:,} to {hi:,}: {text[:40]}")
        return v

    parse.__name__ = "whole number"  # what argparse names in its message
    return parse


_positive_int = _int_in(1, 1 << 20)
MAX_CTX = 1 << 24  # 16M tokens: past any model's trained context; beyond it only arithmetic overflows


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return v


def _fractions(text: str) -> list[float]:
    """A comma-separated list of numbers from 0 to 1 (at most 16)."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not 1 <= len(parts) <= 16:
        raise argparse.ArgumentTypeError(f"'{text}': give 1 to 16 numbers between 0 and 1, comma-separated")
    return [_fraction(t) for t in parts]


def _setting(key: str) -> Callable[[str], int]:
    """An argparse type checked like the config's ``key`` (one range for the flag and the file)."""
    def parse(text: str) -> int:
        try:
            return as_int(BY_KEY[key].check(int(text)))
        except ValueError as exc:  # ConfigError is one
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1] if isinstance(exc, ConfigError)
                                             else f"not a whole number: {text}") from None
    parse.__name__ = key
    return parse


def _add_model_args(p: argparse.ArgumentParser, config: AppConfig) -> None:
    """Model and decoding flags; defaults from the config file (``--config FILE``, ``--profile DIR``)."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--pair", metavar="ID",
                       help="a catalog pair you pulled ('specchat models pull ID') or an installed model's name")
    which.add_argument("--target", type=Path, metavar="FILE", help="target GGUF file")
    p.add_argument("--draft", type=Path, metavar="FILE",
                   help="draft GGUF file (same tokenizer as the target); default: the pair's draft")
    p.epilog = ("Without --pair or --target: the target and draft set in config.toml, else the last pair "
                "used (by the app, chat or bench).")
    p.add_argument("--ctx", type=_setting("n_ctx"), default=None,
                   help=f"context size in tokens (default {config['n_ctx']})")
    p.add_argument("--threads", type=_setting("threads"), default=None,
                   help=f"CPU threads, 0: fitted (physical cores, fewer while other work holds some) (default {config['threads']})")
    p.add_argument("--gpu-layers", type=_setting("gpu_layers"), default=None,
                   help=f"target layers on the GPU (-1 all, 0 none; default {config['gpu_layers']})")
    p.add_argument("--draft-gpu-layers", type=_setting("draft_gpu_layers"), default=None,
                   help=f"draft layers on the GPU (default {config['draft_gpu_layers']})")
    p.add_argument("--k-max", type=_setting("k_max"), default=None,
                   help=f"longest draft (default {config['k_max']})")
    p.add_argument("--no-fit-check", action="store_true",
                   help="load even when the memory estimate says the pair cannot fit")
    p.add_argument("--temp", type=float, default=0.0, help="temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0xC0FFEE)


def build_parser(config: AppConfig | None = None) -> argparse.ArgumentParser:
    from specchat import __version__

    config = config or AppConfig.defaults()

    parser = _Parser(prog="specchat", description="Local GGUF chat with visible speculative decoding.",
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=GLOBAL_OPTIONS)
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    chat = sub.add_parser("chat", help="stream one answer in the terminal")
    _add_model_args(chat, config)
    chat.add_argument("--mode", choices=MENU_NAMES, default=str(config["default_mode"]),
                      help=f"speculation (default {config['default_mode']}, from the config)")
    chat.add_argument("--system", default=None, help="system prompt")
    chat.add_argument("--max-tokens", type=_positive_int, default=512)
    chat.add_argument("--reasoning", choices=["on", "off"], default=None,
                      help="turn the model's reasoning mode on or off (templates with enable_thinking)")
    chat.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    chat.add_argument("--server", metavar="NAME|URL", default=None,
                      help="answer on a server (a name from 'specchat servers list', or a URL) instead of locally; "
                           "'llama-server' (or 'llama-server:TYPE'): the pair in a llama-server SpecChat starts "
                           "and stops")
    chat.add_argument("--spec-type", metavar="TYPE", default=None,
                      help="with --server llama-server: llama.cpp's --spec-type (default draft-simple; "
                           "ngram-mod needs no draft model)")
    held = chat.add_mutually_exclusive_group()
    held.add_argument("--json-schema", type=Path, metavar="FILE", default=None,
                      help="the answer is JSON that follows this JSON schema (speculation stays on)")
    held.add_argument("--grammar", type=Path, metavar="FILE", default=None,
                      help="the answer follows this GBNF grammar (llama.cpp's grammar language)")
    chat.add_argument("prompt", help="the user message")

    bench = sub.add_parser("bench", help="plain vs speculative decoding speed, same run")
    _add_model_args(bench, config)
    bench.add_argument("--modes", default="baseline,draft,lookup,auto",
                       help="comma-separated modes (default: baseline,draft,lookup,auto)")
    bench.add_argument("--suite", default="builtin", help="'builtin' or a JSONL file of {id, task, messages}")
    bench.add_argument("--max-tokens", type=_positive_int, default=128)
    bench.add_argument("--repeat", type=_positive_int, default=1)
    bench.add_argument("--json", type=Path, default=None, help="write every run as JSON here")
    bench.add_argument("--trace", type=Path, metavar="FILE", default=None,
                       help="also record an agreement trace of the suite here (hardware-independent, for "
                            "'specchat simulate') and check the simulator against this run")
    bench.add_argument("--trace-k-max", type=_int_in(1, 64), default=16, metavar="N",
                       help="draft tokens per position the trace records (default 16)")
    bench.add_argument("--save-profile", type=Path, metavar="FILE", default=None,
                       help="write this machine's cost profile (from the calibration and the measured rounds)")
    bench.add_argument("--server", metavar="NAME|URL", action="append", default=None,
                       help="also bench this server (the one with the draft), in the same run; repeatable: "
                            "labelled server, server-2, ...; 'llama-server:TYPE' (e.g. llama-server:ngram-mod, "
                            "llama-server:draft-mtp) runs the pair in a llama-server SpecChat starts, drafting "
                            "with that --spec-type")
    bench.add_argument("--baseline-server", metavar="NAME|URL", default=None,
                       help="a server with the same model and no draft: the server's plain reference")
    bench.add_argument("--reference", action="store_true",
                       help="also measure llama-bench-style raw decode speed (no sampling, no loop)")
    bench.add_argument("--structured", choices=["off", "on", "both"], default="off",
                       help="run the prompts that have a JSON schema (the builtin JSON ones) held to it: 'on', "
                            "or 'both' free and held (task 'json+schema'); default off")
    bench.add_argument("--task", default=None, metavar="TAGS",
                       help="only the prompts of these tasks, comma-separated (e.g. json)")
    bench.add_argument("--first-sight", action="store_true",
                       help="empty prompt lookup's memory of earlier answers before every run, so each is "
                            "measured as a session's first question; without it a repeat (or a prompt whose "
                            "answer resembles an earlier one) can copy an earlier answer, as Regenerate does")

    sim = sub.add_parser("simulate", help="replay an agreement trace against a cost profile, with the real controller")
    sim.add_argument("--trace", type=Path, action="append", default=[], metavar="FILE",
                     help="a trace from 'specchat bench --trace' (repeatable)")
    sim.add_argument("--agreement", type=_fractions, default=None, metavar="ALPHAS",
                     help="instead of a trace: the GPU kit's agreement pairs at these shares, e.g. 0.6,0.8,0.9 "
                          "(a draft right on that share of tokens, 8 answers of 256 tokens per share)")
    sim.add_argument("--profile", dest="cost_profile", action="append", required=True, metavar="PROFILE",
                     help="a shipped profile's name, 'all' (every shipped one) or a profile file (repeatable)")
    sim.add_argument("--drafter-costs", type=Path, default=None, metavar="FILE",
                     help="draft with a trained drafter's cost shape instead of the profile's draft model: a JSON "
                          "file {\"specchat_drafter_costs\": 1, \"kind\": \"draft-dflash\", \"call_x\": 0.8, "
                          "\"token_x\": 0, \"block\": 16}: the kind (draft-simple, draft-mtp, draft-eagle3, "
                          "draft-dflash, draft-dspark), one draft call's fixed cost and each drafted token's, in "
                          "target tokens of the profile, and the most tokens one call drafts (0: no limit); "
                          "the draft mode, auto and the fixed-K rows use it")
    sim.add_argument("--noise", type=_fraction, default=None, help="replace the profiles' relative timing noise")
    sim.add_argument("--seed", type=_int_in(0, 1 << 30), default=0, help="seed of the simulated noise")
    sim.add_argument("--json", type=Path, default=None, metavar="FILE", help="write every figure as JSON here")

    models = sub.add_parser("models", help="the model manager: list, search, files, drafts, pull, import, check, fit")
    msub = models.add_subparsers(dest="models_command", parser_class=_Parser, required=True)
    lst = msub.add_parser("list", help="catalog pairs and installed models")
    lst.add_argument("--json", action="store_true")
    pull = msub.add_parser("pull", help="download a catalog pair (or owner/repo/file.gguf) from the hub")
    pull.add_argument("pair", help="a pair id from 'models list', or owner/repo/file.gguf")
    pull.add_argument("--draft-index", type=_int_in(0, 1000), default=0, help="which of the pair's drafts (default: first)")
    pull.add_argument("--no-check", action="store_true", help="skip the header-only compatibility check")
    msub.add_parser("rebuild", help="validate every registered file again; drop the missing and broken ones")
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
    fit.add_argument("--ctx", type=_int_in(1, MAX_CTX), default=4096)
    fit.add_argument("--no-flash-attn", action="store_true", help="estimate without flash attention")
    fit.add_argument("--json", action="store_true")
    search = msub.add_parser("search", help="search GGUF repos on the hub")
    search.add_argument("query", help="text the repo id contains (e.g. qwen2.5-coder)")
    search.add_argument("--sort", choices=("downloads", "likes", "updated"), default="downloads")
    search.add_argument("--limit", type=_int_in(1, 100), default=20)
    search.add_argument("--json", action="store_true")
    files = msub.add_parser("files", help="a hub repo's GGUF models by quantisation (split models as one)")
    files.add_argument("repo", help="owner/repo")
    files.add_argument("--fit", action="store_true", help="add where each fits here, from its header (header-only)")
    files.add_argument("--checks", type=_int_in(1, 100), default=12,
                       help="with --fit: at most this many header reads, in the order listed (default 12)")
    files.add_argument("--ctx", type=_int_in(1, MAX_CTX), default=4096)
    files.add_argument("--json", action="store_true")
    drafts = msub.add_parser("drafts", help="find drafts for TARGET on the hub (header-only checks)")
    drafts.add_argument("target", help="owner/repo/file.gguf, owner/repo (its Q4_K_M file) or a local GGUF path")
    drafts.add_argument("--checks", type=_int_in(1, 100), default=12, help="at most this many header checks")
    drafts.add_argument("--json", action="store_true")
    from specchat.cli.cuda import add_parsers as add_cuda_parsers
    from specchat.cli.servers import add_parsers as add_server_parsers

    add_server_parsers(sub)
    from specchat.cli.chats import add_parsers as add_chats_parsers

    add_chats_parsers(sub)
    add_cuda_parsers(sub)
    from specchat.cli.serve import add_parser as add_serve_parser

    add_serve_parser(sub, config, _add_model_args, MENU_NAMES)
    cfg = sub.add_parser("config", help="show the settings in force and where they come from")
    cfg.add_argument("--example", action="store_true", help="print every setting with its default, as TOML")
    add = msub.add_parser("add", help="add your own pair (or single model) to the catalog")
    add.add_argument("id")
    add.add_argument("--target", required=True, help="owner/repo/file.gguf")
    add.add_argument("--draft", action="append", default=[], help="owner/repo/file.gguf (repeatable)")
    add.add_argument("--name", default="")
    add.add_argument("--task", default="chat")
    return parser


def cmd_chat(args: argparse.Namespace) -> int:
    from specchat.cli.common import open_from_args
    from specchat.engine import Mode
    from specchat.engine.answer import AnswerRequest
    from specchat.engine.cancel import CancelToken

    sampling = _sampling(args)
    messages = ([{"role": "system", "content": args.system}] if args.system else [])
    messages.append({"role": "user", "content": args.prompt})
    backend = open_from_args(args, args.server or "")
    try:
        info = backend.info
        if info.server is not None:
            print(f"[{printable(info.server.summary)}]", file=sys.stderr, flush=True)
        reasoning = None if args.reasoning is None else args.reasoning == "on"
        if reasoning is not None and not info.supports_reasoning_switch:
            print("note: this model's chat template has no reasoning switch; --reasoning ignored", file=sys.stderr)
        request = AnswerRequest(tuple(messages), mode=Mode(args.mode), sampling=sampling, max_tokens=args.max_tokens,
                                reasoning=reasoning, stop=tuple(args.stop or ()))
        return _print_answer(backend.answer(request, CancelToken()))
    finally:
        backend.close()


def _print_answer(events) -> int:
    """Stream an answer's events to the terminal (reasoning to stderr) and end with the stats line."""
    from specchat.engine import Done, Error, Fallback, TokensEmitted
    from specchat.errors import for_terminal
    from specchat.stats_line import stats_line
    from specchat.store import MessageStats

    out = sys.stdout
    in_reasoning_shown = False
    rc = 0
    for ev in events:
        if isinstance(ev, TokensEmitted):  # its text comes split into reasoning and answer
            if ev.reasoning:
                if not in_reasoning_shown:
                    print("[reasoning] ", end="", file=sys.stderr)
                    in_reasoning_shown = True
                print(for_terminal(ev.reasoning, sys.stderr), end="", file=sys.stderr, flush=True)
            if ev.answer:
                out.write(for_terminal(ev.answer, out))
                out.flush()
        elif isinstance(ev, Fallback):
            print(f"\n[{'warning' if ev.warning else 'note'}] {ev.reason}", file=sys.stderr)
        elif isinstance(ev, Error):  # the model, the grammar or the server failed: never a bug of ours (those raise)
            print(f"\nspecchat: {ev.message}", file=sys.stderr)
            rc = EXIT_BAD_INPUT
        elif isinstance(ev, Done):
            s = ev.stats
            line = stats_line(MessageStats.from_generation(s, ev.stop_reason, error=ev.message
                                                           if ev.stop_reason.value == "error" else ""), "done")
            print(f"\n\n-- {line} · prompt {s.prompt_tokens} tok at {s.prefill_tok_s or 0:.0f} tok/s"
                  + (f" ({ev.message})" if ev.message and ev.stop_reason.value != "error" else ""))
            if ev.stop_reason.value == "error":
                rc = EXIT_BAD_INPUT
    return rc


def cmd_bench(args: argparse.Namespace) -> int:
    from specchat.cli.simulate import bench_extras
    from specchat.engine.controller import CostModel
    from specchat.engine.runtime import backend_info
    from specchat.engine.settings import Mode
    from specchat.harness.bench import format_table, memory_line, run_bench, summarize
    from specchat.harness.suite import SuiteError, load_suite, with_schemas

    try:
        modes = [Mode(m.strip()) for m in args.modes.split(",") if m.strip()]
    except ValueError:
        raise CliError(f"bad --modes '{args.modes}' (choose from baseline, draft, lookup, auto)") from None
    if not modes:
        raise CliError("--modes is empty")
    try:
        prompts = load_suite(args.suite)
    except SuiteError as exc:
        raise CliError(str(exc)) from None
    if args.task:
        tags = {t.strip() for t in args.task.split(",") if t.strip()}
        prompts = [p for p in prompts if p.task in tags]
        if not prompts:
            raise CliError(f"no prompt of the suite has the task {args.task!r}")
    prompts = with_schemas(prompts, args.structured)
    sampling = _sampling(args)
    if args.server or args.baseline_server:
        from specchat.cli.servers import bench_with_servers

        return bench_with_servers(args, prompts, modes, sampling)
    if Mode.DRAFT in modes and _models(args)[1] is None:
        raise CliError("mode 'draft' needs a draft model: --draft FILE, or a pair with one")
    pair = _load_pair(args)
    with pair:
        info = backend_info()
        print(f"target {args.target.name}" + (f", draft {args.draft.name}" if args.draft else "")
              + f"; backend {info['backend']}, threads {pair.target.n_threads}, ctx {pair.target.n_ctx}, "
              f"temp {sampling.temperature}, max tokens {args.max_tokens}, repeat {args.repeat}", flush=True)
        print(memory_line(modes, args.first_sight), flush=True)
        c = pair.costs
        print("calibration: verify " + ", ".join(f"{n} tok {v * 1e3:.1f} ms" for n, v in sorted(c.verify_s.items()))
              + (f"; draft token {c.draft_s['model'] * 1e3:.1f} ms" if "model" in c.draft_s else ""), flush=True)

        def progress(run) -> None:
            acc = "" if run.token_acceptance is None else f", {run.token_acceptance:.0%} accepted"
            print(f"  {run.prompt_id:<16} {run.mode:<9} #{run.repeat}: {run.tokens} tok, "
                  f"{run.decode_tok_s:.1f} tok/s{acc}", file=sys.stderr, flush=True)

        calibrated = {"verify_s": dict(c.verify_s), "draft_s": dict(c.draft_s)}  # before the run's learning
        calibration = CostModel(c.verify_s, c.draft_s)
        reference = args.reference and Mode.BASELINE in modes
        rounds: list = []
        runs, refs = run_bench(pair, prompts, modes, max_tokens=args.max_tokens, repeat=args.repeat,
                               sampling=sampling, reference=reference, progress=progress, rounds=rounds,
                               first_sight=args.first_sight)
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
                "max_tokens": args.max_tokens, "repeat": args.repeat, "first_sight": args.first_sight,
                "calibration": calibrated,
                "costs_at_end": {"verify_s": c.verify_s, "draft_s": c.draft_s},
                "reference": [asdict(r) for r in refs],
                "summary": [asdict(r) for r in rows],
                "runs": [r.to_json() for r in runs],
            }
            args.json.write_text(json.dumps(doc, indent=1))
        bench_extras(args, pair, prompts, modes, rows, rounds, calibration, info["backend"])
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from specchat.cli.models import run_models

    return run_models(args)


def cmd_config(args: argparse.Namespace) -> int:
    if args.example:
        print(example_toml())
        return 0
    config: AppConfig = args.config
    where = str(config.path) + ("" if config.path.exists() else " (not there: all defaults)")
    profile = args.profile
    print(f"# settings in force, from {where}")
    print(f"# data: {profile.data_dir}  cache: {profile.cache_dir}")
    for key, value in config.values.items():
        print(f"{key} = {json.dumps(value)}")
    return 0


def main(argv: list[str] | None = None, *, config_path: Path | None = None,
         profile: Profile | None = None) -> int:
    """Run one command.  ``profile``: the user's files (default: the platformdirs profile);
    ``config_path`` (``--config FILE``) replaces its settings file and must exist."""
    _show_warnings()
    try:
        profile = (profile or Profile.default()).with_config_file(config_path)
        try:
            config = AppConfig(profile.config_file, must_exist=config_path is not None)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        args = build_parser(config).parse_args(argv)
        args.config = config
        args.profile = profile
        if args.command == "config":
            return cmd_config(args)
        if args.command == "chat":
            return cmd_chat(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "models":
            return cmd_models(args)
        if args.command == "servers":
            from specchat.cli.servers import cmd_servers

            return cmd_servers(args)
        if args.command == "chats":
            from specchat.cli.chats import cmd_chats

            return cmd_chats(args)
        if args.command == "simulate":
            from specchat.cli.simulate import cmd_simulate

            return cmd_simulate(args)
        if args.command == "serve":
            from specchat.cli.serve import cmd_serve

            return cmd_serve(args)
        if args.command == "cuda-build":
            from specchat.cli.cuda import cmd_cuda_build

            return cmd_cuda_build(args)
        raise CliError("no command given")
    except CliError as exc:
        print(f"specchat: {exc}" if not str(exc).startswith("specchat") else str(exc), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except UserError as exc:
        # every problem the user can act on (a damaged or hostile file, a bad reference, a refused
        # download, a model that does not fit) is a UserError with a one-line message: exit 2
        print(f"specchat: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        # the file system said no (a full disk, no permission, a directory where a file goes): the user's to fix
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"specchat: {one_line(where + (exc.strerror or str(exc)))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("specchat: out of memory (a model or an input too large for this machine)", file=sys.stderr)
        return 1
    except Exception as exc:
        # a bug in SpecChat, not the user's doing: one line, the traceback kept in a file to report
        print(f"specchat: internal error: {_crash_report(exc)}", file=sys.stderr)
        return 1


def _show_warnings() -> None:
    """Warnings of the core (logger "specchat": a damaged file moved aside, a cache rebuilt) as
    ``specchat: ...`` lines on stderr, once per process."""
    import logging

    class ToStderr(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:  # sys.stderr as it is now, not at set-up
            print(f"specchat: {one_line(record.getMessage())}", file=sys.stderr)

    log = logging.getLogger("specchat")
    if not any(type(h).__name__ == "ToStderr" for h in log.handlers):
        log.addHandler(ToStderr(logging.INFO))
        log.setLevel(logging.INFO)


def _crash_report(exc: BaseException) -> str:
    """Write the traceback to a temp file; return one line naming the error and that file."""
    import tempfile
    import traceback

    what = f"{type(exc).__name__}: {exc}"
    try:
        fd, path = tempfile.mkstemp(prefix="specchat-crash-", suffix=".txt")
        with open(fd, "w", encoding="utf-8") as f:
            f.write("".join(traceback.format_exception(exc)))
    except OSError:
        return one_line(what)
    return one_line(f"{what} (please report it with {path})")
