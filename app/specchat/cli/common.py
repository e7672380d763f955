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
    from specchat.backends.pairs import PairError, default_pair, resolve_pair

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


def open_from_args(args: argparse.Namespace, backend: str = ""):
    """The backend the arguments name, open: ``backend`` "" (this machine's pair: --pair, --target/--draft
    or the default pair), ``llama-server`` (that pair in a llama-server SpecChat starts, drafting with
    ``--spec-type``; ``llama-server:TYPE`` names the type itself) or a server's name or URL.  The same choice the window makes for a chat
    (:func:`specchat.backends.choose.choose`), opened by the same factory.  A pair is checked to fit
    first (unless ``--no-fit-check``) and remembered as the last pair once it loaded."""
    from specchat.backends.choose import choose
    from specchat.backends.factory import backend_factory
    from specchat.backends.pairs import fit_problem, record_last_pair
    from specchat.engine.cancel import CancelToken
    from specchat.engine.pair import IncompatiblePair, PairConfig, SpeculativePair
    from specchat.engine.runtime import LlamaError
    from specchat.models.registry import RegistryError
    from specchat.remote.llama_server import MANAGED

    spec_type = getattr(args, "spec_type", None) or "draft-simple"
    if backend.startswith(MANAGED + ":"):  # llama-server:TYPE, so that one bench can run several drafters
        backend, spec_type = MANAGED, backend.partition(":")[2]
    overrides = {}
    if backend in ("", MANAGED):
        args.target, args.draft = models_from_args(args)
        overrides = dict(n_ctx=args.ctx, threads=args.threads, gpu_layers=args.gpu_layers,
                         draft_gpu_layers=args.draft_gpu_layers, k_max=args.k_max)
    try:
        config = choose(args.config, args.profile, backend=backend, target=args.target, draft=args.draft,
                        spec_type=spec_type, **overrides)
    except (UserError, ConfigError) as exc:
        raise CliError(str(exc)) from None
    if isinstance(config, PairConfig) and not args.no_fit_check:
        problem = fit_problem(config)
        if problem:
            raise CliError(f"{problem} (--no-fit-check loads it anyway)")
    try:  # the fit is checked above (or skipped on request): the factory loads the pair as it is
        opened = backend_factory(SpeculativePair)(config, CancelToken(), _say_waiting())
    except IncompatiblePair as exc:
        raise CliError(str(exc), EXIT_INCOMPATIBLE) from None
    except LlamaError as exc:
        raise CliError(str(exc)) from None
    if isinstance(config, PairConfig):
        try:
            record_last_pair(args.profile, config.target, config.draft)
        except RegistryError as exc:
            print(f"specchat: note: not remembered as the last pair: {exc}", file=sys.stderr)
    return opened


def _say_waiting():
    """A load's progress sink that says one line on stderr when the calibration waits for a quieter machine
    (engine/contention.py); the rest of a load goes unsaid in a terminal."""
    from specchat.engine.progress import LoadPhase, LoadProgress

    told = False

    def sink(step: LoadProgress) -> None:
        nonlocal told
        if step.phase is LoadPhase.WAITING and not told:
            told = True
            print(f"specchat: the machine is busy: waiting for a quieter machine to calibrate {step.name} again "
                  f"(up to {step.total:.0f} s)", file=sys.stderr, flush=True)

    return sink


def load_pair_from_args(args: argparse.Namespace):
    """This machine's pair as the arguments name it, loaded (:func:`open_from_args`): the bench runs its
    modes on the pair itself.  Sets ``args.target`` / ``args.draft``."""
    return open_from_args(args).pair
