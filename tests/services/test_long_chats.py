"""A chat that outgrows a 512-token context, for 20 turns under each context policy, on the fake pair
through the generation thread and the answer service (what the window runs)."""

from __future__ import annotations

import pytest

from helpers.fakes import FakePairFactory, FakeSpec
from specchat.context_policy import ContextPolicy, reserve
from specchat.engine.pair import PairConfig
from specchat.engine.runtime import ModelOptions
from specchat.services.answers import AnswerService
from specchat.store import ChatSettings, open_store
from specchat.workers.generation import GenerationService

N_CTX = 512
MAX_TOKENS = 60
TURNS = 20
SYSTEM = "You answer briefly."
FIRST = "turn 0: what is speculative decoding?"


def question(i: int) -> str:
    return FIRST if i == 0 else f"turn {i}: and what happens next in the loop?"


def run_chat(qtbot, tmp_path, policy: ContextPolicy):
    """20 turns; returns (the stored messages, the error lines, the prompt text sent each turn)."""
    store = open_store(tmp_path / "db.sqlite3")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.touch()
    draft.touch()
    settings = ChatSettings(target=target, draft=draft, speculation="draft", max_tokens=MAX_TOKENS,
                            system_prompt=SYSTEM, context_policy=policy.value)
    chat = store.create_chat("long", settings).id
    factory = FakePairFactory(FakeSpec(answer_tokens=40, n_ctx=N_CTX))
    gen = GenerationService(factory)
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, s.draft,
                                                              target_options=ModelOptions(n_ctx=N_CTX)))
    lines, finished, sent = [], [], []
    answers.notice.connect(lambda n: lines.append(n.text) if n.error else None)
    answers.finished.connect(lambda _chat, stored: finished.append(stored))
    try:
        for i in range(TURNS):
            store.add_message(chat, "user", question(i))
            answers.ask(chat)
            qtbot.waitUntil(lambda n=i + 1: len(finished) == n, timeout=10_000)
            # what the target holds now: the prompt it was sent and its answer (the thread is idle)
            sent.append(bytes(t for t in factory.pairs[-1].target.tokens if t < 256).decode())
        return store.messages(chat), lines, sent
    finally:
        answers.shutdown()
        gen.shutdown()
        store.close()


def test_stop_ends_in_context_full_with_one_line_and_keeps_every_message(qtbot, tmp_path):
    messages, lines, _sent = run_chat(qtbot, tmp_path, ContextPolicy.STOP)
    assert len(messages) == 2 * TURNS  # nothing is lost: every question and every (failed) answer
    answers = [m for m in messages if m.role == "assistant"]
    assert answers[0].state == "done" and answers[0].stats.stop_reason == "eog"
    failed = [i for i, m in enumerate(answers) if m.state == "error"]
    assert failed and failed == list(range(failed[0], TURNS))  # once full, it stays full
    # before that, the answer that ran into the end of the context says so
    assert any(m.stats.stop_reason == "context_full" for m in answers[:failed[0]])
    assert len(lines) == len(failed)  # one line per refused answer, naming the context
    assert all("\n" not in line and f"the context holds {N_CTX}" in line for line in lines)
    # what was decoded fitted (the last token is sampled, not decoded: prompt + tokens - 1 in the cache)
    assert all(m.stats.prompt_tokens + m.stats.tokens - 1 <= N_CTX for m in answers if m.state == "done")


@pytest.mark.parametrize("policy", [ContextPolicy.TRUNCATE_MIDDLE, ContextPolicy.ROLLING_WINDOW])
def test_a_policy_keeps_answering_all_20_turns_within_the_context_and_loses_nothing(qtbot, tmp_path, policy):
    messages, lines, sent = run_chat(qtbot, tmp_path, policy)
    assert len(messages) == 2 * TURNS and not lines
    assert [m.content for m in messages if m.role == "user"] == [question(i) for i in range(TURNS)]
    answers = [m for m in messages if m.role == "assistant"]
    assert all(m.state == "done" and m.stats.stop_reason == "eog" and m.stats.tokens == 40 for m in answers)
    # the prompt sent always leaves the answer its reserve, and the context is never exceeded
    assert all(m.stats.prompt_tokens <= N_CTX - reserve(N_CTX, MAX_TOKENS) for m in answers)
    assert all(m.stats.n_ctx == N_CTX and m.stats.prompt_tokens + m.stats.tokens <= N_CTX for m in answers)
    # the chat outgrew the context: later answers left its oldest turns out, and say how many
    assert answers[0].stats.left_out == 0 and answers[-1].stats.left_out > 0
    assert all(m.stats.left_out % 2 == 0 for m in answers)  # whole turns: a question with its answer
    assert all(SYSTEM in text and question(i) in text for i, text in enumerate(sent))  # the turn asked
    assert question(1) not in sent[-1]  # an old turn went
    if policy is ContextPolicy.TRUNCATE_MIDDLE:
        assert all(FIRST in text for text in sent)
    else:
        assert FIRST not in sent[-1]
    # the kept start is reused from the KV cache (the system prompt at least), not prefilled again
    assert all(m.stats.reused_tokens >= len(SYSTEM) for m in answers[1:])


def test_an_answer_that_fills_the_context_stops_there_and_the_next_turn_applies_the_policy(qtbot, tmp_path):
    """A max_tokens over half the context leaves less room than the answer wants: that answer stops as
    context full (as under stop), and the next turn leaves the full turn out and answers whole."""
    store = open_store(tmp_path / "db.sqlite3")
    target = tmp_path / "t.gguf"
    target.touch()
    chat = store.create_chat("long", ChatSettings(target=target, speculation="baseline", max_tokens=400,
                                                  context_policy="rolling_window")).id
    gen = GenerationService(FakePairFactory(FakeSpec(answer_tokens=300, n_ctx=N_CTX)))
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, None))
    finished = []
    answers.finished.connect(lambda _chat, stored: finished.append(stored))
    try:
        for i, text in enumerate(("paste: " + "lorem ipsum " * 20, "and now a short one?")):
            store.add_message(chat, "user", text)
            answers.ask(chat)
            qtbot.waitUntil(lambda n=i + 1: len(finished) == n, timeout=10_000)
        first, second = finished
        assert first.state == "done" and first.stats.stop_reason == "context_full" and first.stats.left_out == 0
        assert second.state == "done" and second.stats.stop_reason == "eog" and second.stats.tokens == 300
        assert second.stats.left_out == 2 and len(store.messages(chat)) == 4
    finally:
        answers.shutdown()
        gen.shutdown()
        store.close()
