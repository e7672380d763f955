"""What every command line module shares: the exit codes, the one error type, and the pair, sampling and
structured-output settings read from a command's arguments.

``cli``, ``cli_models`` and ``cli_servers`` import this; it imports none of them (no import circle).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specchat.config import AppConfig, ConfigError
from specchat.errors import UserError

EXIT_BAD_INPUT = 2
EXIT_INCOMPATIBLE = 3


class CliError(UserError):
    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def models_from_args(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """(target, draft) from --pair, --target/--draft or the default pair."""
    from specchat.pair_loading import PairError, default_pair, resolve_pair

    config: AppConfig = args.config
    try:
        if args.pair:
            target, draft = resolve_pair(args.pair, args.profile)
        elif args.target:
            target, draft = args.target, None
        else:
            found = default_pair(config, args.profile)
            if found is None:
                raise CliError(f"no model given: --pair ID, --target FILE, or set target in {config.path}")
            target, draft = found
    except PairError as exc:
        raise CliError(str(exc)) from None
    return target, (args.draft if args.draft is not None else draft)


def pair_config_from_args(args: argparse.Namespace):
    from specchat.pair_loading import PairError, pair_config

    try:
        return pair_config(args.config, args.profile, args.target, args.draft, n_ctx=args.ctx,
                           threads=args.threads, gpu_layers=args.gpu_layers,
                           draft_gpu_layers=args.draft_gpu_layers, k_max=args.k_max)
    except (PairError, ConfigError) as exc:
        raise CliError(str(exc)) from None


def sampling_from_args(args: argparse.Namespace):
    from specchat.engine.settings import SamplingSettings

    s = SamplingSettings(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                         repeat_penalty=args.repeat_penalty, seed=args.seed, structured=structured_from_args(args))
    try:
        s.validate()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return s


def structured_from_args(args: argparse.Namespace):
    """``--json-schema FILE`` or ``--grammar FILE``, read and checked (parsed by llama.cpp, no model)
    before any model loads; every problem is one line naming the file."""
    from specchat.engine.grammar import check_structured
    from specchat.engine.settings import MAX_STRUCTURED_BYTES, GrammarError, Structured, StructuredOutput

    for kind, path in ((Structured.JSON_SCHEMA, getattr(args, "json_schema", None)),
                       (Structured.GRAMMAR, getattr(args, "grammar", None))):
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_STRUCTURED_BYTES + 1)
        except OSError as exc:
            raise CliError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if len(data) > MAX_STRUCTURED_BYTES:
            raise CliError(f"{path}: over {MAX_STRUCTURED_BYTES >> 10} KiB, too large for a schema or grammar")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        structured = StructuredOutput(kind, text)
        try:
            check_structured(structured)
        except GrammarError as exc:
            raise CliError(f"{path}: {exc}") from None
        return structured
    return StructuredOutput()


def load_pair_from_args(args: argparse.Namespace):
    """Resolve the pair (sets ``args.target`` / ``args.draft``), check it fits, load it, remember it."""
    from specchat.engine.pair import IncompatiblePair, SpeculativePair
    from specchat.engine.runtime import LlamaError
    from specchat.models.registry import RegistryError
    from specchat.pair_loading import fit_problem, record_last_pair

    args.target, args.draft = models_from_args(args)
    config = pair_config_from_args(args)
    if not args.no_fit_check:
        problem = fit_problem(config)
        if problem:
            raise CliError(f"{problem} (--no-fit-check loads it anyway)")
    try:
        pair = SpeculativePair(config)
    except IncompatiblePair as exc:
        raise CliError(str(exc), EXIT_INCOMPATIBLE) from None
    except LlamaError as exc:
        raise CliError(str(exc)) from None
    try:
        record_last_pair(args.profile, config.target, config.draft)
    except RegistryError as exc:
        print(f"specchat: note: not remembered as the last pair: {exc}", file=sys.stderr)
    return pair
