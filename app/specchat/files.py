"""How SpecChat writes its own files: atomically, under a lock, and never over a damaged one.

Every file the app writes (the registry, the user catalog, the config, the calibration
cache) goes through these three functions:

- :func:`write_text_atomically`: a unique temp file in the same directory, flushed and
  fsynced, then renamed over the target, so a reader (or a kill -9 at any moment) sees
  the old file or the new one, never half of one, and two processes never share a
  temp name; only a regular file is ever replaced (a symbolic link is written through to
  its target; a folder, a device or a link to one is refused: :func:`writable_target`);
- :func:`locked`: the cross-process lock for a read-modify-write (``NAME.lock`` beside
  the file), so concurrent processes merge their changes instead of overwriting;
- :func:`move_aside`: a damaged file is renamed ``NAME.corrupt-YYYYmmdd-HHMMSS``, never
  silently replaced; the caller says so in one line (:func:`warn`: the ``specchat``
  logger, which the CLI prints to stderr and the app shows).

A process killed between creating its temp file and the rename leaves ``.NAME.XXXXXXXX.tmp``
behind.  Nothing ever reads one (readers open ``NAME`` only); the next write of ``NAME``
removes those older than :data:`STALE_TEMP_S`.

Qt-free and a leaf: it imports nothing of the app but the error type.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from specchat.errors import UserError, one_line

LOCK_TIMEOUT_S = 10.0
# A write takes milliseconds (fsync included); a temp file this old belongs to a writer that
# was killed.  An hour leaves a writer stalled on a slow disk far more time than it needs.
STALE_TEMP_S = 3600.0
_TEMP_RANDOM = "[a-z0-9_]{8}"  # tempfile.mkstemp's random part

log = logging.getLogger("specchat")


class FileBusyError(UserError):
    """Another process held a file's lock for longer than the timeout."""


class NotARegularFile(OSError):
    """The path names something a write must never replace: a directory, a device, a FIFO, a socket, or a
    symbolic link whose target is not a regular file (``strerror`` says which, in words)."""


def writable_target(path: Path) -> Path:
    """Where a write of ``path`` lands: ``path`` itself, or for a symbolic link the regular file it points
    to (so the link stays a link); a path not there yet is created.  :class:`NotARegularFile` for anything
    that is not a regular file (as root, ``os.replace`` would put a regular file over ``/dev/null``);
    other OSError when it cannot be looked at."""
    path = Path(path)
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        if os.path.islink(path):  # a link to nothing: writing through it would create its target, unasked
            raise NotARegularFile(errno.ENOENT, "a symbolic link to nothing", str(path)) from None
        return target
    if not stat.S_ISREG(mode):
        what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        where = "a symbolic link to " + what if os.path.islink(path) else what
        raise NotARegularFile(errno.EEXIST, f"{where}, not a regular file", str(path))
    return target


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never half of one.

    The temp file has a unique name in the same directory (two processes never share
    one), is flushed to disk, then renamed over ``path``; on any failure it is removed
    and ``path`` is untouched.  Only a regular file is ever replaced: a symbolic link is
    written through (its target replaced, the link kept), anything else is refused
    (:func:`writable_target`).  Raises OSError.
    """
    write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """:func:`write_text_atomically` for bytes (an image, an export)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    path = writable_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # keep the file's permissions (a new file stays 0600, private like the data)
            with contextlib.suppress(OSError):
                os.chmod(tmp, path.stat().st_mode & 0o7777)
        if writable_target(path) != path:  # changed into a link or a device meanwhile: leave it alone
            raise NotARegularFile(errno.EEXIST, "changed while it was written", str(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    remove_stale_temps(path)


def remove_stale_temps(path: Path, older_than_s: float = STALE_TEMP_S) -> list[Path]:
    """Remove the temp files of ``path`` that writers killed mid-write left behind; returns them.

    Only names :func:`write_text_atomically` makes (``.NAME.XXXXXXXX.tmp``) and only older
    than ``older_than_s``, so a write in progress in another process is never touched.
    """
    pattern = re.compile(rf"\.{re.escape(path.name)}\.{_TEMP_RANDOM}\.tmp")
    cutoff = time.time() - older_than_s
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            with contextlib.suppress(OSError):
                if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False) \
                        and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def read_capped(path: Path, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``path`` and whether there was more (a file of ours that
    grew past any size we write is damaged, and is never read whole into memory).
    Raises OSError (FileNotFoundError when there is none)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return data[:limit], len(data) > limit


def warn(message: str) -> None:
    """One line for the user about a file SpecChat repaired (moved aside, rebuilt, re-measured)."""
    log.warning(one_line(message, 2000))


def lock_file(path: Path) -> Path:
    """The lock file :func:`locked` uses for ``path`` (made on first use, then left in place)."""
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``NAME.lock`` beside ``path`` (filelock: released by the OS when a process dies).

    Raises FileBusyError after ``timeout`` seconds, OSError when the directory cannot be made.
    """
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file(path)), timeout=timeout)
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
