"""The stored answers ``auto`` on a managed llama-server decides from (task_stats.mode_runs): one task's
answers of one pair with speculation on and off, the newest of each, oldest first; stopped ones left out."""

from specchat.backends.server_auto import OFF_MODE, ON_MODE, samples_of
from specchat.metrics import Counts
from specchat.store import ChatSettings, MessageStats, open_store
from specchat.store.task_stats import mode_runs

TARGET, HEAD = "/m/qwen3-8b.gguf", "/m/qwen3-8b-mtp.gguf"


def answer(store, chat_id: int, mode: str, tokens: int, state: str = "done") -> None:
    writer = store.answer_writer(store.start_answer(chat_id))
    writer.append("x")
    writer.finish(state, MessageStats(Counts.of_answer(tokens, 1.0), mode=mode))


def test_a_tasks_stored_answers_on_the_server_with_speculation_on_and_off(tmp_path):
    with open_store(tmp_path / "db.sqlite3") as store:
        code = store.create_chat("c", ChatSettings(target=TARGET, draft=HEAD, task="code", backend="llama-server"))
        chat = store.create_chat("d", ChatSettings(target=TARGET, draft=HEAD, task="chat", backend="llama-server"))
        for tokens in (11, 12, 13):
            answer(store, code.id, ON_MODE, tokens)
        answer(store, code.id, OFF_MODE, 21)
        answer(store, code.id, OFF_MODE, 22, state="stopped")  # a part of an answer: no rate
        answer(store, code.id, "auto", 31)  # the same pair loaded here, not on the server
        answer(store, chat.id, OFF_MODE, 41)  # another task
        runs = mode_runs(store, "code", TARGET, HEAD, (ON_MODE, OFF_MODE), limit=2)
        assert [(m, c.tokens) for m, c in runs] == [(ON_MODE, 12), (ON_MODE, 13), (OFF_MODE, 21)]
        assert [on for on, _c in samples_of(runs)] == [True, True, False]
        assert mode_runs(store, "code", TARGET, None, (ON_MODE, OFF_MODE)) == []  # another pair's
