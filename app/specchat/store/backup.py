"""Backups of the chat database: consistent copies, kept N deep, one before every schema migration.

Qt-free.  A backup is a copy made with SQLite's online backup API (``Connection.backup``): consistent
while the app writes (WAL readers see one snapshot), written to a temp name and renamed, so a half-made
backup is never listed.  They live in ``backups/`` beside the database (the profile's data dir), named
``specchat-YYYYmmdd-HHMMSS-REASON.sqlite3`` (REASON: ``daily``, ``manual``, ``before-vN`` before the
migration to schema N, ``before-restore``); the newest :func:`prune` ``keep`` stay.

:func:`migrate_with_backup` is how :func:`specchat.store.open_store` migrates: a database that needs a
migration is backed up first; if the migration fails, the backup is copied back into the database (so
it is as it was, its schema included) and the failure is one :class:`StoreError` line that says so.
:func:`restore` puts a backup back into an open database (the window's "Restore a backup…"), after
backing up what it replaces.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .db import StoreError, migrate, schema_version
from .schema import MIGRATIONS, Migration

log = logging.getLogger(__name__)

BACKUP_DIR = "backups"
DEFAULT_KEEP = 7
_NAME = re.compile(r"specchat-(\d{8}-\d{6})(?:-(\d+))?-([a-z0-9-]{1,40})\.sqlite3")


@dataclass(frozen=True, slots=True)
class Backup:
    path: Path
    when: float  # seconds since the epoch, from the name
    reason: str
    size: int

    @property
    def when_text(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.when))


def backup_dir(database: Path) -> Path:
    return Path(database).parent / BACKUP_DIR


def list_backups(folder: Path) -> list[Backup]:
    """The backups in ``folder``, newest first (only the names this module makes)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            match = _NAME.fullmatch(entry.name)
            if not match or not entry.is_file(follow_symlinks=False):
                continue
            try:
                when = time.mktime(time.strptime(match.group(1), "%Y%m%d-%H%M%S"))
                info = entry.stat(follow_symlinks=False)
            except (ValueError, OverflowError, OSError):
                continue
            order = (when, int(match.group(2) or 1), info.st_mtime_ns)  # within a second: the one written last
            found.append((order, Backup(Path(entry.path), when, match.group(3), info.st_size)))
    found.sort(key=lambda t: t[0], reverse=True)
    return [b for _, b in found]


def make_backup(conn: sqlite3.Connection, database: Path, *, reason: str, keep: int | None = DEFAULT_KEEP,
                now: float | None = None) -> Path:
    """Copy the database open on ``conn`` into its backups folder; prune to ``keep`` (None: no pruning); the new file.
    StoreError (one line) when the copy cannot be made (the disk full, the folder not writable)."""
    folder = backup_dir(database)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    target = folder / f"specchat-{stamp}-{reason}.sqlite3"
    n = 1
    while target.exists():
        n += 1
        target = folder / f"specchat-{stamp}-{n}-{reason}.sqlite3"
    tmp = folder / f".{target.name}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(str(tmp))) as dst:
            conn.backup(dst)
            # a copy is one file: no -wal beside it to lose when it is copied or moved
            dst.execute("PRAGMA journal_mode = DELETE")
        os.replace(tmp, target)
    except (OSError, sqlite3.Error) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(f"could not back up the chats to {folder}: {getattr(exc, 'strerror', None) or exc}") from None
    if keep is not None:
        prune(folder, keep)
    return target


def backup_file(database: Path, *, reason: str, keep: int | None = DEFAULT_KEEP) -> Path:
    """:func:`make_backup` on a connection of its own (so from any thread: the scheduled backup runs on a
    task runner while the window writes)."""
    try:
        conn = sqlite3.connect(str(database))
    except sqlite3.Error as exc:
        raise StoreError(f"could not back up {database}: {exc}") from None
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        return make_backup(conn, database, reason=reason, keep=keep)
    finally:
        conn.close()


def prune(folder: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` backups (at least one stays); the removed ones."""
    removed = []
    for old in list_backups(folder)[max(keep, 1):]:
        with contextlib.suppress(OSError):
            old.path.unlink()
            removed.append(old.path)
    return removed


def due(database: Path, every_hours: float, now: float | None = None) -> bool:
    """Whether a scheduled backup is due: none newer than ``every_hours`` (0: never scheduled)."""
    if every_hours <= 0:
        return False
    newest = list_backups(backup_dir(database))
    now = time.time() if now is None else now
    return not newest or now - newest[0].when >= every_hours * 3600 - 60


def migrate_with_backup(conn: sqlite3.Connection, database: Path, *, keep: int = DEFAULT_KEEP,
                        migrations: dict[int, Migration] | None = None) -> int:
    """:func:`specchat.store.db.migrate`, with a backup first when the file has chats of an older schema;
    a migration that fails puts the backup back and says so in one line (StoreError)."""
    migrations = MIGRATIONS if migrations is None else migrations
    newest = max(migrations)
    current = schema_version(conn)
    if current == 0 or current >= newest:
        return migrate(conn, migrations)  # a new file has nothing to lose; a newer one is refused there
    made = make_backup(conn, database, reason=f"before-v{newest}", keep=keep)
    try:
        return migrate(conn, migrations)
    except Exception as exc:
        why = str(exc) or type(exc).__name__
        try:
            reached = schema_version(conn)
        except sqlite3.Error:
            reached = -1
        if reached == current:  # each version is one transaction: the failed one left nothing behind
            raise StoreError(f"the chat database could not be upgraded to schema {newest} ({why}); it is as it "
                             f"was (a copy from before is {made})") from exc
        try:
            _copy_into(made, conn)
        except (OSError, sqlite3.Error) as again:
            raise StoreError(f"the chat database could not be upgraded to schema {newest} ({why}), nor put back "
                             f"({again}); the copy from before is {made}") from exc
        raise StoreError(f"the chat database could not be upgraded to schema {newest} ({why}); it was put back "
                         f"as it was from the backup {made}") from exc


def restore(conn: sqlite3.Connection, database: Path, chosen: Path, *, keep: int = DEFAULT_KEEP,
            after: Callable[[sqlite3.Connection], object] | None = None) -> Path:
    """Put the backup ``chosen`` back into the database open on ``conn``; what it replaced is backed up
    first (``before-restore``), which is returned.  ``after`` (the migration) runs on the restored file.
    StoreError (one line) for a backup that is not a SpecChat database or is newer than this SpecChat."""
    newest = max(MIGRATIONS)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{chosen}?mode=ro", uri=True)) as src:
            ok = src.execute("PRAGMA quick_check").fetchone()[0]
            version = schema_version(src)
    except sqlite3.Error as exc:
        raise StoreError(f"{chosen} is not a SpecChat backup: {exc}") from None
    if ok != "ok" or version == 0:
        raise StoreError(f"{chosen} is not a SpecChat backup ({'damaged' if ok != 'ok' else 'no chats schema'})")
    if version > newest:
        raise StoreError(f"{chosen} has schema version {version}; this SpecChat knows up to {newest}")
    saved = make_backup(conn, database, reason="before-restore", keep=None)  # never prunes the chosen one
    try:
        _copy_into(chosen, conn)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"could not restore {chosen}: {exc}") from None
    if after is not None:
        after(conn)
    prune(backup_dir(database), keep)
    return saved


def _copy_into(source: Path, conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src:
        src.backup(conn)
