"""Closing never hangs: the generation thread ends within 2 s while a chat template renders,
while a pair loads and while an answer streams (the fake pair; seconds in all)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from llama_cpp.llama_chat_format import CHATML_CHAT_TEMPLATE

from helpers.fakes import LOOPS, FakePairFactory, FakeSpec, TemplateFactory
from specchat.engine import Done, Error, StopReason, TokensEmitted, chat
from specchat.engine.pair import PairConfig
from specchat.services.answers import AnswerService
from specchat.store import ChatSettings, open_store
from specchat.workers.generation import GenerationService

CLOSE_S = 2.0  # the promise: the app's close returns within 2 s in every state
MSGS = ({"role": "user", "content": "hello"},)


@pytest.fixture(autouse=True)
def _no_render_deadline(monkeypatch):
    """The render deadline (2 s) would end a looping template by itself: only a cancel may here."""
    monkeypatch.setattr(chat, "RENDER_SECONDS", 600.0)


def loaded_service(qtbot, factory: FakePairFactory) -> GenerationService:
    svc = GenerationService(factory)
    with qtbot.waitSignal(svc.pairLoaded, timeout=5_000):
        svc.load(PairConfig(Path("slow.gguf")))
    return svc


def closes_in_time(svc: GenerationService) -> float:
    t0 = time.monotonic()
    svc.shutdown()
    took = time.monotonic() - t0
    assert svc._thread.isFinished()
    print(f"shut down in {took:.2f} s")
    assert took < CLOSE_S, f"shutdown took {took:.1f} s"
    return took


def test_shutdown_while_a_template_renders(qtbot):
    svc = loaded_service(qtbot, TemplateFactory(LOOPS))
    svc.submit(messages=MSGS)
    qtbot.wait(300)  # the worker is inside the template's loops
    closes_in_time(svc)


def test_stop_while_a_template_renders_ends_the_answer_as_cancelled(qtbot):
    svc = loaded_service(qtbot, TemplateFactory(LOOPS))
    events = []
    svc.engineEvent.connect(lambda rid, ev: events.append(ev))
    try:
        svc.submit(messages=MSGS)
        qtbot.wait(300)
        svc.cancel()
        qtbot.waitUntil(lambda: any(isinstance(ev, Done) for ev in events), timeout=1_000)
        assert events[-1].stop_reason is StopReason.CANCELLED and not any(isinstance(e, Error) for e in events)
    finally:
        svc.shutdown()


def test_a_failing_template_ends_the_answer_with_one_line_and_the_pair_stays(qtbot):
    factory = TemplateFactory("{% if messages|length > 1 %}{{ raise_exception('one user turn only') }}{% endif %}"
                              + CHATML_CHAT_TEMPLATE)
    svc = loaded_service(qtbot, factory)
    events = []
    svc.engineEvent.connect(lambda rid, ev: events.append(ev))
    try:
        svc.submit(messages=MSGS * 2)
        qtbot.waitUntil(lambda: any(isinstance(ev, Done) for ev in events), timeout=2_000)
        error, done = events[-2:]
        assert error == Error("slow.gguf: its chat template raised: one user turn only")
        assert done.stop_reason is StopReason.ERROR and done.message == error.message
        events.clear()
        svc.submit(messages=MSGS)  # the same pair answers the next request
        qtbot.waitUntil(lambda: any(isinstance(ev, Done) for ev in events), timeout=5_000)
        assert events[-1].stop_reason is StopReason.EOG and any(isinstance(e, TokensEmitted) for e in events)
        assert len(factory.loads) == 1
    finally:
        svc.shutdown()


def test_shutdown_while_a_pair_loads(qtbot):
    svc = GenerationService(FakePairFactory(FakeSpec(load_s=30)))
    loaded = []
    svc.pairLoaded.connect(loaded.append)
    svc.load(PairConfig(Path("big.gguf")))
    qtbot.wait(200)
    closes_in_time(svc)
    assert loaded == []


def test_shutdown_while_an_answer_streams(qtbot):
    svc = loaded_service(qtbot, FakePairFactory(FakeSpec(answer_tokens=100_000, decode_s=0.005)))
    events = []
    svc.engineEvent.connect(lambda rid, ev: events.append(ev))
    svc.submit(messages=MSGS, max_tokens=100_000)
    qtbot.waitUntil(lambda: any(isinstance(ev, TokensEmitted) for ev in events), timeout=5_000)
    closes_in_time(svc)


def test_the_answer_service_keeps_the_chat_when_closing_during_a_render(qtbot, tmp_path):
    store = open_store(tmp_path / "db.sqlite3")
    target = tmp_path / "slow.gguf"
    target.touch()
    chat_id = store.create_chat("c", ChatSettings(target=target, draft=None, speculation="baseline")).id
    store.add_message(chat_id, "user", "hello")
    gen = GenerationService(TemplateFactory(LOOPS))
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, s.draft))
    answers.ask(chat_id)
    qtbot.waitUntil(lambda: answers.current is not None and answers.current.writer is not None, timeout=5_000)
    qtbot.wait(300)  # rendering
    t0 = time.monotonic()
    answers.shutdown()
    gen.shutdown()
    assert time.monotonic() - t0 < CLOSE_S
    msgs = store.messages(chat_id)
    assert [(m.role, m.state) for m in msgs] == [("user", None), ("assistant", "stopped")]
    store.close()
