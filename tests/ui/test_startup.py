"""Start-up cannot abort: damaged files are named in one message and left as they were; one
app per profile.

The bad-file cases run ``run_app`` in a child process (offscreen), so a Qt abort would show
as a crash of that process, not of the test run; the message box answers itself there
(no screen), and the child prints what run_app returned.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.app_driver import send
from helpers.fakes import FakeSpec
from specchat.files import move_aside
from specchat.profile import Profile
from specchat.ui.app import MOVE_ASIDE


def run_app_in_child(root: Path, answer: str = "Quit", timeout: float = 60,
                     prelude: str = "") -> subprocess.CompletedProcess:
    """``run_app`` on the profile at ``root``; the start-up dialog is answered with ``answer``;
    if the window opens, it is closed at once (the event loop's first turn).  ``prelude``: code
    run first (to plant a bug)."""
    code = textwrap.dedent(f"""
        {prelude}
        import sys
        from pathlib import Path
        from PySide6.QtCore import QTimer
        from PySide6.QtWidgets import QApplication
        from specchat.profile import Profile
        from specchat.ui.app import run_app
        app = QApplication([sys.argv[0]])
        QTimer.singleShot(0, app.quit)
        asked = []
        def prompt(text, buttons):
            asked.append(text)
            return {answer!r} if {answer!r} in buttons else None
        rc = run_app(profile=Profile.at(Path({str(root)!r})), prompt=prompt)
        print("ASKED", len(asked))
        sys.exit(rc)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    env["QT_QPA_PLATFORM"] = "offscreen"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("specchat:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


BAD_CONFIGS = {
    "invalid TOML": b"k_max = = 3\n",
    "invalid UTF-8": b'theme = "\xff\xfe"\n',
    "NaN": b"p_min = nan\n",
    "k_min above k_max": b"k_min = 6\nk_max = 3\n",
    "nested 1000 deep": b"x = " + b"[" * 1000 + b"]" * 1000 + b"\n",  # before: a 3,000-line traceback
    "a table 600 deep": b"[" + b".".join([b"a"] * 600) + b"]\nb = 1\n",
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_file_is_named_left_unchanged_and_exits_2(tmp_path, case):
    profile = Profile.at(tmp_path)
    profile.config_file.write_bytes(BAD_CONFIGS[case])
    done = run_app_in_child(tmp_path)
    assert done.returncode == 2, done.stderr
    assert "config.toml" in one_line(done.stderr)
    assert "ASKED 1" in done.stdout  # one dialog
    assert profile.config_file.read_bytes() == BAD_CONFIGS[case]
    assert not profile.database.exists()  # nothing else was touched


def test_a_damaged_registry_is_moved_aside_said_once_and_the_app_starts(tmp_path):
    profile = Profile.at(tmp_path)
    profile.data_dir.mkdir(parents=True)
    profile.registry.write_bytes(b'{"models": {"x": ')
    done = run_app_in_child(tmp_path, answer="Continue")
    assert done.returncode == 0, done.stderr
    assert "ASKED 1" in done.stdout  # one dialog, then the window
    line = one_line(done.stderr)
    [moved] = profile.data_dir.glob("registry.json.corrupt-*")
    assert moved.name in line and moved.read_bytes() == b'{"models": {"x": '  # kept, never overwritten


def test_a_registry_of_a_newer_specchat_is_named_left_unchanged_and_exits_2(tmp_path):
    profile = Profile.at(tmp_path)
    profile.data_dir.mkdir(parents=True)
    newer = b'{"version": 99, "models": {}, "pairs": {}}'
    profile.registry.write_bytes(newer)
    done = run_app_in_child(tmp_path)
    assert done.returncode == 2 and "registry.json" in one_line(done.stderr)
    assert profile.registry.read_bytes() == newer
    assert not list(profile.data_dir.glob("registry.json.corrupt-*"))


def test_a_corrupt_database_can_be_kept_and_quit(tmp_path):
    profile = Profile.at(tmp_path)
    profile.data_dir.mkdir(parents=True)
    garbage = b"this is not a SQLite database" * 100
    profile.database.write_bytes(garbage)
    done = run_app_in_child(tmp_path, answer="Quit")
    assert done.returncode == 2 and "specchat.sqlite3" in one_line(done.stderr)
    assert profile.database.read_bytes() == garbage


def test_a_corrupt_database_can_be_moved_aside_to_start_fresh(tmp_path):
    profile = Profile.at(tmp_path)
    profile.data_dir.mkdir(parents=True)
    garbage = b"this is not a SQLite database" * 100
    profile.database.write_bytes(garbage)
    done = run_app_in_child(tmp_path, answer=MOVE_ASIDE)
    assert done.returncode == 0, done.stderr
    moved = list(profile.data_dir.glob("specchat.sqlite3.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == garbage
    assert sqlite3.connect(profile.database).execute("SELECT count(*) FROM chats").fetchone() == (1,)


def test_move_aside_never_replaces_an_earlier_copy(tmp_path):
    db = tmp_path / "x.sqlite3"
    first = [db.write_text("one"), move_aside(db, now=0)][1]
    second = [db.write_text("two"), move_aside(db, now=0)][1]
    assert first != second and first.read_text() == "one" and second.read_text() == "two"


def test_a_second_instance_on_the_same_profile_says_so_and_touches_nothing(qtbot, fake_app, tmp_path):
    from specchat.ui.app import acquire_instance_lock

    app = fake_app(FakeSpec(answer_tokens=300, decode_s=0.004))
    a = app.add_chat()
    lock = acquire_instance_lock(Profile.at(app.root))
    assert not isinstance(lock, str)
    try:
        s = app.start(qtbot)
        send(qtbot, s.window.pane, "A long answer.")
        qtbot.waitUntil(lambda: s.answers.current is not None and len(s.answers.current.content) > 10,
                        timeout=10_000)
        before = app.root.joinpath("config.toml").exists()
        done = run_app_in_child(app.root)
        assert done.returncode == 1
        assert "already running" in one_line(done.stderr)
        qtbot.waitUntil(lambda: not s.answers.busy_chats(), timeout=20_000)
        last = s.store.messages(a)[-1]
        assert last.state == "done" and len(last.content) == 300  # the first answer completed intact
        assert app.root.joinpath("config.toml").exists() == before
    finally:
        lock.unlock()


def test_a_lock_left_by_a_killed_app_is_taken_over(tmp_path):
    """kill -9 leaves the lock file behind; its process is gone, so the next start takes it."""
    profile = Profile.at(tmp_path)
    code = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from specchat.profile import Profile
        from specchat.ui.app import acquire_instance_lock
        lock = acquire_instance_lock(Profile.at(Path({str(tmp_path)!r})))
        assert not isinstance(lock, str), lock
        os._exit(0)  # like kill -9: no unlock
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert profile.instance_lock.exists()
    from specchat.ui.app import acquire_instance_lock

    lock = acquire_instance_lock(profile)
    assert not isinstance(lock, str), lock
    lock.unlock()


# -- issue 37: rows SpecChat could have written never stop the app; a bug is one line and a log ------------

V1_FILE = Path(__file__).parents[1] / "store" / "data" / "v1-release.sqlite3"
DEEP = "[" * 5000 + "]" * 5000


def test_a_v1_database_with_nan_statistics_and_deep_settings_starts_the_app_with_its_chats(tmp_path):
    profile = Profile.at(tmp_path)
    profile.data_dir.mkdir(parents=True)
    profile.database.write_bytes(V1_FILE.read_bytes())
    conn = sqlite3.connect(profile.database)
    conn.execute("UPDATE messages SET stats = ? WHERE id = (SELECT min(id) FROM messages WHERE stats IS NOT NULL)",
                 ('{"tokens": 9, "mean_k": NaN, "rounds_with_draft": 2, "fallbacks": 5}',))
    conn.execute("UPDATE chats SET settings = ? WHERE title = 'A poem'", (DEEP,))
    conn.commit()
    conn.close()
    done = run_app_in_child(tmp_path, answer="Continue")
    assert done.returncode == 0, done.stderr  # before: a traceback (ValueError) and exit 1
    assert "Traceback" not in done.stderr and "QThread" not in done.stderr, done.stderr
    conn = sqlite3.connect(profile.database)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] >= 5  # migrated, chats kept
    assert conn.execute("SELECT count(*) FROM chats").fetchone()[0] == 3
    conn.close()


def test_chat_settings_nested_thousands_deep_after_the_migration_do_not_abort_the_start(tmp_path):
    from specchat.store import open_store

    profile = Profile.at(tmp_path)
    with open_store(profile.database) as store:
        store.create_chat("Deep")
    conn = sqlite3.connect(profile.database)
    conn.execute("UPDATE chats SET settings = ?", ('{"a":' * 3000 + "1" + "}" * 3000,))
    conn.commit()
    conn.close()
    done = run_app_in_child(tmp_path)
    assert done.returncode == 0, done.stderr  # before: "QThread: Destroyed while thread is still running", abort
    assert "Traceback" not in done.stderr and "QThread" not in done.stderr, done.stderr
    assert "chat settings unreadable" in done.stderr  # the line that says what was repaired


def test_a_bug_after_the_threads_started_is_one_line_naming_the_log_and_no_abort(tmp_path):
    bug = ("import specchat.ui.main_window as mw; "  # one line: the window fails to build, after the threads started
           "mw.MainWindow.__init__ = lambda self, *a, **k: (_ for _ in ()).throw(RuntimeError('planted bug'))")
    done = run_app_in_child(tmp_path, prelude=bug)
    assert done.returncode == 1, done.stderr  # before: the threads' abort (SIGABRT), a traceback on the screen
    line = one_line(done.stderr)
    log = Profile.at(tmp_path).data_dir / "errors.log"
    assert "bug in SpecChat" in line and "planted bug" in line and str(log) in line
    assert "QThread" not in done.stderr
    assert "RuntimeError: planted bug" in log.read_text()  # the traceback is there, to report
