"""What native work this app had under way, so that the next start knows when the last one died in it.

llama.cpp runs in the app's own process (its contexts live in the generation thread).  A fault in
it (SIGILL from an instruction the CPU advertises and cannot run, SIGSEGV) ends the process at
once: no Python ``finally`` runs, no dialog shows, and the next start would load the same pair
again and die the same way.  Two files in the profile's data dir remember it:

- ``native-work.json``: written (atomically) before a model pair loads or answers, removed after;
  found at the next start, it names what was running when the process ended;
- ``crash.log``: Python's :mod:`faulthandler` writes the fatal signal and every thread's stack there
  (a kill -9 writes nothing, so the two cases read differently).

:func:`read_last_crash` turns them into one :class:`LastCrash` at start-up (the crash log kept as
``crash.log.1`` for a bug report); the session then holds that pair back from the automatic preload,
asks the CPU probe again (engine/cpu_kernels.py) and says so in one line.  Qt-free.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from specchat.errors import UserError, one_line
from specchat.files import read_capped, write_text_atomically

WORK_FILE = "native-work.json"
CRASH_LOG = "crash.log"
MAX_READ = 64 << 10  # both files are small; a bigger one is read this far


@dataclass(frozen=True, slots=True)
class LastCrash:
    """How the last run of the app ended, when it did not close."""

    what: str  # "loading" | "answering" | "" (no native work was under way)
    label: str  # what was loading or answering: the target's file name
    files: tuple[Path, ...]  # the model files of that pair
    fatal: str  # "Fatal Python error: Illegal instruction"; "" when the process left no word (kill -9, power)
    log: Path | None  # the kept crash log (crash.log.1), if there was one

    def line(self) -> str:
        """One line for the window."""
        how = f"crashed ({self.fatal.removeprefix('Fatal Python error: ')})" if self.fatal else "ended unexpectedly"
        where = f" while {self.what} {self.label}" if self.what else ""
        held = ": it was not loaded again. Send a message to load it, or choose another pair" if self.files else ""
        kept = f" (the crash log is {self.log})" if self.log is not None else ""
        return one_line(f"SpecChat {how} last time{where}{held}{kept}.")


class NativeWork:
    """The record of native work under way in this process (one per app; the generation thread writes it)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / WORK_FILE

    @contextlib.contextmanager
    def running(self, what: str, label: str, files: Sequence[Path]) -> Iterator[None]:
        """Recorded while the block runs; nothing is recorded for work with no model files (a server:
        its crash is its own process's).  A record that cannot be written (a full disk) is skipped: the
        work is worth more than its record."""
        if not files:
            yield
            return
        doc = {"what": what, "label": label, "files": [str(f) for f in files], "pid": os.getpid(),
               "since": time.time()}
        try:
            write_text_atomically(self.path, json.dumps(doc) + "\n")
            written = True
        except (OSError, UserError):
            written = False
        try:
            yield
        finally:
            if written:
                with contextlib.suppress(OSError):
                    self.path.unlink()


_crash_log: IO[str] | None = None  # held open for faulthandler while the app runs


def enable_crash_log(data_dir: Path) -> Path | None:
    """Have :mod:`faulthandler` write a fatal signal's report into ``data_dir/crash.log`` (emptied now:
    read the last one with :func:`read_last_crash` first).  None when the file cannot be opened."""
    global _crash_log
    path = Path(data_dir) / CRASH_LOG
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115  (held until the process ends)
    except OSError:
        return None
    if _crash_log is not None:
        _crash_log.close()
    _crash_log = handle
    faulthandler.enable(file=handle, all_threads=True)
    return path


def read_last_crash(data_dir: Path) -> LastCrash | None:
    """What the last run left: None after a clean close.  Both files are taken away (the crash log
    renamed ``crash.log.1``), so the same crash is told once."""
    data_dir = Path(data_dir)
    work_path, log_path = data_dir / WORK_FILE, data_dir / CRASH_LOG
    work: dict[str, object] = {}
    had_work = work_path.exists()
    if had_work:
        try:
            loaded = json.loads(read_capped(work_path, MAX_READ)[0].decode("utf-8", errors="replace"))
            work = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError, RecursionError):
            work = {}
        with contextlib.suppress(OSError):
            work_path.unlink()
    fatal, kept = "", None
    try:
        text = read_capped(log_path, MAX_READ)[0].decode("utf-8", errors="replace") if log_path.exists() else ""
    except OSError:
        text = ""
    if text.strip():
        fatal = next((one_line(line, 120) for line in text.splitlines() if line.startswith("Fatal Python error")),
                     one_line(text.splitlines()[0], 120))
        kept = log_path.with_name(CRASH_LOG + ".1")
        try:
            os.replace(log_path, kept)
        except OSError:
            kept = None
    if not had_work and not fatal:
        return None
    files = work.get("files")
    return LastCrash(
        what={"load": "loading", "answer": "answering"}.get(str(work.get("what", "")), "") if had_work else "",
        label=one_line(str(work.get("label", "")), 200),
        files=tuple(Path(f) for f in files if isinstance(f, str))[:4] if isinstance(files, list) else (),
        fatal=fatal, log=kept)
