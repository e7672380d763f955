"""Entry point: ``specchat`` opens the desktop app; ``specchat CMD ...`` runs a command.

``--config FILE`` (anywhere before a command's own arguments) reads the settings from
FILE instead of the config.toml in the platformdirs config dir, for the app and the
commands alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

COMMANDS = ("chat", "bench", "models", "config", "-h", "--help", "--version")


def split_config_flag(argv: list[str]) -> tuple[Path | None, list[str]]:
    """Take ``--config FILE`` / ``--config=FILE`` out of argv (only before the command's prompt)."""
    rest: list[str] = []
    path: Path | None = None
    it = iter(argv)
    for arg in it:
        if arg == "--":
            rest += [arg, *it]
            break
        if arg == "--config":
            value = next(it, None)
            if value is None or value.startswith("-"):
                raise ValueError("--config needs a file")
            path = Path(value)
        elif arg.startswith("--config="):
            path = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return path, rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        config_path, argv = split_config_flag(argv)
    except ValueError as exc:
        print(f"specchat: {exc}", file=sys.stderr)
        return 2
    if argv[:1] == ["--self-test"]:
        from specchat.ui.self_test import run_self_test

        return run_self_test(argv[1:])
    if not argv or argv[0] not in COMMANDS:
        from specchat.ui.app import run_app

        return run_app(argv, config_path=config_path)
    from specchat.cli import main as cli_main

    return cli_main(argv, config_path=config_path)


if __name__ == "__main__":
    sys.exit(main())
