"""Opening the SQLite database: pragmas, schema version, forward migrations, search index.

Why these settings:

- ``journal_mode=WAL`` with ``synchronous=NORMAL``: a commit is an append to the
  write-ahead log without an fsync per transaction, so the streaming answer can be
  committed twice a second for almost nothing.  A committed transaction survives the
  *process* being killed (the log is in the OS page cache); only a power cut can lose the
  last few commits, never corrupt the file.
- ``foreign_keys=ON``: deleting a chat cascades to its messages in the database itself,
  so no code path can leave orphans behind.
- ``busy_timeout``: a second process (a CLI command, a second window) that touches the
  file waits instead of failing at once.

Threads: a ``sqlite3.Connection`` belongs to the thread that opened it (we keep Python's
``check_same_thread`` check on, so breaking the rule fails loudly).  In the app the GUI
thread opens the store and is its only user; the generation worker never writes: it
sends its immutable events to the GUI thread, which appends them through an
``AnswerWriter``.  A tool that needs the database on another thread opens its own
connection with :func:`specchat.store.chats.open_store`.

Schema changes are forward migrations (schema.py): ``MIGRATIONS[n]`` turns version
``n - 1`` into version ``n``, with SQL statements and, where SQL cannot say it (rewriting
JSON documents), Python functions of the connection; each version's steps run in one
transaction with the version bump, so a crash mid-way leaves the old version intact.  A database written by a newer SpecChat is refused rather
than guessed at.  The full-text index is not part of the versioned schema: it is an
optional accelerator, created (or dropped) at every open depending on whether this
Python's SQLite has FTS5.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from specchat.errors import UserError

from .schema import MIGRATIONS, Migration

DB_FILENAME = "specchat.sqlite3"


class StoreError(UserError):
    """The database cannot be used (written by a newer version, not a SQLite file ...)."""


class StoreWriteError(StoreError):
    """A write the database refused (the disk full, the file made read-only, locked longer than the
    busy timeout): one line; the transaction was rolled back, so nothing is half-written."""

    def __init__(self, exc: sqlite3.Error) -> None:
        super().__init__(f"could not save to the chat database: {exc}")


# MIGRATIONS (schema.py) maps each version to the steps that make it from the one before.
SCHEMA_VERSION = max(MIGRATIONS)

# External-content FTS5 index over message text, kept in step by triggers (which also
# fire for the ON DELETE CASCADE of a chat).  Reasoning text is not indexed: it is
# collapsed in the UI and matching hidden text would look like a wrong result.
FTS_TABLE = "message_fts"
_FTS_CREATE = [
    f"""CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(
        content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2')""",
    f"""CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
        INSERT INTO {FTS_TABLE} (rowid, content) VALUES (new.id, new.content);
    END""",
    f"""CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
        INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    f"""CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO {FTS_TABLE} (rowid, content) VALUES (new.id, new.content);
    END""",
    f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}) VALUES ('rebuild')",
]
_FTS_TRIGGERS = ("messages_fts_ai", "messages_fts_ad", "messages_fts_au")


def default_path() -> Path:
    """``<platformdirs user data dir>/specchat.sqlite3``."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("specchat")) / DB_FILENAME


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One explicit write transaction (the connection runs in autocommit mode otherwise).

    ``BEGIN IMMEDIATE`` takes the write lock up front, so two processes never both read a
    version and then both try to migrate.  A write SQLite refuses (``OperationalError``: disk
    full, read-only, busy) is one :class:`StoreWriteError`, after the rollback: every write of
    the store goes through here.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        raise StoreWriteError(exc) from None
    try:
        yield conn
        conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        _rollback(conn)
        raise StoreWriteError(exc) from None
    except BaseException:
        _rollback(conn)
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # a rollback that fails leaves SQLite's own rollback on close
            conn.execute("ROLLBACK")


def connect(path: Path, upgrade: Callable[[sqlite3.Connection], object] | None = None) -> sqlite3.Connection:
    """Open ``path`` (creating it and its folder), set the pragmas and migrate the schema (``upgrade``:
    how, default :func:`migrate`; ``open_store`` backs the file up first, ``backup.migrate_with_backup``)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit; writes that belong together use transaction().
        conn = sqlite3.connect(str(path), isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        conn.row_factory = sqlite3.Row
        # text that is not UTF-8 (SpecChat never writes it; another tool may) reads with U+FFFD in place of
        # the bad bytes, instead of failing the whole query it is in
        conn.text_factory = _lenient_text
        conn.execute("PRAGMA busy_timeout = 5000")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":  # e.g. a file system without shared memory
            raise StoreError(f"cannot use WAL journal mode for {path} (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # Case-insensitive substring search beyond ASCII (SQLite's lower() is ASCII-only).
        conn.create_function("py_casefold", 1, _casefold, deterministic=True)
        (upgrade or migrate)(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"cannot open {path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _casefold(text: object) -> str | None:
    return text.casefold() if isinstance(text, str) else None


def schema_version(conn: sqlite3.Connection) -> int:
    """The version recorded in the file; 0 for a new, empty database."""
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not has_table:
        return 0
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, migrations: dict[int, Migration] | None = None) -> int:
    """Bring the schema up to the newest version, one transaction per step; return it."""
    migrations = MIGRATIONS if migrations is None else migrations
    newest = max(migrations)
    with transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        if conn.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 0:
            conn.execute("INSERT INTO schema_version (version) VALUES (0)")
    while True:
        with transaction(conn):
            current = schema_version(conn)  # re-read under the write lock
            if current > newest:
                raise StoreError(
                    f"the database has schema version {current}; this SpecChat knows up to {newest}"
                )
            if current == newest:
                return current
            for step in migrations[current + 1]:
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            conn.execute("UPDATE schema_version SET version = ?", (current + 1,))


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite build has FTS5: try to create a throw-away table."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._specchat_fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    conn.execute("DROP TABLE temp._specchat_fts5_probe")
    return True


def ensure_search_index(conn: sqlite3.Connection, want: bool | None = None) -> bool:
    """Create or drop the FTS5 index so that it matches ``want``; return whether it is used.

    ``want=None`` means "use FTS5 when this SQLite has it".  Dropping matters too: a file
    that was indexed on a machine with FTS5 and is opened where FTS5 is missing would
    otherwise fail every insert through the triggers.
    """
    available = fts5_available(conn)
    use = available if want is None else (want and available)
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (FTS_TABLE,)).fetchone() is not None
    if use and not exists:
        with transaction(conn):
            for statement in _FTS_CREATE:
                conn.execute(statement)
    elif not use and exists:
        with transaction(conn):
            for trigger in _FTS_TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        # Without the fts5 module the virtual table cannot be dropped; with the triggers
        # gone it is inert, and the LIKE search never reads it.
        with contextlib.suppress(sqlite3.OperationalError):
            conn.execute(f"DROP TABLE {FTS_TABLE}")
    return use
