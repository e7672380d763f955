"""The terminal commands: ``main`` parses and dispatches (commands.py); models, servers and simulate
are their own modules; common.py holds what they share (exit codes, CliError, readers of arguments)."""

from .commands import main

__all__ = ["main"]
