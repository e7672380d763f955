"""A database written by the schema-1 release opens with today's code, with the same figures.

``data/v1-release.sqlite3`` was written by the schema-1 code itself (see
``data/make_v1_fixture.py`` for what is in it); every test opens a copy.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from specchat.metrics import Counts
from specchat.store import SCHEMA_VERSION, MessageStats, StoreError, fts5_available, open_store, task_table
from specchat.store.db import connect, migrate, schema_version
from specchat.store.schema import MIGRATIONS

V1_FILE = Path(__file__).parent / "data" / "v1-release.sqlite3"


@pytest.fixture
def v1_path(tmp_path: Path) -> Path:
    path = tmp_path / "specchat.sqlite3"
    shutil.copyfile(V1_FILE, path)
    return path


def by_title(store):
    return {c.title: c for c in store.list_chats()}


def test_the_fixture_is_a_schema_1_file():
    conn = sqlite3.connect(f"file:{V1_FILE}?immutable=1", uri=True)  # leaves no -wal/-shm files
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 1
    finally:
        conn.close()


def test_a_v1_answer_keeps_its_counts_and_figures(v1_path):
    with open_store(v1_path) as s:
        assert s.connection.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 7
        prime = by_title(s)["Prime numbers"]
        system, question, answer, question2, stopped = s.messages(prime.id)
        assert (system.role, question.role, answer.role) == ("system", "user", "assistant")
        assert answer.content.startswith("def is_prime(n):") and answer.reasoning == "The user wants a primality test."
        assert answer.origins == "tttttttddddtddddddddddddddt"  # the per-token origins are untouched
        st = answer.stats
        assert st.counts == Counts(tokens=101, decoded=100, prompt_tokens=40, drafted=120, accepted=90, rounds=40,
                                   rounds_with_draft=30, rounds_fully_accepted=12, k_sum=120, prefill_s=0.5,
                                   decode_s=4.0, draft_s=1.0, verify_s=2.5, overhead_s=0.5)
        assert (st.mode, st.stop_reason, st.fallbacks) == ("draft", "eog", ("token acceptance 40% < 50%",))
        # the figures schema 1 stored next to its counts come out the same
        assert st.decode_tok_s == 25.0 and st.prefill_tok_s == pytest.approx(80.0)
        assert st.token_acceptance == 0.75 and st.sequence_acceptance == 0.4 and st.mean_k == 4.0

        assert stopped.state == "stopped" and stopped.stats.stop_reason == "cancelled"
        assert stopped.stats.k_sum == 21 and stopped.stats.decode_tok_s == 20.0
        json_chat = by_title(s)["JSON please"]
        failed = s.messages(json_chat.id)[3]
        assert failed.state == "error" and failed.stats.error == "llama_decode returned -3"
        assert failed.stats.counts.decoded == 0 and failed.stats.prefill_tok_s == pytest.approx(300.0)
        assert s.messages(json_chat.id)[4].stats is None  # added without stats: still none


def test_plain_decoding_is_called_baseline_after_the_migration(v1_path):
    with open_store(v1_path) as s:
        poem = by_title(s)["A poem"]
        assert poem.settings.speculation == "baseline"
        assert [m.stats.mode for m in s.messages(poem.id) if m.stats] == ["baseline", "baseline"]
        modes = {r[0] for r in s.connection.execute("SELECT mode FROM task_runs")}
        assert modes == {"baseline", "draft", "lookup"}
        assert '"off"' not in s.connection.execute("SELECT settings FROM chats WHERE id = ?", (poem.id,)).fetchone()[0]


def test_v1_answers_show_untinted_and_new_ones_keep_their_tint(v1_path):
    with open_store(v1_path) as s:
        chat = by_title(s)["JSON please"]
        old = s.messages(chat.id)[1]
        assert old.content_segments() == [('{"name": "Ada", "age": 36}', False)]  # schema 1 never linked the two

        s.add_message(chat.id, "user", "One more.")
        writer = s.answer_writer(s.start_answer(chat.id))
        writer.append('{"name": ', origins="tt")
        writer.append('"Bob"}', origins="ddd")
        stats = MessageStats(Counts.of_answer(6, 0.5) + Counts.of_round(4, 4, 3), mode="lookup")
        new = writer.finish("done", stats)
    with open_store(v1_path) as s:
        again = s.get_message(new.id)
        assert again.content_segments() == [('{"name": ', False), ('"Bob"}', True)]
        assert again.stats == stats
        row = {r.tag: r for r in task_table(s)}["json"]
        assert row.speculative_answers == 2
        assert row.token_acceptance == (20 + 3) / (40 + 4)


def test_pooled_task_stats_of_a_v1_file_are_exact(v1_path):
    with open_store(v1_path) as s:
        rows = {r.tag: r for r in task_table(s)}
    code = rows["code"]  # the done and the stopped draft answer
    assert (code.plain_answers, code.speculative_answers) == (0, 2)
    assert code.token_acceptance == (90 + 14) / (120 + 21)
    assert code.sequence_acceptance == (12 + 3) / (30 + 7)  # pooled rounds, not the mean of 40% and 43%
    assert code.speculative.mean_k == (120 + 21) / (30 + 7)
    assert code.speculative_tok_s == (100 + 20) / (4.0 + 1.0)
    creative = rows["creative"]  # one answer saved as "off", one as "baseline": both plain
    assert creative.plain_answers == 2 and creative.plain_tok_s == (40 + 60) / (2.0 + 4.0)
    # task runs took what their answer's stats knew: rounds and K
    assert code.speculative.rounds == 47 and code.speculative.verify_s == pytest.approx(3.2)
    assert rows["json"].speculative.k_sum == 40


@pytest.mark.parametrize("fts", [True, False])
def test_search_still_works_on_a_migrated_file(v1_path, fts):
    if fts and not fts5_available(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite has no FTS5")
    with open_store(v1_path, fts=fts) as s:
        assert [c.title for c in s.list_chats("miller")] == ["Prime numbers"]
        assert [c.title for c in s.list_chats("autumn leaves")] == ["A poem"]
        assert [c.title for c in s.list_chats("pasted")] == ["JSON please"]
        chat = by_title(s)["A poem"]
        s.add_message(chat.id, "user", "Something about winter frost")
        assert [c.title for c in s.list_chats("frost")] == ["A poem"]


def rows(conn: sqlite3.Connection, table: str) -> list[tuple]:
    # the columns later versions add (the trash's, task_runs.busy of version 7): NULL in every older row
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] not in ("trashed_at", "busy")]
    return [tuple(r) for r in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid")]


def test_a_file_from_before_the_trash_gets_it_keeping_every_row_and_no_chat_trashed(v1_path):
    """Version 4 adds the trash (a deleted chat can be undone): an older file keeps everything in use."""
    before_trash = next(v for v, steps in MIGRATIONS.items() if "trashed_at" in " ".join(map(str, steps))) - 1
    conn = sqlite3.connect(v1_path, isolation_level=None)
    try:
        assert migrate(conn, {v: MIGRATIONS[v] for v in range(1, before_trash + 1)}) == before_trash
        tables = ("chats", "messages", "task_runs", "task_phase_runs", "app_settings")
        before = {t: rows(conn, t) for t in tables}
    finally:
        conn.close()
    assert len(before["chats"]) == 3 and len(before["messages"]) > 5 and before["task_runs"]
    with open_store(v1_path) as s:
        assert schema_version(s.connection) == SCHEMA_VERSION
        assert {t: rows(s.connection, t) for t in tables} == before
        assert len(s.list_chats()) == 3 and s.trashed_chats() == []
        assert all(c.trashed_at is None for c in s.list_chats())
        assert [c.title for c in s.list_chats("miller")] == ["Prime numbers"]


def test_a_migrated_file_opens_again_unchanged(v1_path):
    with open_store(v1_path) as s:
        before = [(m.id, m.stats) for c in s.list_chats() for m in s.messages(c.id)]
    with open_store(v1_path) as s:
        assert [(m.id, m.stats) for c in s.list_chats() for m in s.messages(c.id)] == before


def test_a_database_from_a_newer_version_is_still_refused(v1_path):
    open_store(v1_path).close()
    conn = sqlite3.connect(v1_path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="knows up to"):
        open_store(v1_path)


def test_a_failing_python_step_leaves_the_old_version_intact(tmp_path):
    conn = connect(tmp_path / "db.sqlite3")  # today's schema
    try:
        def broken(c: sqlite3.Connection) -> None:
            c.execute("UPDATE chats SET title = 'half-done'")
            raise RuntimeError("disk on fire")

        conn.execute("INSERT INTO chats (title, created_at, updated_at, settings) VALUES ('kept', 0, 0, '{}')")
        steps = {**MIGRATIONS, SCHEMA_VERSION + 1: ["ALTER TABLE chats ADD COLUMN colour TEXT", broken]}
        with pytest.raises(RuntimeError, match="disk on fire"):
            migrate(conn, steps)
        assert schema_version(conn) == SCHEMA_VERSION
        assert conn.execute("SELECT title FROM chats").fetchone()[0] == "kept"
        columns = {r[1] for r in conn.execute("PRAGMA table_info(chats)")}
        assert "colour" not in columns  # the SQL step of the failed version was rolled back too
    finally:
        conn.close()


def test_the_sampling_of_a_v1_chat_reads_into_the_one_sampling_type(v1_path):
    """Chats store their sampling flat in the settings JSON, as every version wrote it; it reads into
    the engine's own type, and a save keeps the flat shape an older SpecChat can still read."""
    import json

    from specchat.engine.settings import SamplingSettings
    from specchat.store import ChatSettings

    with open_store(v1_path) as s:
        poem = by_title(s)["A poem"]
        assert type(poem.settings.sampling) is SamplingSettings
        assert poem.settings.sampling == SamplingSettings(temperature=0.8)  # the rest as stored: the defaults
        s.update_settings(poem.id, poem.settings.replaced(top_k=20))
        doc = json.loads(s.connection.execute("SELECT settings FROM chats WHERE id = ?", (poem.id,)).fetchone()[0])
    assert (doc["temperature"], doc["top_k"], doc["structured_kind"], doc["structured_text"]) == (0.8, 20, "", "")
    assert "sampling" not in doc
    known_to_v1 = {"draft", "max_tokens", "min_p", "reasoning", "repeat_penalty", "seed", "speculation",
                   "system_prompt", "target", "task", "temperature", "top_k", "top_p"}
    old_reader = ChatSettings.from_json(json.dumps({k: v for k, v in doc.items() if k in known_to_v1}))
    assert old_reader.sampling == SamplingSettings(temperature=0.8, top_k=20)


def test_a_schema_6_file_gets_the_busy_verdict_and_its_runs_count_as_not_judged(v1_path):
    """Version 7: each task run keeps the machine's verdict; the runs stored before have none (NULL) and
    stay in every figure, exactly as before."""
    conn = sqlite3.connect(v1_path, isolation_level=None)
    try:
        assert migrate(conn, {v: MIGRATIONS[v] for v in range(1, 7)}) == 6
        runs = conn.execute("SELECT count(*) FROM task_runs").fetchone()[0]
    finally:
        conn.close()
    with open_store(v1_path) as s:
        before = task_table(s)
    assert runs and before
    with open_store(v1_path) as s:
        assert schema_version(s.connection) == 7
        assert s.connection.execute("SELECT count(*) FROM task_runs WHERE busy IS NULL").fetchone()[0] == runs
        after = task_table(s)
    assert after == before and all(r.busy_runs == 0 for r in after)
