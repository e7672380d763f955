"""specchat.files: the atomic write, the cross-process lock and move-aside every writer uses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specchat import files

HOLD_LOCK = ("import sys, time\nfrom pathlib import Path\nfrom specchat.files import locked\n"
             "with locked(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n")


def hold_lock(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_an_atomic_write_replaces_the_file_and_keeps_its_permissions(tmp_path):
    path = tmp_path / "sub" / "f.json"
    files.write_text_atomically(path, "one")
    path.chmod(0o640)
    files.write_text_atomically(path, "two ✓")
    assert path.read_text(encoding="utf-8") == "two ✓" and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    path.write_text("old")

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError):
        files.write_text_atomically(path, "new")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_only_old_temp_files_of_that_file_are_removed(tmp_path):
    path = tmp_path / "f.json"
    names = [".f.json.abcd_123.tmp", ".f.json.zzzz9999.tmp", ".g.json.abcd1234.tmp", ".f.json.abcd1234.tmp.keep",
             "f.json.abcd1234.tmp"]
    for name in names:
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (1, 1))
    young = tmp_path / ".f.json.young123.tmp"
    young.write_text("a write in progress")
    files.write_text_atomically(path, "new")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["f.json", young.name, *names[2:]])


def test_the_lock_times_out_with_one_line_while_another_process_holds_it(tmp_path):
    path = tmp_path / "f.json"
    holder = hold_lock(path)
    try:
        t0 = time.monotonic()
        with pytest.raises(files.FileBusyError) as err, files.locked(path, timeout=0.3):
            pass
        assert time.monotonic() - t0 < 5  # it gave up, it did not hang
        assert str(err.value).startswith(f"{path}: busy: another SpecChat process holds") and "\n" not in str(err.value)
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_held_by_a_killed_process_is_free_at_once(tmp_path):
    path = tmp_path / "f.json"
    holder = hold_lock(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with files.locked(path, timeout=2):
        files.write_text_atomically(path, "mine")
    assert path.read_text() == "mine"


def test_move_aside_never_overwrites_and_takes_sqlite_side_files(tmp_path):
    path = tmp_path / "chats.db"
    now = time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))
    moved = []
    for content in ("first", "second"):
        path.write_text(content)
        (tmp_path / "chats.db-wal").write_text(content + " wal")
        moved.append(files.move_aside(path, now))
    assert [p.name for p in moved] == ["chats.db.corrupt-20260102-030405", "chats.db.corrupt-20260102-030405-2"]
    assert [p.read_text() for p in moved] == ["first", "second"]
    assert (tmp_path / "chats.db.corrupt-20260102-030405-2-wal").read_text() == "second wal"
    assert not path.exists() and not (tmp_path / "chats.db-wal").exists()


def test_a_capped_read_says_there_was_more(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert files.read_capped(path, 10) == (b"x" * 10, False)
    assert files.read_capped(path, 4) == (b"xxxx", True)
