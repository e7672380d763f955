"""Provision the llama-server the real-server tests run against (tests/remote, ``real_server``).

It is built from the llama.cpp that the installed llama-cpp-python vendors: the sdist of
that version is downloaded with ``pip download`` (the test machines reach package
registries only), ``vendor/llama.cpp`` is extracted and cmake builds ``llama-server``
(and ``ggml-rpc-server``) for the CPU, once per machine, into the user cache dir
(``~/.cache/specchat/llama-server/<version>-cpu``).  A finished build is found by its
stamp, so a second run returns at once.

    python scripts/test_server.py               # build or reuse; progress on stderr, the path last
    python scripts/test_server.py --print-path  # only the binary's path on stdout
    python scripts/test_server.py --jobs 2      # parallel compile jobs (default: all cores)

Tests import :func:`build_root` and :func:`cached_binary` from here (tests/remote/conftest.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from specchat.errors import UserError
from specchat.remote import build

ACCEL = "cpu"


def build_root() -> Path:
    """Where the build lives: ``SPECCHAT_LLAMA_SERVER_ROOT`` if set, else the user cache dir's."""
    env = os.environ.get("SPECCHAT_LLAMA_SERVER_ROOT")
    return Path(env) if env else build.default_build_root()


def cached_binary(root: Path | None = None) -> Path | None:
    """The finished CPU build's llama-server, or None (a stamp check: nothing is built)."""
    return build.cached_build(root or build_root(), ACCEL)


def ensure(*, jobs: int | None = None, quiet: bool = False) -> Path:
    """The CPU llama-server, built once per machine and llama-cpp-python version."""

    def log(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    return build.build_llama_server(build_root(), accel=ACCEL, jobs=jobs, log=log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-path", action="store_true", help="print only the binary's path")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        path = ensure(jobs=args.jobs, quiet=args.print_path)
    except UserError as e:
        print(f"test_server: {e}", file=sys.stderr)
        return 2
    if args.print_path:
        print(path)
    else:
        print(f"llama-server ready at {path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
