"""Chats, settings, messages and search: what the chat window relies on."""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from specchat.engine.events import GenerationStats, StopReason, TokenOrigin
from specchat.metrics import Counts
from specchat.sampling_settings import SamplingSettings
from specchat.store import (
    SCHEMA_VERSION,
    SPECULATION_MODES,
    ChatSettings,
    Message,
    MessageStats,
    StoreError,
    default_path,
    fts5_available,
    open_store,
    origin_chars,
)


class FakeTime:
    """A clock the test moves by hand, so 'newest first' does not depend on timer resolution."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float = 1.0) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "specchat.sqlite3"


@pytest.fixture
def store(db_path: Path, clock: FakeTime):
    with open_store(db_path, now=clock, clock=clock) as s:
        yield s


def titles(chats) -> list[str]:
    return [c.title for c in chats]


def test_opening_sets_wal_normal_sync_and_foreign_keys(store):
    conn = store.connection
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_default_path_is_in_the_user_data_dir_and_works():
    # conftest points XDG_DATA_HOME at a temporary folder: this never touches the real one
    path = default_path()
    assert path.name == "specchat.sqlite3"
    assert Path(os.environ["XDG_DATA_HOME"]) in path.parents
    with open_store() as s:
        s.create_chat("hello")
    assert path.exists()


def test_database_from_a_newer_version_is_refused(db_path):
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer|knows up to"):
        open_store(db_path)


def test_a_file_that_is_not_a_database_gives_a_store_error(tmp_path):
    bad = tmp_path / "specchat.sqlite3"
    bad.write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        open_store(bad)


def test_the_store_refuses_to_be_used_from_another_thread(store):
    # the rule in db.py (the GUI thread owns the Store) is enforced, not just documented
    errors = []

    def worker():
        try:
            store.list_chats()
        except sqlite3.ProgrammingError as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(errors) == 1


def test_chats_come_back_newest_first_by_last_activity(store, clock):
    first = store.create_chat("first")
    clock.advance()
    second = store.create_chat("second")
    clock.advance()
    store.create_chat("third")
    assert titles(store.list_chats()) == ["third", "second", "first"]

    clock.advance()
    store.add_message(first.id, "user", "back to the first chat")
    assert titles(store.list_chats()) == ["first", "third", "second"]

    clock.advance()
    store.rename_chat(second.id, "  second,   renamed ")  # renaming is not activity
    assert titles(store.list_chats()) == ["first", "third", "second, renamed"]

    clock.advance()
    writer = store.answer_writer(store.start_answer(second.id))
    writer.finish("done")
    assert titles(store.list_chats())[0] == "second, renamed"


def test_rename_and_create_reject_empty_titles(store):
    chat = store.create_chat("keep")
    with pytest.raises(ValueError):
        store.rename_chat(chat.id, "   ")
    with pytest.raises(ValueError):
        store.create_chat("")
    assert store.get_chat(chat.id).title == "keep"


@pytest.fixture(params=["fts5", "like"])
def search_store(request, db_path, clock):
    if request.param == "fts5" and not fts5_available(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite has no FTS5")
    with open_store(db_path, fts=request.param == "fts5", now=clock) as s:
        assert s.uses_fts == (request.param == "fts5")
        yield s


def test_search_finds_a_chat_by_a_word_in_a_message(search_store, clock):
    s = search_store
    lists = s.create_chat("Data structures")
    s.add_message(lists.id, "user", "How do I reverse a linked list in Rust?")
    s.add_message(lists.id, "assistant", "Walk the list and flip each next pointer.")
    clock.advance()
    cooking = s.create_chat("Dinner")
    s.add_message(cooking.id, "user", "A recipe for crème brûlée, please")
    clock.advance()
    s.create_chat("Linked data notes")  # matches by title only

    assert titles(s.list_chats("reverse")) == ["Data structures"]
    assert titles(s.list_chats("LINKED")) == ["Linked data notes", "Data structures"]  # newest first
    assert titles(s.list_chats("reverse rust")) == ["Data structures"]  # every word, one message
    assert titles(s.list_chats("crème")) == ["Dinner"]
    assert titles(s.list_chats("brûlée")) == ["Dinner"]
    assert titles(s.list_chats("dinner")) == ["Dinner"]  # title, case-insensitive
    assert s.list_chats("reverse dinner") == []  # words split across chats do not match
    assert s.list_chats("quantum") == []
    assert titles(s.list_chats("rust?")) == ["Data structures"]  # punctuation in a query word is harmless
    assert titles(s.list_chats("?")) == ["Data structures"]  # a query of punctuation only: substring
    for query in ('"linked', "list*", "rust OR", "NOT -list", "(a"):  # FTS5 syntax in a query is just text
        s.list_chats(query)
    assert len(s.list_chats("   ")) == 3


def test_search_words_with_control_characters_or_lone_surrogates_still_search(search_store):
    """Pasted text can hold a NUL or half a surrogate pair: FTS5 read a NUL as the end of its string
    ("unterminated string") and SQLite cannot take a lone surrogate. They separate words instead."""
    s = search_store
    chat = s.create_chat("Sorting")
    s.add_message(chat.id, "user", "sorting a linked list in python")
    for query in ("sort\x00", "linked\x00list", "sort\ud800", "\x01python\x7f", "list \x00"):
        assert titles(s.list_chats(query)) == ["Sorting"], query
    assert s.list_chats("sort\x00quantum") == []  # still every word
    assert titles(s.list_chats("\x00\ud800")) == ["Sorting"]  # nothing left to search: every chat


def test_search_sees_edits_streamed_text_and_deletions(search_store):
    s = search_store
    chat = s.create_chat("Chat")
    question = s.add_message(chat.id, "user", "tell me about giraffes")
    writer = s.answer_writer(s.start_answer(chat.id))
    writer.append("Zebras are striped.")
    writer.flush()
    assert titles(s.list_chats("zebras")) == ["Chat"]  # a streaming answer is searchable once saved
    writer.finish("done")

    s.edit_message(question.id, "tell me about penguins")
    assert s.list_chats("giraffes") == []
    assert s.list_chats("zebras") == []  # the answer after the edited question is gone
    assert titles(s.list_chats("penguins")) == ["Chat"]

    s.delete_chat(chat.id)
    assert s.list_chats("penguins") == []
    if s.uses_fts:  # the index was kept in step by its triggers, cascade delete included
        s.connection.execute("INSERT INTO message_fts (message_fts) VALUES ('integrity-check')")


def test_database_indexed_with_fts5_can_be_opened_without_it(db_path):
    if not fts5_available(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite has no FTS5")
    with open_store(db_path, fts=True) as s:
        chat = s.create_chat("A")
        s.add_message(chat.id, "user", "hello world")
    with open_store(db_path, fts=False) as s:
        s.add_message(chat.id, "user", "second message")  # no FTS trigger left behind
        assert titles(s.list_chats("second")) == ["A"]
    with open_store(db_path, fts=True) as s:  # the index is rebuilt, missing rows included
        assert titles(s.list_chats("second")) == ["A"]


def test_chat_settings_survive_reopening_the_database(db_path, tmp_path):
    settings = ChatSettings(
        target=tmp_path / "qwen-1.5b.gguf",
        draft=None,
        speculation="lookup",
        reasoning=False,
        system_prompt="You are terse.",
        sampling=SamplingSettings(temperature=0.7, top_k=20, top_p=0.9, min_p=0.0, repeat_penalty=1.1, seed=42),
        max_tokens=512,
        task="json",
    )
    with open_store(db_path) as s:
        chat = s.create_chat("settings", settings)
        other = s.create_chat("other")  # the defaults
    with open_store(db_path) as s:  # a new Store on the same file
        restored = s.get_chat(chat.id).settings
        assert restored == settings
        assert restored.speculation == "lookup" and restored.reasoning is False
        assert s.get_chat(other.id).settings == ChatSettings()

        s.update_settings(chat.id, ChatSettings(target="/m/t.gguf", draft="/m/d.gguf", speculation="DRAFT",
                                                task="My Emails"))
    with open_store(db_path) as s:
        restored = s.get_chat(chat.id).settings
        assert restored.draft == Path("/m/d.gguf") and restored.speculation == "draft"
        assert restored.task == "My Emails" and restored.reasoning is True


def test_bad_settings_are_refused_and_damaged_ones_fall_back_to_defaults(store):
    with pytest.raises(ValueError, match="speculation"):
        store.create_chat("x", ChatSettings(speculation="turbo"))
    with pytest.raises(ValueError, match="top_p"):
        store.create_chat("x", ChatSettings(sampling=SamplingSettings(top_p=0)))
    chat = store.create_chat("x", ChatSettings(task="Code"))
    assert chat.settings.task == "code"  # built-in tags are matched case-insensitively
    store.connection.execute(
        "UPDATE chats SET settings = ? WHERE id = ?",
        ('{"speculation": "lookup", "from_a_newer_version": 1}', chat.id),
    )
    assert store.get_chat(chat.id).settings == ChatSettings(speculation="lookup")  # unknown key ignored
    store.connection.execute("UPDATE chats SET settings = 'not json' WHERE id = ?", (chat.id,))
    assert store.get_chat(chat.id).settings == ChatSettings()  # the chat still opens


def test_delete_chat_removes_its_messages_and_only_its_own(store):
    doomed = store.create_chat("doomed")
    kept = store.create_chat("kept")
    for chat in (doomed, kept):
        store.add_message(chat.id, "user", "q")
        store.add_message(chat.id, "assistant", "a")
    assert store.delete_chat(doomed.id) is True
    assert store.delete_chat(doomed.id) is False
    with pytest.raises(KeyError):
        store.get_chat(doomed.id)
    count = store.connection.execute("SELECT count(*) FROM messages WHERE chat_id = ?", (doomed.id,))
    assert count.fetchone()[0] == 0
    assert [m.content for m in store.messages(kept.id)] == ["q", "a"]
    with pytest.raises(KeyError):
        store.add_message(doomed.id, "user", "into a deleted chat")


def _conversation(store):
    chat = store.create_chat("conversation")
    msgs = [
        store.add_message(chat.id, "system", "be brief"),
        store.add_message(chat.id, "user", "question one"),
        store.add_message(chat.id, "assistant", "answer one", reasoning="thinking one"),
        store.add_message(chat.id, "user", "question two"),
        store.add_message(chat.id, "assistant", "answer two"),
    ]
    return chat, msgs


def test_messages_come_back_in_order_with_roles_reasoning_and_states(store):
    chat, _ = _conversation(store)
    got = store.messages(chat.id)
    assert [(m.role, m.content) for m in got] == [
        ("system", "be brief"), ("user", "question one"), ("assistant", "answer one"),
        ("user", "question two"), ("assistant", "answer two"),
    ]
    assert got[2].reasoning == "thinking one" and got[2].content == "answer one"
    assert [m.state for m in got] == [None, None, "done", None, "done"]
    with pytest.raises(ValueError):
        store.add_message(chat.id, "tool", "x")


def test_edit_and_resend_replaces_the_question_and_drops_what_followed(store):
    chat, (system, q1, a1, q2, a2) = _conversation(store)
    edited = store.edit_message(q2.id, "question two, rephrased")
    assert edited.content == "question two, rephrased"
    assert [m.id for m in store.messages(chat.id)] == [system.id, q1.id, a1.id, q2.id]
    assert store.messages(chat.id)[-1].content == "question two, rephrased"

    store.edit_message(q1.id, "start over")  # editing an earlier question drops the rest too
    assert [m.content for m in store.messages(chat.id)] == ["be brief", "start over"]


def test_regenerate_deletes_the_answer_and_new_ids_are_never_reused(store):
    chat, (system, q1, a1, q2, a2) = _conversation(store)
    assert store.delete_messages_after(q2.id) == 1
    assert [m.id for m in store.messages(chat.id)] == [system.id, q1.id, a1.id, q2.id]
    again = store.start_answer(chat.id)
    assert again.id > a2.id  # AUTOINCREMENT: the deleted answer's id stays dead
    assert again.state == "streaming" and again.content == ""

    assert store.delete_messages_after(a1.id, inclusive=True) == 3
    assert [m.id for m in store.messages(chat.id)] == [system.id, q1.id]
    with pytest.raises(KeyError):
        store.delete_messages_after(a2.id)


def test_a_stale_writer_cannot_write_into_the_regenerated_answer(store):
    chat = store.create_chat("c")
    question = store.add_message(chat.id, "user", "q")
    old = store.answer_writer(store.start_answer(chat.id))
    old.append("old text that ", origins="tt")
    old.flush()
    store.delete_messages_after(question.id)  # regenerate while the old answer still streams
    new = store.answer_writer(store.start_answer(chat.id))
    new.append("new", origins="d")
    old.append("arrives late", origins="t")
    old.flush()
    assert old.finish("stopped") is None  # the old message is gone; nothing written anywhere
    final = new.finish("done")
    assert final.content == "new" and final.origins == "d"
    assert [m.content for m in store.messages(chat.id)] == ["q", "new"]


def test_token_origins_are_stored_as_d_and_t_chars(store):
    chat = store.create_chat("c")
    writer = store.answer_writer(store.start_answer(chat.id))
    writer.append("Hello", origins=[TokenOrigin.TARGET])
    writer.append(" wor", origins=(TokenOrigin.DRAFT, TokenOrigin.DRAFT))
    writer.append("ld", origins="t")
    message = writer.finish("done")
    assert message.content == "Hello world" and message.origins == "tddt"
    assert origin_chars(["draft", "target", "d"]) == "dtd"
    with pytest.raises(ValueError):
        origin_chars("dx")
    with pytest.raises(ValueError):
        origin_chars(["bonus"])
    with pytest.raises(RuntimeError):
        writer.append("after the end")


def test_message_stats_round_trip_and_come_from_engine_stats(db_path):
    counts = Counts(tokens=101, decoded=100, prompt_tokens=40, prefill_s=0.5, decode_s=4.0, drafted=120,
                    accepted=90, rounds=40, rounds_with_draft=30, rounds_fully_accepted=12, draft_s=1.0,
                    verify_s=2.5, overhead_s=0.5, k_sum=120, fallback_rounds=3)
    engine_stats = GenerationStats("draft", counts, ("acceptance below 50%",))
    stats = MessageStats.from_generation(engine_stats, StopReason.EOG)
    assert stats.counts == counts and stats.stop_reason == "eog" and stats.mode == "draft"
    assert stats.decode_tok_s == engine_stats.decode_tok_s == 25.0
    assert stats.token_acceptance == 0.75 and stats.sequence_acceptance == 0.4 and stats.mean_k == 4.0
    with open_store(db_path) as s:
        chat = s.create_chat("c")
        writer = s.answer_writer(s.start_answer(chat.id))
        writer.append("x" * 10, reasoning="because")
        message_id = writer.finish("done", stats).id
    with open_store(db_path) as s:
        message = s.get_message(message_id)
        assert message.stats == stats and message.stats.fallbacks == ("acceptance below 50%",)
        assert message.stats.fallback_rounds == 3 and message.stats.k_sum == 120
        assert message.reasoning == "because" and message.state == "done"


def test_an_empty_engine_stats_is_stored_as_zero_counts(store):
    stats = MessageStats.from_generation(GenerationStats.empty("lookup"), "error", error="no model")
    assert stats.counts == Counts() and stats.mode == "lookup" and stats.decode_tok_s == 0.0
    assert stats.token_acceptance is None  # nothing drafted: a dash, not 0%
    assert MessageStats.from_json(stats.to_json()) == stats


def test_stats_documents_are_read_leniently():
    assert MessageStats.from_json('{"counts": {"tokens": 5, "from_a_newer_version": 1}, "mode": "off"}') == \
        MessageStats(Counts(tokens=5), mode="baseline")
    assert MessageStats.from_json('{"mode": "draft"}') == MessageStats(mode="draft")  # no counts: zeros
    assert MessageStats.from_json('{"counts": {"tokens": "many"}}') is None  # unreadable: no stats shown
    assert MessageStats.from_json("not json") is None and MessageStats.from_json(None) is None


def test_plain_decoding_has_one_name():
    assert SPECULATION_MODES == ("baseline", "draft", "lookup", "auto")
    assert ChatSettings(speculation="off").speculation == "baseline"  # what schema 1 called it
    assert ChatSettings.from_json('{"speculation": "off"}').speculation == "baseline"
    assert ChatSettings(speculation=" Baseline ").speculation == "baseline"


def test_the_tint_of_an_answer_survives_reopening(db_path):
    with open_store(db_path) as s:
        chat = s.create_chat("c")
        s.add_message(chat.id, "user", "count")
        writer = s.answer_writer(s.start_answer(chat.id), flush_interval=0.0)
        writer.append("", "let me think", [TokenOrigin.TARGET] * 3)  # reasoning is never tinted
        writer.append("One", "", [TokenOrigin.TARGET])
        writer.append(", two, three", "", [TokenOrigin.DRAFT] * 4)  # flushed on its own
        writer.append(",", "", [TokenOrigin.TARGET])
        writer.append(" four", "", [TokenOrigin.TARGET])  # a run of one kind across appends
        writer.append("", "", [TokenOrigin.DRAFT])  # a token with no visible text yet (mid UTF-8)
        writer.append(" five", "", "dt")  # mixed origins: not all draft, so not tinted
        writer.append(" six", "", "dd")
        writer.append(".")  # text without origins (held back, then flushed) is the target's
        message_id = writer.finish("done").id
    with open_store(db_path) as s:
        message = s.get_message(message_id)
        assert message.content == "One, two, three, four five six."
        assert message.content_segments() == [("One", False), (", two, three", True), (", four five", False),
                                              (" six", True), (".", False)]
        assert "".join(t for t, _ in message.content_segments()) == message.content
        user = s.messages(message.chat_id)[0]
        assert user.content_segments() == [("count", False)]


def test_an_edited_message_or_damaged_spans_show_untinted():
    m = Message(1, 1, "assistant", "abcdef", "", 0.0, content_spans="t2d4")
    assert m.content_segments() == [("ab", False), ("cdef", True)]
    for spans in ("t2d3", "t2x4", "d4t2 ", ""):  # wrong length, unknown kind, junk, none (schema 1)
        assert replace(m, content_spans=spans).content_segments() == [("abcdef", False)]
    assert replace(m, content="").content_segments() == []


def test_editing_a_message_drops_its_tint(store):
    chat = store.create_chat("c")
    writer = store.answer_writer(store.start_answer(chat.id))
    writer.append("drafted", origins="dd")
    answer = writer.finish("done")
    assert answer.content_segments() == [("drafted", True)]
    assert store.edit_message(answer.id, "rewritten").content_segments() == [("rewritten", False)]


def test_a_chat_and_the_engine_share_one_sampling_type():
    """ChatSettings embeds the engine's SamplingSettings (defined once, in a leaf the store may import):
    the same defaults, the same checks, and the object the answer service hands to the engine."""
    from specchat.engine import SamplingSettings as EngineSampling
    from specchat.engine.settings import StructuredOutput

    settings = ChatSettings()
    assert EngineSampling is SamplingSettings and settings.sampling == EngineSampling()
    changed = settings.replaced(temperature=0.7, structured=StructuredOutput("grammar", 'root ::= "x"'),
                                max_tokens=77)
    assert changed.sampling == EngineSampling(temperature=0.7, structured=StructuredOutput("grammar", 'root ::= "x"'))
    assert changed.max_tokens == 77 and settings.sampling == EngineSampling()
    with pytest.raises(ValueError, match="the GBNF grammar is empty"):  # the engine's own check, at the store
        settings.replaced(structured=StructuredOutput("grammar", "")).validate()
    assert ChatSettings.from_json(changed.to_json()) == changed
