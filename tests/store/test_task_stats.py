"""Per-task statistics: acceptance and multiplier computed from known numbers."""

from __future__ import annotations

import pytest

from specchat.metrics import Counts
from specchat.store import (
    ChatSettings,
    MessageStats,
    open_store,
    plain_reference,
    reset_task_stats,
    task_table,
)
from specchat.store.task_stats import PLAIN_RUNS


def answer(store, chat, state="done", *, tokens, decode_s, mode, **counts):
    """Stream a short answer into ``chat`` and finish it with the given counts."""
    writer = store.answer_writer(store.start_answer(chat.id))
    writer.append("some text")
    stats = MessageStats(Counts.of_answer(tokens, decode_s) + Counts(**counts), mode=mode)
    return writer.finish(state, stats)


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "db.sqlite3") as s:
        yield s


def rows_by_tag(store, **kwargs):
    return {row.tag: row for row in task_table(store, **kwargs)}


def test_acceptance_and_multiplier_from_known_numbers(store):
    code = store.create_chat("code chat", ChatSettings(task="code", target="/m/t.gguf", speculation="draft"))
    # plain: (100 + 50) decoded tokens in (10 + 5) s = 10 tok/s; "off" (the old name) is "baseline"
    answer(store, code, tokens=101, decode_s=10.0, mode="off")
    answer(store, code, tokens=51, decode_s=5.0, mode="baseline")
    answer(store, code, tokens=11, decode_s=1.0, mode="baseline")  # (100 + 50 + 10) in 16 s: still 10 tok/s
    # speculative: (200 + 100) tokens in (10 + 5) s = 20 tok/s -> multiplier 2.0
    answer(store, code, tokens=201, decode_s=10.0, mode="draft", drafted=160, accepted=120,
           rounds_with_draft=40, rounds_fully_accepted=20)
    answer(store, code, tokens=101, decode_s=5.0, mode="lookup", drafted=40, accepted=30,
           rounds_with_draft=10, rounds_fully_accepted=5)
    answer(store, code, tokens=21, decode_s=1.0, mode="auto")  # auto ran plain: (300 + 20) in 16 s, 20 tok/s

    row = rows_by_tag(store)["code"]
    assert (row.answers, row.plain_answers, row.speculative_answers) == (6, 3, 3)
    assert row.tokens == 101 + 51 + 11 + 201 + 101 + 21
    assert row.drafted == 200 and row.accepted == 150
    assert row.token_acceptance == pytest.approx(150 / 200)  # summed counts, not averaged ratios
    assert row.sequence_acceptance == pytest.approx(25 / 50)
    assert row.plain_tok_s == pytest.approx(10.0)
    assert row.speculative_tok_s == pytest.approx(20.0)
    assert row.multiplier == pytest.approx(2.0)


def test_missing_side_gives_no_multiplier_and_tables_are_accumulated_across_chats(store):
    creative = store.create_chat("poem", ChatSettings(task="creative"))
    chat_a = store.create_chat("a", ChatSettings(task="chat"))
    chat_b = store.create_chat("b", ChatSettings(task="chat"))
    mine = store.create_chat("mail", ChatSettings(task="Email replies"))
    answer(store, creative, tokens=11, decode_s=1.0, mode="auto", drafted=10, accepted=2,
           rounds_with_draft=5, rounds_fully_accepted=0)
    answer(store, chat_a, tokens=31, decode_s=2.0, mode="off")
    answer(store, chat_b, tokens=31, decode_s=4.0, mode="off")
    answer(store, mine, tokens=5, decode_s=1.0, mode="off")

    rows = task_table(store)
    assert [r.tag for r in rows] == ["chat", "creative", "Email replies"]  # built-ins first, then the user's
    by_tag = {r.tag: r for r in rows}
    assert by_tag["creative"].multiplier is None and by_tag["creative"].plain_tok_s is None
    assert by_tag["creative"].token_acceptance == pytest.approx(0.2)
    assert by_tag["creative"].sequence_acceptance == 0.0
    assert by_tag["chat"].plain_answers == 2 and by_tag["chat"].plain_tok_s == pytest.approx(60 / 6)
    assert by_tag["chat"].multiplier is None
    assert by_tag["chat"].token_acceptance is None and by_tag["chat"].sequence_acceptance is None


def test_which_answers_count(store):
    chat = store.create_chat("c", ChatSettings(task="json"))
    answer(store, chat, "stopped", tokens=21, decode_s=1.0, mode="off")  # stopped: a real measurement
    answer(store, chat, "error", tokens=21, decode_s=1.0, mode="off")  # errors never count
    answer(store, chat, tokens=1, decode_s=0.0, mode="draft")  # one token: no decode speed
    writer = store.answer_writer(store.start_answer(chat.id))
    writer.finish("done")  # no stats at all
    assert rows_by_tag(store)["json"].answers == 1

    store.delete_chat(chat.id)  # measurements describe the machine and models, not the chat
    assert rows_by_tag(store)["json"].answers == 1
    assert reset_task_stats(store, "json") == 1
    assert task_table(store) == []


def test_the_tag_in_force_when_the_answer_finished_is_used_and_targets_can_be_separated(store):
    chat = store.create_chat("c", ChatSettings(task="chat", target="/m/small.gguf"))
    answer(store, chat, tokens=11, decode_s=1.0, mode="off")
    store.update_settings(chat.id, ChatSettings(task="summary", target="/m/big.gguf"))
    for _ in range(3):
        answer(store, chat, tokens=11, decode_s=2.0, mode="off")
        answer(store, chat, tokens=11, decode_s=1.0, mode="draft", drafted=8, accepted=8,
               rounds_with_draft=2, rounds_fully_accepted=2)

    assert rows_by_tag(store)["chat"].plain_tok_s == pytest.approx(10.0)
    summary = rows_by_tag(store, target="/m/big.gguf")
    assert list(summary) == ["summary"]
    assert summary["summary"].multiplier == pytest.approx(10.0 / 5.0)
    assert summary["summary"].token_acceptance == 1.0 and summary["summary"].sequence_acceptance == 1.0
    assert rows_by_tag(store, target="/m/none.gguf") == {}


def test_every_count_of_an_answer_is_kept_and_pooled(store):
    chat = store.create_chat("c", ChatSettings(task="code"))
    one = Counts.of_answer(41, 2.0, prompt_tokens=30, reused_tokens=10, prefill_s=0.1)
    two = Counts.of_answer(11, 1.0, prompt_tokens=50, prefill_s=0.4)
    for counts, k in ((one, 4), (two, 2)):
        rounds = sum(Counts.of_round(k, k, k - 1, draft_s=0.01, verify_s=0.02, overhead_s=0.001, fallback=False)
                     for _ in range(5))
        writer = store.answer_writer(store.start_answer(chat.id))
        writer.finish("done", MessageStats(counts + rounds, mode="auto"))
    row = rows_by_tag(store)["code"]
    pooled = row.speculative
    assert pooled.k_sum == 5 * 4 + 5 * 2 and pooled.mean_k == 3.0
    assert pooled.rounds == 10 and pooled.verify_s == pytest.approx(0.2)
    assert pooled.prefill_tok_s == pytest.approx((20 + 50) / 0.5)  # reused prompt tokens cost nothing
    assert row.speculative_tok_s == pytest.approx((40 + 10) / 3.0)


def test_reasoning_and_answer_phases_are_pooled_apart_for_speculative_answers(store):
    from specchat.metrics import PhaseSplit

    chat = store.create_chat("think", ChatSettings(task="chat", speculation="draft"))
    split = PhaseSplit(Counts(tokens=30, decoded=30, decode_s=3.0, drafted=40, accepted=10, rounds=20,
                              rounds_with_draft=20),
                       Counts(tokens=40, decoded=40, decode_s=2.0, drafted=40, accepted=30, rounds=10,
                              rounds_with_draft=10))
    for mode in ("draft", "auto", "baseline"):  # the plain answer's phases do not count for acceptance
        writer = store.answer_writer(store.start_answer(chat.id))
        writer.append("<think>hm</think>yes")
        writer.finish("done", MessageStats(Counts.of_answer(71, 5.0) + Counts(drafted=80, accepted=40),
                                           mode=mode, phases=split))
    row = rows_by_tag(store)["chat"]
    assert row.phases.reasoning.token_acceptance == pytest.approx(20 / 80)
    assert row.phases.answer.token_acceptance == pytest.approx(60 / 80)
    assert row.phases.reasoning.decode_tok_s == pytest.approx(60 / 6.0)
    assert row.phases.answer.decode_tok_s == pytest.approx(80 / 4.0)
    [stored] = [m for m in store.messages(chat.id)][:1]
    assert stored.stats is not None and stored.stats.phases == split  # kept with the message too
    assert reset_task_stats(store, "chat") == 3
    assert store.connection.execute("SELECT count(*) FROM task_phase_runs").fetchone()[0] == 0


def test_an_answer_compares_with_the_plain_runs_of_its_own_pair_nearest_in_time(tmp_path):
    t = [1000.0]
    with open_store(tmp_path / "db.sqlite3", now=lambda: t[0]) as store:
        pair = dict(target="/m/t.gguf", draft="/m/d.gguf")
        plain = store.create_chat("plain", ChatSettings(speculation="baseline", **pair))
        spec = store.create_chat("spec", ChatSettings(speculation="draft", **pair))
        other = store.create_chat("other pair", ChatSettings(speculation="baseline", target="/m/big.gguf",
                                                             draft="/m/d.gguf"))
        for _ in range(5):  # another target's plain runs never count
            answer(store, other, tokens=11, decode_s=0.1, mode="baseline")
        answer(store, plain, tokens=11, decode_s=1.0, mode="baseline")  # 10 tok/s
        first = answer(store, spec, tokens=31, decode_s=1.0, mode="draft")  # 30 tok/s
        ref = plain_reference(store, first.id)
        assert ref is not None and ref.runs == 1 and not ref.enough
        assert ref.multiplier(30.0) is None and ref.spread(30.0) is None  # one plain run is no reference
        t[0] += 10
        answer(store, plain, tokens=11, decode_s=2.0, mode="baseline")  # 5 tok/s
        answer(store, plain, tokens=21, decode_s=2.0, mode="baseline")  # 10 tok/s
        ref = plain_reference(store, first.id)
        assert ref.runs == 3 and ref.enough
        assert ref.multiplier(30.0) == pytest.approx(30.0 / (40 / 5.0))  # pooled: 40 tokens in 5 s
        assert ref.spread(30.0) == pytest.approx((3.0, 6.0))
        t[0] += 100_000
        for _ in range(PLAIN_RUNS):  # a day later the machine is slower: 2 tok/s
            answer(store, plain, tokens=3, decode_s=1.0, mode="baseline")
        late = answer(store, spec, tokens=31, decode_s=5.0, mode="draft")  # 6 tok/s
        assert plain_reference(store, late.id).rates == (2.0,) * PLAIN_RUNS  # the nearest in time
        assert sorted(plain_reference(store, first.id).rates[:3]) == [5.0, 10.0, 10.0]
        assert plain_reference(store, answer(store, plain, tokens=11, decode_s=1.0, mode="baseline").id) is None


def test_the_drafters_and_notes_of_an_answer_are_stored_with_it(store):
    chat = store.create_chat("c", ChatSettings(speculation="auto", target="/m/t.gguf"))
    stats = MessageStats(Counts.of_answer(11, 1.0) + Counts(drafted=8, accepted=6), mode="auto",
                         drafters=(("lookup", 8, 6),), notes=("the draft model cannot pay here, best case 0.80x",))
    stored = answer_with(store, chat, stats)
    assert stored.stats == stats
    assert MessageStats.from_json(stats.to_json()) == stats


def answer_with(store, chat, stats):
    writer = store.answer_writer(store.start_answer(chat.id))
    writer.append("some text")
    return writer.finish("done", stats)


def test_a_multiplier_rests_on_three_runs_a_side_and_two_targets_never_pool(store):
    """One plain run is noise (a walk-through saw a per-task 2.09x that was 0.99x fifteen minutes
    later): under three answers a side there is no multiplier, and two targets are two rows."""
    small = store.create_chat("s", ChatSettings(task="code", target="/m/small.gguf"))
    big = store.create_chat("b", ChatSettings(task="code", target="/m/big.gguf"))
    answer(store, small, tokens=11, decode_s=1.0, mode="baseline")
    answer(store, small, tokens=21, decode_s=1.0, mode="draft", drafted=8, accepted=8)
    for _ in range(2):  # the big target: 3 plain answers at 5 tok/s, 2 speculative at 10 tok/s
        answer(store, big, tokens=11, decode_s=2.0, mode="baseline")
        answer(store, big, tokens=11, decode_s=1.0, mode="draft", drafted=8, accepted=8)
    answer(store, big, tokens=11, decode_s=2.0, mode="baseline")

    rows = {(r.tag, r.target): r for r in task_table(store)}
    assert set(rows) == {("code", "/m/big.gguf"), ("code", "/m/small.gguf")}  # never one pooled "code" row
    one = rows["code", "/m/small.gguf"]
    assert (one.plain_answers, one.speculative_answers, one.multiplier) == (1, 1, None)
    assert one.plain_tok_s == pytest.approx(10.0)  # the speeds themselves are shown
    two = rows["code", "/m/big.gguf"]
    assert (two.plain_answers, two.speculative_answers, two.multiplier) == (3, 2, None)
    answer(store, big, tokens=11, decode_s=1.0, mode="draft", drafted=8, accepted=8)
    assert rows_by_tag(store, target="/m/big.gguf")["code"].multiplier == pytest.approx(2.0)


def test_runs_measured_on_a_busy_machine_are_left_out_of_the_figures_and_counted(store):
    """Issue 38: a run keeps the machine's verdict; the multiplier rests on the quiet (and the not judged) ones."""
    chat = store.create_chat("c", ChatSettings(task="code", target="/m/t.gguf", speculation="draft"))

    def run(mode, tok_s, busy):
        writer = store.answer_writer(store.start_answer(chat.id))
        writer.append("text")
        writer.finish("done", MessageStats(Counts.of_answer(101, 100 / tok_s), mode=mode, busy=busy,
                                           busy_why="other work kept 1.6 of 2 cores busy" if busy else ""))

    for busy in (False, None, False):  # quiet, not judged (an older SpecChat), quiet: 10 tok/s
        run("baseline", 10.0, busy)
        run("draft", 20.0, busy)
    for _ in range(3):  # other work on the cores: the plain runs crawl, the speculative ones crawl less
        run("baseline", 2.0, True)
    run("draft", 3.0, True)
    row = rows_by_tag(store)["code"]
    assert (row.plain_answers, row.speculative_answers, row.busy_runs) == (3, 3, 4)
    assert row.plain_tok_s == pytest.approx(10.0) and row.multiplier == pytest.approx(2.0)
    # a pair's plain reference leaves them out too
    spec = [m for m in store.messages(chat.id) if m.role == "assistant"][1]
    assert plain_reference(store, spec.id).rates == pytest.approx((10.0, 10.0, 10.0))
    stored = store.connection.execute("SELECT busy, count(*) FROM task_runs GROUP BY busy ORDER BY busy").fetchall()
    assert [tuple(r) for r in stored] == [(None, 2), (0, 4), (1, 4)]
