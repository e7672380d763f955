"""Versions: regenerate and edit keep what they replace, paging swaps it back, nothing is lost."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from specchat.metrics import Counts
from specchat.store import MessageStats, open_store, plain_reference, task_table
from specchat.store.db import migrate
from specchat.store.schema import MIGRATIONS

V1_FILE = Path(__file__).parent / "data" / "v1-release.sqlite3"


@pytest.fixture
def store(tmp_path: Path):
    with open_store(tmp_path / "specchat.sqlite3", flush_interval=0.0) as s:
        yield s


def answer(store, chat_id: int, text: str, mode: str = "draft", tok_s: float = 20.0):
    writer = store.answer_writer(store.start_answer(chat_id))
    writer.append(text, origins="t")
    return writer.finish("done", MessageStats(Counts.of_answer(11, 10 / tok_s), mode=mode))


def shown(store, chat_id: int) -> list[str]:
    return [m.content for m in store.messages(chat_id)]


def test_regenerate_twice_keeps_three_versions_and_paging_swaps_the_tail(store):
    chat = store.create_chat("c")
    q = store.add_message(chat.id, "user", "question")
    a1 = answer(store, chat.id, "first")
    store.new_version(q.id)
    a2 = answer(store, chat.id, "second")
    q = store.new_version(q.id)
    answer(store, chat.id, "third")
    assert q.version == 3 and store.version_counts(chat.id) == {q.id: 3}
    assert shown(store, chat.id) == ["question", "third"]
    assert [(v.number, v.content) for v in store.versions(q.id)] == [(1, "question"), (2, "question")]

    q = store.show_version(q.id, 1)
    assert q.version == 1 and shown(store, chat.id) == ["question", "first"]
    assert store.messages(chat.id)[1].id == a1.id  # the same message, not a copy
    assert [v.number for v in store.versions(q.id)] == [2, 3]
    store.show_version(q.id, 2)
    assert [m.id for m in store.messages(chat.id)] == [q.id, a2.id]
    assert store.version_counts(chat.id) == {q.id: 3}  # paging never adds a version

    # the next turn goes on from the version shown; a regenerate from here is version 4
    store.add_message(chat.id, "user", "follow-up")
    answer(store, chat.id, "after second")
    assert shown(store, chat.id) == ["question", "second", "follow-up", "after second"]
    q = store.new_version(q.id)
    assert q.version == 4 and shown(store, chat.id) == ["question"]
    store.show_version(q.id, 2)
    assert shown(store, chat.id) == ["question", "second", "follow-up", "after second"]
    with pytest.raises(KeyError):
        store.show_version(q.id, 9)


def test_editing_the_first_of_three_questions_keeps_the_old_conversation(store):
    chat = store.create_chat("c")
    qs = []
    for i in range(3):
        qs.append(store.add_message(chat.id, "user", f"q{i}"))
        answer(store, chat.id, f"a{i}")
    before = store.messages(chat.id)
    edited = store.edit_message(qs[0].id, "q0 rephrased")
    assert (edited.content, edited.version) == ("q0 rephrased", 2) and shown(store, chat.id) == ["q0 rephrased"]
    answer(store, chat.id, "new a0")
    store.show_version(qs[0].id, 1)
    assert store.messages(chat.id) == before  # every message back, ids, text and stats
    store.show_version(qs[0].id, 2)
    assert shown(store, chat.id) == ["q0 rephrased", "new a0"]


def test_versions_nest_a_later_questions_versions_come_back_with_it(store):
    chat = store.create_chat("c")
    q1 = store.add_message(chat.id, "user", "q1")
    answer(store, chat.id, "a1")
    q2 = store.add_message(chat.id, "user", "q2")
    answer(store, chat.id, "a2")
    store.new_version(q2.id)
    answer(store, chat.id, "a2 again")  # q2 has two versions
    store.edit_message(q1.id, "q1 edited")  # the whole of it, q2's versions too, go with q1's version 1
    assert store.version_counts(chat.id) == {q1.id: 2}
    store.show_version(q1.id, 1)
    assert shown(store, chat.id) == ["q1", "a1", "q2", "a2 again"]
    assert store.version_counts(chat.id) == {q1.id: 2, q2.id: 2}
    store.show_version(q2.id, 1)
    assert shown(store, chat.id) == ["q1", "a1", "q2", "a2"]


def test_regenerate_with_nothing_after_the_question_keeps_no_empty_version(store):
    chat = store.create_chat("c")
    q = store.add_message(chat.id, "user", "q")
    assert store.new_version(q.id).version == 1 and store.versions(q.id) == []


def test_search_finds_what_is_shown_and_deleting_the_chat_deletes_its_versions(store):
    chat = store.create_chat("c")
    q = store.add_message(chat.id, "user", "giraffes")
    answer(store, chat.id, "zebras")
    store.edit_message(q.id, "penguins")
    assert store.list_chats("zebras") == [] and [c.id for c in store.list_chats("penguins")] == [chat.id]
    store.show_version(q.id, 1)
    assert [c.id for c in store.list_chats("zebras")] == [chat.id] and store.list_chats("penguins") == []
    store.delete_chat(chat.id)
    conn = store.connection
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM message_versions").fetchone()[0] == 0


def test_an_archived_answer_counts_once_in_the_task_stats_shown_or_not(store):
    target = "/m/t.gguf"
    chat = store.create_chat("c")
    store.update_settings(chat.id, store.get_chat(chat.id).settings.replaced(target=target, task="code"))
    for _ in range(3):  # plain runs to compare with
        store.add_message(chat.id, "user", "plain")
        answer(store, chat.id, "p", mode="baseline", tok_s=10.0)
    q = store.add_message(chat.id, "user", "q")
    first = answer(store, chat.id, "spec", tok_s=20.0)
    reference = plain_reference(store, first.id)
    store.new_version(q.id)
    answer(store, chat.id, "spec again", tok_s=30.0)
    for step in (None, 1, 2, 1):
        if step is not None:
            store.show_version(q.id, step)
        row = task_table(store)[0]
        assert (row.plain_answers, row.speculative_answers) == (3, 2)
        assert plain_reference(store, first.id) == reference and reference.runs == 3


def test_a_schema_3_database_migrates_and_keeps_every_message(tmp_path: Path):
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)  # as schema 3's code left it: migrated up to 3 only
    conn.execute("PRAGMA foreign_keys = ON")
    migrate(conn, {n: MIGRATIONS[n] for n in (1, 2, 3)})
    conn.execute("INSERT INTO chats (title, created_at, updated_at, settings) VALUES ('old', 1, 1, '{}')")
    rows = [("user", "q1", None), ("assistant", "a1", "done"), ("user", "q2", None), ("assistant", "a2", "stopped")]
    for role, text, state in rows:
        conn.execute("INSERT INTO messages (chat_id, role, content, state, created_at) VALUES (1, ?, ?, ?, 1)",
                     (role, text, state))
    conn.close()
    with open_store(path) as s:
        msgs = s.messages(1)
        assert [(m.role, m.content, m.state) for m in msgs] == rows
        assert all(m.version == 1 for m in msgs) and s.version_counts(1) == {}
        s.new_version(msgs[2].id)  # versions work on a migrated chat
        assert [m.content for m in s.messages(1)] == ["q1", "a1", "q2"]
        s.show_version(msgs[2].id, 1)
        assert [(m.role, m.content, m.state) for m in s.messages(1)] == rows


def test_the_v1_release_file_migrates_with_every_message_shown(tmp_path: Path):
    path = tmp_path / "specchat.sqlite3"
    shutil.copyfile(V1_FILE, path)
    old = sqlite3.connect(f"file:{V1_FILE}?immutable=1", uri=True)
    try:
        before = old.execute("SELECT id, chat_id, role, content FROM messages ORDER BY id").fetchall()
    finally:
        old.close()
    with open_store(path) as s:
        after = [(m.id, m.chat_id, m.role, m.content) for c in s.list_chats() for m in s.messages(c.id)]
    assert sorted(after) == before and len(before) == 14
