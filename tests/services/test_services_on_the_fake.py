"""The generation thread and the answer service on the fake pair (no GGUF file): seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fakes import FakePairFactory, FakeSpec
from specchat.engine import Done, Mode, StopReason, TokensEmitted
from specchat.engine.pair import PairConfig
from specchat.services import answers as answers_module
from specchat.services.answers import AnswerService, Phase
from specchat.store import ChatSettings, open_store
from specchat.workers.generation import GenerationService, Started

MSGS = ({"role": "user", "content": "hello"},)


@pytest.fixture
def service(qtbot):
    svc = GenerationService(FakePairFactory(FakeSpec(answer_tokens=2000, decode_s=0.002)))
    with qtbot.waitSignal(svc.pairLoaded, timeout=5_000):
        svc.load(PairConfig(Path("t.gguf"), Path("d.gguf")))
    yield svc
    svc.shutdown()


def test_stop_takes_effect_within_one_round_and_later_events_are_dropped(qtbot, service):
    events = []

    def on_event(rid, ev):
        events.append((rid, ev))
        if isinstance(ev, TokensEmitted) and sum(len(e.token_ids) for _, e in events
                                                  if isinstance(e, TokensEmitted)) >= 20:
            service.cancel()

    service.engineEvent.connect(on_event)
    rid = service.submit(messages=MSGS, mode=Mode.DRAFT, max_tokens=2000)
    qtbot.waitUntil(lambda: any(isinstance(ev, Done) for _, ev in events), timeout=10_000)
    assert isinstance(events[0][1], Started) and all(r == rid for r, _ in events)
    done = events[-1][1]
    assert done.stop_reason is StopReason.CANCELLED and done.stats.tokens < 20 + 10


def test_a_newer_request_supersedes_the_running_one(qtbot, service):
    events = []
    service.engineEvent.connect(lambda rid, ev: events.append((rid, ev)))
    first = service.submit(messages=MSGS, mode=Mode.DRAFT, max_tokens=2000)
    second = service.submit(messages=MSGS, mode=Mode.BASELINE, max_tokens=30)
    qtbot.waitUntil(lambda: any(isinstance(ev, Done) and r == second for r, ev in events), timeout=10_000)
    assert second != first
    assert all(r == second for r, _ in events)  # the abandoned request's results never arrive


def test_the_answer_service_answers_chats_in_order_one_at_a_time(qtbot, tmp_path):
    store = open_store(tmp_path / "db.sqlite3")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.touch()
    draft.touch()
    settings = ChatSettings(target=target, draft=draft, speculation="draft", max_tokens=100)
    chats = [store.create_chat(f"chat {i}", settings).id for i in range(3)]
    for c in chats:
        store.add_message(c, "user", f"question {c}")
    factory = FakePairFactory(FakeSpec(answer_tokens=80, decode_s=0.001))
    gen = GenerationService(factory)

    def config(s):
        from specchat.engine.pair import PairConfig

        return PairConfig(s.target, s.draft)

    answers = AnswerService(store, gen, config)
    order = []
    answers.finished.connect(lambda chat_id, stored: order.append((chat_id, stored.state)))
    for c in chats:
        answers.ask(c)
    assert answers.busy_chats() == {chats[0]: Phase.LOADING, chats[1]: Phase.WAITING, chats[2]: Phase.WAITING}
    qtbot.waitUntil(lambda: len(order) == 3, timeout=20_000)
    assert order == [(c, "done") for c in chats]
    assert len(factory.loads) == 1  # one pair for all three: loaded once
    assert all(len(store.messages(c)[-1].content) == 80 for c in chats)
    answers.shutdown()
    gen.shutdown()
    store.close()


def test_a_full_disk_mid_answer_stops_it_at_what_was_shown_and_stores_it_as_stopped_once_there_is_room(
        qtbot, tmp_path, monkeypatch):
    """SQLite says "database or disk is full" (max_page_count stands in for the disk): the answer
    stops with one line saying why, the chat is not left "answering", what was shown stays on screen
    as stopped, and it is stored as stopped with that text once the database takes it again."""
    store = open_store(tmp_path / "db.sqlite3")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.touch()
    draft.touch()
    chat = store.create_chat("c", ChatSettings(target=target, draft=draft, speculation="draft", max_tokens=20000))
    store.add_message(chat.id, "user", "question")
    # fast tokens: the last page's free room (seconds of text at 500 tok/s) fills in under one
    gen = GenerationService(FakePairFactory(FakeSpec(answer_tokens=20000, decode_s=0.0005)))
    monkeypatch.setattr(answers_module, "RETRY_MS", 100)  # the app tries again every 2 s
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, s.draft))
    notices, finished = [], []
    answers.notice.connect(notices.append)
    answers.finished.connect(lambda chat_id, stored: finished.append(stored))
    try:
        live = answers.ask(chat.id)
        qtbot.waitUntil(lambda: len(live.content) > 50, timeout=10_000)
        pages = store.connection.execute("PRAGMA page_count").fetchone()[0]
        store.connection.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
        qtbot.waitUntil(lambda: bool(finished), timeout=20_000)
        shown = finished[0]
        assert shown.state == "stopped" and shown.content == live.content and len(shown.content) > 50
        assert not answers.busy_chats()  # not stuck "answering"
        lines = [n.text for n in notices if n.error]
        assert lines and "database or disk is full" in lines[0] and "\n" not in lines[0]
        assert store.messages(chat.id)[-1].state == "streaming"  # not stored yet: the disk is full

        store.connection.execute("PRAGMA max_page_count = 1000000")  # room again
        qtbot.waitUntil(lambda: store.messages(chat.id)[-1].state == "stopped", timeout=10_000)
        assert store.messages(chat.id)[-1].content == shown.content  # stored as shown, nothing lost
    finally:
        answers.shutdown()
        gen.shutdown()
        store.close()
