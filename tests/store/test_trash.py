"""Deleting a chat in the window can be undone: the chat goes to the trash, whole, until the app
starts again (issue 25, item 6)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specchat.metrics import Counts
from specchat.store import ChatSettings, MessageStats, fts5_available, open_store, task_table


class FakeTime:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float = 1.0) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture(params=["fts5", "like"])
def store(request, tmp_path: Path, clock: FakeTime):
    if request.param == "fts5" and not fts5_available(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite has no FTS5")
    with open_store(tmp_path / "specchat.sqlite3", fts=request.param == "fts5", now=clock) as s:
        yield s


def everything(store, chat_id: int):
    """What a chat is to the user: its title, settings, messages (text, reasoning, stats, tint), activity."""
    chat = store.get_chat(chat_id)
    messages = [(m.id, m.role, m.content, m.reasoning, m.state, m.stats, m.origins, m.content_spans)
                for m in store.messages(chat_id)]
    return chat.title, chat.settings, chat.created_at, chat.updated_at, messages


def three_chats(store, clock: FakeTime) -> tuple[int, int, int]:
    """Oldest first: "pelicans", "herons" (with a finished answer and its stats), "gulls"."""
    ids = []
    for title, words in (("pelicans", "tell me about pelicans"), ("herons", "and herons, in JSON"),
                         ("gulls", "gulls at sea")):
        settings = ChatSettings(system_prompt=f"You know {title}.", task="json" if title == "herons" else "chat")
        chat = store.create_chat(title, settings.replaced(temperature=0.3))
        store.add_message(chat.id, "user", words)
        clock.advance()
        ids.append(chat.id)
    writer = store.answer_writer(store.start_answer(ids[1]))
    writer.append('{"bird": ', origins="tt")
    writer.append('"heron"}', origins="ddd")
    writer.finish("done", MessageStats(Counts.of_answer(5, 0.5) + Counts.of_round(4, 4, 3), mode="draft"))
    clock.advance()
    return ids[0], ids[1], ids[2]


def test_a_trashed_chat_leaves_the_list_and_search_and_comes_back_whole_at_its_place(store, clock):
    pelicans, herons, gulls = three_chats(store, clock)
    order = [c.id for c in store.list_chats()]
    assert order == [herons, gulls, pelicans]
    before = everything(store, herons)
    clock.advance(5)

    trashed = store.trash_chat(herons)
    assert trashed.trashed_at == clock.t
    assert [c.id for c in store.list_chats()] == [gulls, pelicans]
    assert store.list_chats("heron") == [] and store.list_chats("herons") == []  # title and message text
    assert store.list_chats("bird") == []  # the answer's words too
    assert [c.id for c in store.trashed_chats()] == [herons]

    restored = store.restore_chat(herons)
    assert restored.trashed_at is None
    assert [c.id for c in store.list_chats()] == order  # at its place, not on top
    assert everything(store, herons) == before
    assert [c.id for c in store.list_chats("bird")] == [herons]
    assert store.trashed_chats() == []


def test_trashing_twice_keeps_the_first_time_and_an_unknown_chat_is_a_key_error(store, clock):
    chat = store.create_chat("twice")
    first = store.trash_chat(chat.id).trashed_at
    clock.advance(3)
    assert store.trash_chat(chat.id).trashed_at == first
    with pytest.raises(KeyError):
        store.trash_chat(chat.id + 100)
    with pytest.raises(KeyError):
        store.restore_chat(chat.id + 100)


def test_the_trash_outlives_a_closed_store_and_a_second_connection_and_goes_at_purge(store, clock):
    path = Path(store.connection.execute("PRAGMA database_list").fetchone()["file"])
    pelicans, herons, gulls = three_chats(store, clock)
    before = everything(store, herons)
    store.trash_chat(herons)
    clock.advance()
    store.trash_chat(pelicans)

    # a second window's connection (or this one after a restart without a purge): hidden, whole
    with open_store(path, recover=False) as other:
        assert [c.id for c in other.list_chats()] == [gulls]
        assert [c.id for c in other.trashed_chats()] == [pelicans, herons]  # the last trashed first
        assert everything(other, herons) == before

    store.restore_chat(pelicans)
    assert store.purge_trash() == 1
    assert [c.id for c in store.list_chats()] == [gulls, pelicans]
    with pytest.raises(KeyError):
        store.get_chat(herons)
    assert store.messages(herons) == []
    assert store.list_chats("heron") == []
    # what was measured describes the machine, not the chat: the task table keeps the answer
    assert {r.tag: r.speculative_answers for r in task_table(store)} == {"json": 1}
    assert store.purge_trash() == 0


def test_an_answer_stopped_in_a_trashed_chat_is_stored_and_does_not_move_the_chat(store, clock):
    """Deleting a chat that generates stops the answer first; the stop lands after the trash."""
    older = store.create_chat("older")
    clock.advance()
    busy = store.create_chat("busy")
    store.add_message(busy.id, "user", "go on")
    writer = store.answer_writer(store.start_answer(busy.id), flush_interval=0)
    writer.append("partial text", origins="tt")
    clock.advance()
    store.add_message(older.id, "user", "newer activity here")  # "older" is on top now
    clock.advance()
    store.trash_chat(busy.id)
    clock.advance(10)
    stopped = writer.finish("stopped", MessageStats(Counts.of_answer(2, 0.1), mode="draft",
                                                    stop_reason="cancelled"))
    assert stopped is not None and stopped.content == "partial text" and stopped.state == "stopped"
    store.restore_chat(busy.id)
    assert [c.id for c in store.list_chats()] == [older.id, busy.id]
    assert [m.content for m in store.messages(busy.id)] == ["go on", "partial text"]
