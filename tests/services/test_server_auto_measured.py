"""The window's ``auto`` on a managed llama-server decides from the chat's task's stored answers: the answer
service reads them from the store (its thread owns it) and sends them with the request (the backend's
thread decides: backends/server_auto.py)."""

from __future__ import annotations

from helpers.fakes import FakePairFactory, FakeSpec
from specchat.backends.server_auto import OFF_MODE, ON_MODE
from specchat.engine.pair import PairConfig
from specchat.metrics import Counts
from specchat.services.answers import AnswerService
from specchat.store import ChatSettings, MessageStats, open_store
from specchat.workers.generation import GenerationService


def stored_answer(store, chat_id: int, mode: str, tokens: int) -> None:
    writer = store.answer_writer(store.start_answer(chat_id))
    writer.append("x")
    writer.finish("done", MessageStats(Counts.of_answer(tokens, 1.0), mode=mode))


def test_an_auto_answer_carries_its_task_and_the_tasks_stored_rates_on_the_server(qtbot, tmp_path):
    store = open_store(tmp_path / "db.sqlite3")
    target, head = tmp_path / "t.gguf", tmp_path / "mtp.gguf"
    target.touch()
    head.touch()
    code = ChatSettings(target=target, draft=head, speculation="auto", task="code", max_tokens=20)
    earlier = store.create_chat("earlier", code).id
    for mode, tokens in ((ON_MODE, 11), (OFF_MODE, 21), (ON_MODE, 12), ("auto", 31)):
        stored_answer(store, earlier, mode, tokens)
    stored_answer(store, store.create_chat("prose", ChatSettings(target=target, draft=head, task="creative")).id,
                  OFF_MODE, 41)
    chats = [store.create_chat("now", code).id,
             store.create_chat("plain", ChatSettings(target=target, draft=head, speculation="baseline")).id]
    for c in chats:
        store.add_message(c, "user", "question")
    gen = GenerationService(FakePairFactory(FakeSpec(answer_tokens=10, decode_s=0.001)))
    asked: list[dict] = []
    submit = gen.submit
    gen.submit = lambda **request: asked.append(request) or submit(**request)  # type: ignore[method-assign]
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, s.draft))
    done: list[int] = []
    answers.finished.connect(lambda chat_id, stored: done.append(chat_id))
    try:
        for c in chats:
            answers.ask(c)
        qtbot.waitUntil(lambda: len(done) == 2, timeout=20_000)
    finally:
        gen.shutdown()
        store.close()
    auto, plain = asked
    assert auto["task"] == "code"
    # this task's answers of this pair on the server, oldest first; a local "auto" run and another task's are not
    assert [(on, c.tokens) for on, c in auto["measured"]] == [(True, 11), (False, 21), (True, 12)]
    assert plain["task"] == "chat" and plain["measured"] == ()  # only auto decides from them
