"""Rows SpecChat stored (or could have stored) never keep the chats from opening (issue 37, class 1).

Old answer statistics with NaN (Python's json writes and reads it), a ``fallbacks`` of the wrong type,
chat settings nested thousands deep, a column of the wrong type, a task run holding an infinity:
each is read, repaired or left out with one line, and the rest of the database opens as it was.
The fuzz tests feed the readers generated hostile documents of their own kind (JSON with NaN,
infinities, huge numbers, every type in every key, deep nesting): each must read, never raise.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat import bounded_json
from specchat.metrics import COUNT_FIELDS, Counts
from specchat.store import ChatSettings, MessageStats, open_store, task_table
from specchat.store.schema import v1_stats_to_v2

V1_FILE = Path(__file__).parent / "data" / "v1-release.sqlite3"
FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DEEP = "[" * 5000 + "]" * 5000  # json.loads recurses once per level: RecursionError near 1000


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "specchat.sqlite3"
    shutil.copyfile(V1_FILE, path)
    return path


def poke(path: Path, sql: str, *params: object) -> None:
    """Write a row as another program (or an older SpecChat) left it, behind the store's back."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


# -- the migration: schema-1 rows as SpecChat wrote them ------------------------------------------------


def test_a_v1_database_with_nan_statistics_a_bad_fallbacks_and_deep_settings_opens_with_its_chats(tmp_path, caplog):
    path = v1_copy(tmp_path)
    conn = sqlite3.connect(path)
    answer_ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE stats IS NOT NULL ORDER BY id")]
    first, second, third = answer_ids[:3]
    # what schema 1 wrote for an answer with no rounds with a draft: mean_k NaN (json.dumps writes it)
    nan_doc = json.loads(conn.execute("SELECT stats FROM messages WHERE id = ?", (first,)).fetchone()[0])
    nan_doc["mean_k"] = float("nan")
    nan_doc["prefill_tok_s"] = float("inf")
    conn.execute("UPDATE messages SET stats = ? WHERE id = ?", (json.dumps(nan_doc), first))
    conn.execute("UPDATE messages SET stats = ? WHERE id = ?", ('{"tokens": 7, "fallbacks": 5}', second))
    conn.execute("UPDATE messages SET stats = ? WHERE id = ?", (DEEP, third))
    conn.execute("UPDATE chats SET settings = ? WHERE title = 'A poem'", (DEEP,))
    conn.commit()
    conn.close()

    with open_store(path) as s:  # before: ValueError, TypeError or RecursionError, and no chat at all
        chats = {c.title: c for c in s.list_chats()}
        assert set(chats) == {"Prime numbers", "A poem", "JSON please"}
        assert chats["A poem"].settings == ChatSettings()  # unreadable: the defaults, said in a line
        nan_answer, bad_fallbacks, deep = (s.get_message(i) for i in (first, second, third))
        assert nan_answer.stats.tokens == nan_doc["tokens"] and nan_answer.stats.k_sum == 0  # NaN: unknown
        assert nan_answer.stats.prefill_s == 0.0 and math.isfinite(nan_answer.stats.decode_s)
        assert bad_fallbacks.stats.tokens == 7 and bad_fallbacks.stats.fallbacks == ()
        assert deep.stats is None and deep.content  # its text is kept; its statistics are not shown
        assert all(len(s.messages(c.id)) for c in chats.values())
    said = warnings_of(caplog)
    assert any(f"message {third}" in w for w in said)  # one line for the statistics left as they were
    assert any("A poem" in w and "settings" in w for w in said)


@settings(FUZZ)
@given(doc=st.dictionaries(st.sampled_from(["tokens", "mean_k", "rounds_with_draft", "prefill_tok_s",
                                             "prompt_tokens", "decode_s", "drafted", "fallbacks", "mode",
                                             "stop_reason", "error", "overhead_s"]),
                           st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                                        lambda kids: st.lists(kids, max_size=3)
                                        | st.dictionaries(st.text(max_size=3), kids, max_size=3),
                                        max_leaves=8)))
def test_the_v1_migration_turns_any_old_statistics_into_statistics_that_read_back_whole(doc):
    new = v1_stats_to_v2(doc)
    stats, bad = MessageStats.read(json.dumps(new))
    assert bad == [] and stats is not None
    assert all(math.isfinite(getattr(stats.counts, f)) and getattr(stats.counts, f) >= 0 for f in COUNT_FIELDS)


# -- reading today's rows ---------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "specchat.sqlite3"
    with open_store(path) as s:
        chat = s.create_chat("Kept")
        s.add_message(chat.id, "user", "hello")
        writer = s.answer_writer(s.start_answer(chat.id))
        writer.append("an answer")
        writer.finish("done", MessageStats(Counts(tokens=3, decoded=2, decode_s=0.5), mode="baseline"))
    return path


def test_chat_settings_nested_thousands_deep_give_the_defaults_and_one_line_not_a_recursion_error(db, caplog):
    poke(db, "UPDATE chats SET settings = ?", '{"a":' * 3000 + "1" + "}" * 3000)
    with open_store(db) as s:
        for _refresh in range(3):  # the chat list is read again at every refresh
            [chat] = s.list_chats()
            assert chat.title == "Kept" and chat.settings == ChatSettings()
    said = [w for w in warnings_of(caplog) if "chat 1" in w]
    assert len(said) == 1 and "deeper than" in said[0]  # said once per row, not at every refresh


def test_a_bad_key_of_chat_settings_takes_its_default_and_the_others_are_kept(db, caplog):
    poke(db, "UPDATE chats SET settings = ?",
         '{"system_prompt": "be brief", "temperature": NaN, "top_k": "many", "max_tokens": 1e400, "seed": 7}')
    with open_store(db) as s:
        [chat] = s.list_chats()
    assert chat.settings.system_prompt == "be brief" and chat.settings.sampling.seed == 7
    assert chat.settings.sampling.temperature == 0.0 and chat.settings.sampling.top_k == 40
    assert chat.settings.max_tokens == ChatSettings().max_tokens
    [line] = [w for w in warnings_of(caplog) if "chat 1" in w]
    assert "temperature" in line and "top_k" in line and "max_tokens" in line and "\n" not in line


def test_columns_of_the_wrong_type_are_read_as_their_defaults(db, caplog):
    poke(db, "UPDATE chats SET title = ?, created_at = ?", b"\x00\xff", "yesterday")
    poke(db, "UPDATE messages SET content = CAST(X'68E96C6C6F' AS TEXT) WHERE role = 'user'")  # 'héllo' in Latin-1
    poke(db, "UPDATE messages SET reasoning = X'0102' WHERE role = 'assistant'")  # a BLOB
    with open_store(db) as s:
        [chat] = s.list_chats()
        question, answer = s.messages(chat.id)
    assert chat.title == "Untitled" and chat.created_at == 0.0
    assert question.content == "h\ufffdllo"  # not UTF-8: the bad byte shows as U+FFFD, the rest is kept
    assert answer.reasoning == "" and answer.content == "an answer" and answer.stats.tokens == 3
    assert warnings_of(caplog)


def test_task_runs_that_hold_an_infinity_or_text_are_left_out_of_the_table_with_a_line(db, caplog):
    with open_store(db) as s:
        [before] = task_table(s)
        assert before.plain_answers == 1
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO task_runs (message_id, tag, mode, tokens, decode_s, drafted, accepted, rounds_with_draft,"
                 " rounds_fully_accepted, created_at, decoded) SELECT message_id, tag, mode, tokens, 9e999, 0, 0, 0, 0,"
                 " created_at, decoded FROM task_runs")
    conn.execute("INSERT INTO task_runs (message_id, tag, mode, tokens, decode_s, drafted, accepted, rounds_with_draft,"
                 " rounds_fully_accepted, created_at, decoded) SELECT message_id, tag, mode, 'many', 1.0, 0, 0, 0, 0,"
                 " created_at, decoded FROM task_runs WHERE id = 1")
    conn.execute("INSERT INTO task_runs (message_id, tag, mode, tokens, decode_s, drafted, accepted, rounds_with_draft,"
                 " rounds_fully_accepted, created_at, decoded) SELECT message_id, tag, mode, tokens, 1.0, -5, 0, 0, 0,"
                 " created_at, decoded FROM task_runs WHERE id = 1")
    conn.commit()
    conn.close()
    with open_store(db) as s:
        [after] = task_table(s)
    assert after == before  # the figures rest on the rows that read
    assert any("3 stored run(s)" in w for w in warnings_of(caplog))


# -- the readers, fuzzed with hostile documents of their own kind -----------------------------------------

SETTINGS_KEYS = sorted({f.name for f in fields(ChatSettings)} - {"sampling"}
                       | {f.name for f in fields(ChatSettings().sampling.__class__)} - {"structured"}
                       | {"structured_kind", "structured_text", "from_a_newer_version"})
STATS_KEYS = ["counts", "mode", "stop_reason", "fallbacks", "error", "phases", "structured", "drafters", "notes",
              "n_ctx", "left_out", "left_out_span", "busy", "busy_why", "past_context",
              "from_a_newer_version"]
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
           | st.floats() | st.text(max_size=20) | st.sampled_from(["json_schema", "grammar", "draft", "off"]))
VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                      | st.dictionaries(st.sampled_from(COUNT_FIELDS + ("reasoning", "answer", "x")), kids, max_size=4),
                      max_leaves=12)


def hostile(keys: list[str]) -> st.SearchStrategy[str]:
    """A stored document of that kind: known keys holding any JSON (NaN and infinities as Python's json writes
    them), or a document that is deep, huge-numbered, not an object or not JSON."""
    docs = st.dictionaries(st.sampled_from(keys), VALUES, max_size=8).map(json.dumps)
    deep = st.builds(lambda n, key: json.dumps({key: 0})[:-2] + "[" * n + "1" + "]" * n + "}",
                     st.integers(60, 3000), st.sampled_from(keys))
    odd = st.sampled_from(["", "null", "[]", "7", '"text"', "{", '{"counts": {"tokens": 1e400}}',
                           '{"max_tokens": ' + "9" * 5000 + "}", '{"temperature": -Infinity}'])
    return st.one_of(docs, deep, odd)


@settings(FUZZ)
@given(text=hostile(SETTINGS_KEYS))
def test_any_stored_chat_settings_read_as_settings_that_validate_and_read_back(text):
    settings_ = ChatSettings.from_json(text, damaged=lambda line: None)
    settings_.validate()
    assert ChatSettings.read(settings_.to_json()) == (settings_, [])


@settings(FUZZ)
@given(text=hostile(STATS_KEYS))
def test_any_stored_answer_statistics_read_as_finite_counts_or_none(text):
    stats = MessageStats.from_json(text, damaged=lambda line: None)
    if stats is not None:
        for c in (stats.counts, stats.phases.reasoning, stats.phases.answer):
            assert all(math.isfinite(getattr(c, f)) and getattr(c, f) >= 0 for f in COUNT_FIELDS)
        assert all(isinstance(t, str) for t in stats.fallbacks + stats.notes)
        assert MessageStats.from_json(stats.to_json()) == stats


@settings(FUZZ, max_examples=100)
@given(chat_settings=hostile(SETTINGS_KEYS), stats=hostile(STATS_KEYS))
def test_the_store_opens_and_lists_whatever_its_json_columns_hold(db, chat_settings, stats):
    poke(db, "UPDATE chats SET settings = ?", chat_settings)
    poke(db, "UPDATE messages SET stats = ? WHERE role = 'assistant'", stats)
    with open_store(db) as s:
        [chat] = s.list_chats()
        assert [m.content for m in s.messages(chat.id)] == ["hello", "an answer"]


# what SpecChat writes from its own dialog and command line, it reads back unchanged
FINITE = st.floats(allow_nan=False, allow_infinity=False)
VALID = st.builds(
    lambda **kw: ChatSettings().replaced(**kw),
    target=st.none() | st.text(min_size=1).filter(lambda t: t.strip() and "\x00" not in t),
    speculation=st.sampled_from(["baseline", "draft", "lookup", "auto"]),
    reasoning=st.booleans(), system_prompt=st.text(), max_tokens=st.integers(1, 1 << 62),
    task=st.text(max_size=40), backend=st.text(max_size=20),
    temperature=st.floats(0, 1e300), top_k=st.integers(0, 100_000), top_p=st.floats(1e-9, 1),
    min_p=st.floats(0, 0.999), repeat_penalty=st.floats(1e-9, 1e300), repeat_last_n=st.integers(0, 100_000),
    seed=st.integers(0, (1 << 63) - 1),
)


@settings(FUZZ)
@given(chat_settings=VALID)
def test_chat_settings_the_store_takes_read_back_equal(chat_settings):
    chat_settings.validate()
    assert ChatSettings.read(chat_settings.to_json()) == (chat_settings, [])


def test_every_stored_field_type_has_a_reader():
    from specchat.store.records import TYPE_READERS

    for cls in (ChatSettings, ChatSettings().sampling.__class__):
        for f in fields(cls):
            if f.name not in ("sampling", "structured"):
                assert str(f.type) in TYPE_READERS, f"{cls.__name__}.{f.name}: {f.type}"


def test_settings_that_could_not_be_read_back_are_refused_before_they_are_stored(tmp_path):
    with open_store(tmp_path / "s.sqlite3") as s:
        chat = s.create_chat("x")
        for bad in ({"temperature": float("nan")}, {"repeat_penalty": float("inf")}, {"max_tokens": 5.0},
                    {"system_prompt": 5}, {"reasoning": 1}):
            with pytest.raises(ValueError):
                s.update_settings(chat.id, ChatSettings().replaced(**bad))
        assert s.get_chat(chat.id).settings == ChatSettings()


def test_bounded_json_refuses_what_does_not_nest_within_its_bound():
    with pytest.raises(bounded_json.TooDeep):
        bounded_json.loads(DEEP)


def test_an_answers_left_out_span_and_machine_verdict_read_back_and_a_bad_one_is_left_out_with_a_line():
    stats = MessageStats(Counts.of_answer(40, 1.0), mode="draft", left_out=4, left_out_span=(3, 9), busy=True,
                         busy_why="other work kept 1.6 of 2 cores busy")
    assert MessageStats.from_json(stats.to_json()) == stats
    lines: list[str] = []
    for bad in ([9, 3], [0, 2], [1], "3-9", [1.5, 2]):
        doc = json.loads(stats.to_json()) | {"left_out_span": bad, "busy": "yes"}
        read = MessageStats.from_json(json.dumps(doc), damaged=lines.append)
        assert read is not None and read.left_out_span is None and read.busy is None and read.left_out == 4
    assert len(lines) == 5 and all("left_out_span" in line and "busy" in line for line in lines)
    assert MessageStats.from_json('{"counts": {"tokens": 3}}').busy is None  # an older answer: not judged
