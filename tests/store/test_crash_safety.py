"""A partial answer survives a stop, a closed app and a killed process (at most ~0.5 s lost)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specchat.metrics import Counts
from specchat.store import MessageStats, open_store


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def saved_text(db_path: Path, message_id: int) -> str:
    """What another connection (i.e. the disk) sees right now."""
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("SELECT content FROM messages WHERE id = ?", (message_id,)).fetchone()[0]
    finally:
        conn.close()


def test_writer_commits_at_most_once_per_interval(tmp_path):
    db_path = tmp_path / "db.sqlite3"
    clock = FakeClock()
    store = open_store(db_path, clock=clock, flush_interval=0.5)
    chat = store.create_chat("c")
    writer = store.answer_writer(store.start_answer(chat.id))
    commits = []
    store.connection.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)

    for i in range(100):  # 100 tokens, one every 20 ms: 2 s of streaming
        clock.t = i * 0.02
        writer.append(f"<{i}>")
        on_disk = saved_text(db_path, writer.message_id)
        expected_all = "".join(f"<{j}>" for j in range(i + 1))
        assert expected_all.startswith(on_disk)
        unsaved = expected_all[len(on_disk):].count("<")
        assert unsaved * 0.02 <= 0.5  # never more than the interval's worth of tokens in memory only
    assert len(commits) == 3  # at 0.5, 1.0, 1.5 s: not one commit per token

    writer.finish("done")
    assert saved_text(db_path, writer.message_id) == "".join(f"<{j}>" for j in range(100))
    store.close()


def test_poll_saves_buffered_text_when_tokens_stop_coming(tmp_path):
    db_path = tmp_path / "db.sqlite3"
    clock = FakeClock()
    store = open_store(db_path, clock=clock)
    writer = store.answer_writer(store.start_answer(store.create_chat("c").id))
    clock.t = 0.1
    writer.append("slow token")
    assert saved_text(db_path, writer.message_id) == ""
    clock.t = 0.3
    assert writer.poll() is False  # too early
    clock.t = 0.6
    assert writer.poll() is True  # a UI timer tick saves it without waiting for the next token
    assert saved_text(db_path, writer.message_id) == "slow token"
    assert writer.poll() is False  # nothing pending
    store.close()


def test_a_stopped_answer_keeps_its_partial_text_and_stats(tmp_path):
    db_path = tmp_path / "db.sqlite3"
    with open_store(db_path) as store:
        chat = store.create_chat("c")
        store.add_message(chat.id, "user", "count to ten")
        writer = store.answer_writer(store.start_answer(chat.id), flush_interval=60)
        writer.append("one, two,", reasoning="easy", origins="tdt")
        writer.flush()
        writer.append(" three", origins="d")  # still only in memory when the user presses stop
        stats = MessageStats(Counts.of_answer(4, 0.3), mode="draft", stop_reason="cancelled")
        message = writer.finish("stopped", stats)
    assert message.content == "one, two, three" and message.state == "stopped"
    with open_store(db_path) as store:
        again = store.get_message(message.id)
        assert (again.content, again.reasoning, again.origins) == ("one, two, three", "easy", "tdtd")
        assert again.state == "stopped" and again.stats.stop_reason == "cancelled"
        assert again.stats.tokens == 4 and again.stats.decode_tok_s == 3 / 0.3
        # the tint survives: "three" came from accepted draft tokens, even though only in memory at stop
        assert again.content_segments() == [("one, two,", False), (" three", True)]


def test_an_error_keeps_the_text_and_says_why(tmp_path):
    with open_store(tmp_path / "db.sqlite3") as store:
        writer = store.answer_writer(store.start_answer(store.create_chat("c").id))
        writer.append("half an ans")
        message = writer.finish("error", MessageStats(Counts(tokens=3), stop_reason="error",
                                                        error="llama_decode returned 1"))
        assert (message.content, message.state) == ("half an ans", "error")
        assert message.stats.error == "llama_decode returned 1"
        with pytest.raises(ValueError):
            store.answer_writer(store.start_answer(message.chat_id)).finish("streaming")


def test_closing_the_app_mid_answer_leaves_a_stopped_answer_at_next_open(tmp_path):
    db_path = tmp_path / "db.sqlite3"
    store = open_store(db_path)
    chat = store.create_chat("c")
    writer = store.answer_writer(store.start_answer(chat.id))
    writer.append("partial answer", origins="tt")
    writer.flush()
    store.close()  # closed without finish()

    with open_store(db_path, recover=False) as peek:  # a second tool that must not "recover"
        assert peek.get_message(writer.message_id).state == "streaming"
    with open_store(db_path) as store:
        message = store.get_message(writer.message_id)
        assert (message.state, message.content, message.origins) == ("stopped", "partial answer", "tt")
        assert store.recover_interrupted() == []  # nothing left to recover


# The child streams one token every 20 ms with the real clock and prints each token's
# index and time after append() returns, so the parent knows what was handed to the store.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from specchat.store import open_store

    store = open_store(Path(sys.argv[1]))
    chat = store.create_chat("killed")
    store.add_message(chat.id, "user", "stream forever")
    message = store.start_answer(chat.id)
    writer = store.answer_writer(message)
    print("message", message.id, flush=True)
    i = 0
    while True:
        writer.append(f"<{i}>", origins="d" if i % 3 else "t")
        print(i, time.monotonic(), flush=True)
        i += 1
        time.sleep(0.02)
    """
)


def test_a_killed_process_loses_at_most_the_last_second_of_tokens(tmp_path):
    db_path = tmp_path / "db.sqlite3"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    appended: dict[int, float] = {}  # token index -> child's monotonic time after append()
    try:
        header = child.stdout.readline().split()
        assert header and header[0] == "message", child.stderr.read()
        message_id = int(header[1])
        deadline = time.monotonic() + 60  # generous: the machine may be busy
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            assert line, f"the child died: {child.stderr.read()}"
            i, t = line.split()
            appended[int(i)] = float(t)
            if appended[int(i)] - appended[0] >= 2.0:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    for line in child.stdout.read().splitlines():  # printed before the kill, not yet read
        i, t = line.split()
        appended[int(i)] = float(t)
    last = max(appended)
    assert last >= 50  # ~2 s of tokens really were streamed

    with open_store(db_path) as store:
        message = store.get_message(message_id)
    assert message.state == "stopped"  # recovered at open, not left "streaming"
    stored = message.content
    # the saved text is exactly the first n tokens, never a torn or reordered write
    n = stored.count("<")
    assert stored == "".join(f"<{j}>" for j in range(n))
    assert message.origins == "".join("d" if j % 3 else "t" for j in range(n))
    assert n > 0
    # Token `last + 1` may have been appended without being printed; anything saved beyond
    # the printed ones can only be that one.
    assert n <= last + 2
    if n <= last:
        lost_seconds = appended[last] - appended[n]  # from the first lost token to the last appended
        assert lost_seconds <= 1.0, f"lost {last + 1 - n} tokens spanning {lost_seconds:.2f} s"


# The child deletes (trashes) a chat while an answer streams into it, says so, and waits to be killed.
TRASH_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from specchat.store import open_store

    store = open_store(Path(sys.argv[1]))
    kept = store.create_chat("kept")
    store.add_message(kept.id, "user", "stay")
    doomed = store.create_chat("doomed")
    store.add_message(doomed.id, "user", "go away")
    writer = store.answer_writer(store.start_answer(doomed.id), flush_interval=0)
    writer.append("half an answer", origins="tt")
    store.trash_chat(doomed.id)
    print("trashed", kept.id, doomed.id, flush=True)
    time.sleep(600)
    """
)


def test_a_kill_between_delete_and_purge_keeps_the_deleted_chat_whole_until_the_next_start(tmp_path):
    db_path = tmp_path / "db.sqlite3"
    child = subprocess.Popen([sys.executable, "-c", TRASH_CHILD, str(db_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        assert line and line[0] == "trashed", child.stderr.read()
        kept, doomed = int(line[1]), int(line[2])
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    with open_store(db_path) as store:  # a tool, or the app before its session starts: nothing purged
        assert [c.id for c in store.list_chats()] == [kept]
        assert [c.id for c in store.trashed_chats()] == [doomed]
        assert [(m.content, m.state) for m in store.messages(doomed)] == [("go away", None),
                                                                        ("half an answer", "stopped")]
    with open_store(db_path) as store:  # the app's start (AppSession) purges what was deleted
        assert store.purge_trash() == 1
        assert [c.id for c in store.list_chats()] == [kept] and store.trashed_chats() == []
        assert [m.content for m in store.messages(kept)] == ["stay"] and store.messages(doomed) == []
