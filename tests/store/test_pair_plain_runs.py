"""Issue 38, item 4: a pair's plain runs are the store's task runs, so they outlive a reload; the panel
starts from them (pair_plain_runs) and the stats line counts the same ones (plain_reference)."""

from specchat.metrics import Counts
from specchat.store import ChatSettings, MessageStats, open_store
from specchat.store.task_stats import pair_plain_runs, plain_reference

TARGET, DRAFT = "/m/qwen-1.5b.gguf", "/m/qwen-0.5b.gguf"


def answer(store, chat_id: int, mode: str, state: str = "done") -> int:
    writer = store.answer_writer(store.start_answer(chat_id))
    writer.append("x")
    message = writer.finish(state, MessageStats(Counts.of_answer(21, 1.0), mode=mode))
    return message.id


def test_stored_plain_runs_of_a_pair_outlive_the_session_and_stopped_ones_do_not_count(tmp_path):
    db = tmp_path / "db.sqlite3"
    with open_store(db) as store:
        chat = store.create_chat("c", ChatSettings(target=TARGET, draft=DRAFT, speculation="baseline"))
        answer(store, chat.id, "baseline")
        answer(store, chat.id, "baseline", state="stopped")  # a part of an answer: not a plain run
        answer(store, chat.id, "baseline")
    with open_store(db) as store:  # the app again, the pair loaded again
        runs = pair_plain_runs(store, TARGET, DRAFT, store.now())
        assert runs.runs == 2 and not runs.enough
        assert pair_plain_runs(store, TARGET, None, store.now()).runs == 0  # another pair's count
        answer(store, chat.id, "baseline")
        spec = answer(store, chat.id, "draft")
        assert pair_plain_runs(store, TARGET, DRAFT, store.now()).runs == 3
        assert plain_reference(store, spec).runs == 3  # the stats line counts the same runs
