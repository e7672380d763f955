"""The one error type that reaches the user: :class:`UserError`.

Every failure a person can cause or fix (a damaged or hostile file, a bad reference,
a refused download, an incompatible pair, a model that does not fit) is raised as a
subclass of UserError whose message is one line naming the thing and what to do.  The
command line prints it as ``specchat: <message>`` and exits 2; the app shows it in one
dialog or in the chat.  Anything else that escapes is a bug in SpecChat.

Qt-free and a leaf: it imports nothing of the app, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator


class UserError(Exception):
    """A problem the user can act on; ``str()`` is always one line (newlines and runs of
    whitespace in the message, say from a quoted file name or server answer, are collapsed)."""

    def __str__(self) -> str:
        return one_line(super().__str__())


def one_line(text: str, limit: int = 400) -> str:
    """``text`` as one line of at most ``limit`` characters (control characters become spaces)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def printable(text: object, limit: int = 400) -> str:
    """A string from outside (a server's model id, its build or notes, a hub's file name) as it may go to
    a terminal: every character that is not printable (ESC and the other controls, which can retitle or
    clear the terminal; bidi overrides; lone surrogates) shown as its escape (``\\x1b``, ``\\u202e``),
    the whole cut to ``limit`` characters.  The one helper for printing what a server or the hub said."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text)[: limit * 2])
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def for_terminal(text: str, stream: object) -> str:
    """A model's streamed text as it may go to ``stream``: unchanged into a pipe or a file (the
    model's exact words), but on a terminal every control character other than newline and tab
    (ESC sequences that retitle, recolour or clear it; bidi overrides) shown as its escape, as
    :func:`printable` does, without a length limit."""
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1] for c in text)


@contextlib.contextmanager
def collect_warnings() -> Iterator[list[str]]:
    """Collect what the core logs as warnings meanwhile (logger "specchat": a damaged file moved
    aside and rebuilt, a cache re-measured), one line each, for a caller that shows them."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(one_line(record.getMessage()))

    log = logging.getLogger("specchat")
    handler = Keep(logging.WARNING)
    log.addHandler(handler)
    try:
        yield seen
    finally:
        log.removeHandler(handler)


def exit_description(returncode: int | None) -> str:
    """How a child process ended, in words: "exited with status 3", "was killed by SIGILL (illegal
    instruction)".  For every place that reports a child's end (a crash is never just a number)."""
    if returncode is None:
        return "is still running"
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"was killed by signal {-returncode}"
    what = signal.strsignal(sig) or ""
    return f"was killed by {sig.name}" + (f" ({what.lower()})" if what else "")
