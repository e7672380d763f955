"""Backups: consistent copies kept N deep, one before every migration, put back when a migration fails,
and restorable into the open database."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from specchat.store import StoreError, open_store
from specchat.store import backup as backups
from specchat.store.db import migrate, schema_version
from specchat.store.schema import MIGRATIONS

V1_FILE = Path(__file__).parent / "data" / "v1-release.sqlite3"


def titles(store) -> list[str]:
    return sorted(c.title for c in store.list_chats())


def test_a_backup_holds_the_chats_and_only_the_newest_n_are_kept(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    with open_store(db) as store:
        store.add_message(store.create_chat("kept").id, "user", "hello")
        made = [backups.make_backup(store.connection, db, reason="daily", keep=3, now=1_800_000_000 + i * 3600)
                for i in range(5)]
    listed = backups.list_backups(backups.backup_dir(db))
    assert [b.path for b in listed] == made[:-4:-1]  # the three newest, newest first
    assert not made[0].exists() and not made[1].exists()
    with open_store(listed[0].path) as copy:
        assert titles(copy) == ["kept"]
        assert [m.content for m in copy.messages(copy.list_chats()[0].id)] == ["hello"]


def test_a_backup_is_consistent_while_a_write_is_open_on_another_connection(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    with open_store(db) as store, open_store(db, recover=False) as other:
        store.create_chat("committed")
        other.connection.execute("BEGIN IMMEDIATE")
        other.connection.execute("INSERT INTO chats (title, created_at, updated_at, settings) VALUES ('half', 0, 0, '{}')")
        made = backups.make_backup(store.connection, db, reason="manual")
        other.connection.execute("ROLLBACK")
    with open_store(made) as copy:
        assert titles(copy) == ["committed"]


def test_due_follows_the_schedule(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    assert backups.due(db, 24)  # none yet
    assert not backups.due(db, 0)  # only before migrations
    with open_store(db) as store:
        backups.make_backup(store.connection, db, reason="daily", now=1_800_000_000)
    assert not backups.due(db, 24, now=1_800_000_000 + 3600)
    assert backups.due(db, 24, now=1_800_000_000 + 25 * 3600)


def test_opening_an_older_database_backs_it_up_before_the_migration(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    shutil.copy(V1_FILE, db)
    with open_store(db) as store:
        migrated = titles(store)
    (made,) = backups.list_backups(backups.backup_dir(db))
    assert made.reason == f"before-v{max(MIGRATIONS)}"
    with sqlite3.connect(made.path) as raw:
        assert schema_version(raw) == 1  # the file as it was
    with open_store(db) as again:  # nothing to migrate now: no second backup
        assert titles(again) == migrated
    assert len(backups.list_backups(backups.backup_dir(db))) == 1


def test_a_migration_that_fails_puts_the_backup_back_and_says_so(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, {v: MIGRATIONS[v] for v in (1, 2, 3, 4)})
    conn.execute("INSERT INTO chats (title, created_at, updated_at, settings) VALUES ('mine', 1, 1, '{}')")

    def broken(c: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("no such column: nonsense")

    failing = dict(MIGRATIONS) | {max(MIGRATIONS) + 1: ["CREATE TABLE later (x)"],
                                  max(MIGRATIONS) + 2: [broken]}
    with pytest.raises(StoreError) as err:
        backups.migrate_with_backup(conn, db, migrations=failing)
    assert "could not be upgraded" in str(err.value) and "put back" in str(err.value)
    assert "\n" not in str(err.value)
    # as it was: schema 4 (the steps that succeeded undone too), the chat there, no table of a later step
    assert schema_version(conn) == 4
    assert conn.execute("SELECT title FROM chats").fetchall() == [("mine",)]
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'later'").fetchone() is None
    conn.close()
    with open_store(db) as store:  # and this SpecChat still opens it
        assert titles(store) == ["mine"]


def test_restore_puts_a_backup_back_into_the_open_database_after_backing_up_what_it_replaces(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    with open_store(db) as store:
        store.create_chat("before")
        made = backups.make_backup(store.connection, db, reason="manual", now=1_800_000_000)
        store.create_chat("after")
        saved = backups.restore(store.connection, db, made)
        assert titles(store) == ["before"]  # the same connection reads the backup's chats
        store.create_chat("written after the restore")
        assert titles(store) == ["before", "written after the restore"]
    with open_store(saved) as replaced:
        assert titles(replaced) == ["after", "before"]


def test_restoring_something_that_is_no_backup_is_one_line_and_changes_nothing(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with open_store(db) as store:
        store.create_chat("mine")
        with pytest.raises(StoreError, match="not a SpecChat backup"):
            backups.restore(store.connection, db, junk)
        assert titles(store) == ["mine"]


def test_a_migration_that_fails_at_its_first_step_leaves_the_file_as_it_was_and_says_so(tmp_path):
    db = tmp_path / "specchat.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, {v: MIGRATIONS[v] for v in (1, 2, 3, 4)})
    conn.execute("INSERT INTO chats (title, created_at, updated_at, settings) VALUES ('mine', 1, 1, '{}')")

    def broken(c: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    failing = {v: MIGRATIONS[v] for v in (1, 2, 3, 4)} | {5: ["CREATE TABLE half (x)", broken]}
    with pytest.raises(StoreError) as err:
        backups.migrate_with_backup(conn, db, migrations=failing)
    assert "could not be upgraded to schema 5" in str(err.value) and "disk I/O error); it is as it was" in str(err.value)
    assert schema_version(conn) == 4
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'half'").fetchone() is None
    assert conn.execute("SELECT title FROM chats").fetchall() == [("mine",)]
    conn.close()
