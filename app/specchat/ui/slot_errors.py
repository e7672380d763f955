"""An exception that escapes a Qt slot: one line in the window, its traceback in a log, the app running on.

PySide6 hands an exception raised in a slot called from Qt to ``sys.excepthook`` and goes on; the
default hook prints a traceback to a terminal the user of a desktop app never sees.  While the window
runs, :class:`SlotErrors` is that hook: it appends the traceback to ``DATA/errors.log`` (kept under
:data:`MAX_LOG_BYTES`, the older half in ``errors.log.1``) and shows one line naming the error and the
log.  A bug in one command then costs that command, never the window or what it holds.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

from specchat.errors import one_line

MAX_LOG_BYTES = 1 << 20


def log_traceback(log_path: Path, text: str) -> str:
    """Append ``text`` (a traceback) to ``log_path`` (kept under :data:`MAX_LOG_BYTES`, the older half in
    ``NAME.1``); "; details in LOG" for the line that tells the user, "" when the log cannot be written."""
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if log_path.exists() and log_path.stat().st_size > MAX_LOG_BYTES:
            log_path.replace(log_path.with_name(log_path.name + ".1"))
        with log_path.open("a", encoding="utf-8") as f:
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}\n{text}\n")
    except OSError:
        return ""  # a full disk: the line still shows, without a log to point at
    return f"; details in {log_path}"


class SlotErrors:
    def __init__(self, show: Callable[[str], None], log_path: Path) -> None:
        self.show = show
        self.log_path = log_path
        self.count = 0

    def __call__(self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):  # Ctrl-C in the terminal that started the app: quit as before
            sys.__excepthook__(kind, exc, tb)
            return
        self.count += 1
        where = self._log("".join(traceback.format_exception(kind, exc, tb)))
        try:
            self.show(f"Something went wrong: {one_line(f'{kind.__name__}: {exc}', 160)}. "
                      f"The app keeps running{where}.")
        except Exception:  # noqa: BLE001 - the window itself is failing: the terminal is all that is left
            sys.__excepthook__(kind, exc, tb)

    def _log(self, text: str) -> str:
        return log_traceback(self.log_path, text)

    @contextlib.contextmanager
    def installed(self) -> Iterator[SlotErrors]:
        """The hook while the block runs; the one before it after."""
        before = sys.excepthook
        sys.excepthook = self
        try:
            yield self
        finally:
            sys.excepthook = before
