"""Entry point: ``specchat`` opens the desktop app; ``specchat CMD ...`` runs a command."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("chat", "bench", "models", "-h", "--help", "--version"):
        try:
            from specchat.ui.app import run_app
        except ImportError:
            print("specchat: the desktop app is not built yet; try 'specchat chat --help'", file=sys.stderr)
            return 2
        return run_app(argv)
    from specchat.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
