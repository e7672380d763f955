"""How SpecChat writes its own files: atomically, under a lock, and never over a damaged one.

Every file the app writes (the registry, the user catalog, the config, the calibration
cache) goes through these three functions:

- :func:`write_text_atomically`: a unique temp file in the same directory, flushed and
  fsynced, then renamed over the target, so a reader (or a kill -9 at any moment) sees
  the old file or the new one, never half of one, and two processes never share a
  temp name;
- :func:`locked`: the cross-process lock for a read-modify-write (``NAME.lock`` beside
  the file), so concurrent processes merge their changes instead of overwriting;
- :func:`move_aside`: a damaged file is renamed ``NAME.corrupt-YYYYmmdd-HHMMSS``, never
  silently replaced; the caller says so in one line.

Qt-free and a leaf: it imports nothing of the app but the error type.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from specchat.errors import UserError

LOCK_TIMEOUT_S = 10.0


class FileBusyError(UserError):
    """Another process held a file's lock for longer than the timeout."""


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never half of one.

    The temp file has a unique name in the same directory (two processes never share
    one), is flushed to disk, then renamed over ``path``; on any failure it is removed
    and ``path`` is untouched.  Raises OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # keep the file's permissions (a new file stays 0600, private like the data)
            with contextlib.suppress(OSError):
                os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``NAME.lock`` beside ``path`` (filelock: released by the OS when a process dies).

    Raises FileBusyError after ``timeout`` seconds, OSError when the directory cannot be made.
    """
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(f"{path}.lock", timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise FileBusyError(f"{path}: busy: another SpecChat process holds {lock.lock_file}; "
                            "try again when it is done") from None
    try:
        yield
    finally:
        lock.release()


def move_aside(path: Path, now: float | None = None, *, kind: str = "corrupt") -> Path:
    """Rename a damaged file (and SQLite's -wal/-shm beside it) to ``NAME.corrupt-YYYYmmdd-HHMMSS``.

    Never overwrites: a second damaged file in the same second gets ``-2``, ``-3``...
    Returns the new path.  Raises OSError.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    target = path.with_name(f"{path.name}.{kind}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target
