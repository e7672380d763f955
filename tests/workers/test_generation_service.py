"""The generation thread, driven as the window drives it, on a real (tiny) model."""

from __future__ import annotations

import sys

import pytest

from specchat.engine import Done, Mode, StopReason, TokensEmitted
from specchat.engine.pair import PairConfig
from specchat.engine.runtime import ModelOptions
from specchat.workers.generation import GenerationService, Started

pytestmark = pytest.mark.real_models
MSGS = ({"role": "user", "content": "Write a long story about a dragon."},)


@pytest.fixture
def service(qtbot, smollm, tmp_path):
    svc = GenerationService()
    with qtbot.waitSignal(svc.pairLoaded, timeout=60_000) as loaded:
        svc.load(PairConfig(smollm, smollm, ModelOptions(n_ctx=1024), calibration_cache=tmp_path / "c.json"))
    info = loaded.args[0]
    assert info.draft == smollm.name
    # the fit estimate split for the memory panel: the same file twice, so equal weights
    shares = {s.label: s for s in info.memory_shares}
    assert shares["target weights"].bytes == shares["draft weights"].bytes > 0
    assert shares["KV caches"].bytes > 0 and sum(s.share for s in info.memory_shares) == pytest.approx(1.0)
    yield svc
    svc.shutdown()


def collect(qtbot, svc, **request):
    events = []
    svc.engineEvent.connect(lambda rid, ev: events.append((rid, ev)))
    rid = svc.submit(**request)
    qtbot.waitUntil(lambda: any(isinstance(ev, Done) for _, ev in events), timeout=60_000)
    return rid, events


def test_an_answer_streams_in_order_and_ends_with_done(qtbot, service):
    rid, events = collect(qtbot, service, messages=MSGS, mode=Mode.DRAFT, max_tokens=20)
    kinds = [type(ev).__name__ for _, ev in events]
    assert kinds[0] == "Started" and kinds[-1] == "Done"
    assert all(r == rid for r, _ in events)
    assert sum(len(ev.token_ids) for _, ev in events if isinstance(ev, TokensEmitted)) == 20


def test_stop_takes_effect_within_one_round(qtbot, service):
    events = []

    def on_event(rid, ev):
        events.append(ev)
        if isinstance(ev, TokensEmitted) and sum(len(e.token_ids) for e in events
                                                  if isinstance(e, TokensEmitted)) >= 5:
            service.cancel()

    service.engineEvent.connect(on_event)
    service.submit(messages=MSGS, mode=Mode.DRAFT, max_tokens=500)
    qtbot.waitUntil(lambda: any(isinstance(ev, Done) for ev in events), timeout=60_000)
    done = events[-1]
    assert done.stop_reason is StopReason.CANCELLED
    assert done.stats.tokens <= 5 + 9  # at most one more round of k_max + 1 tokens


def test_a_new_request_drops_the_old_ones_results(qtbot, service):
    seen = []
    service.engineEvent.connect(lambda rid, ev: seen.append(rid))
    first = service.submit(messages=MSGS, mode=Mode.AUTO, max_tokens=300)
    second = service.submit(messages=({"role": "user", "content": "Hi"},), mode=Mode.AUTO, max_tokens=5)
    qtbot.waitUntil(lambda: second in seen and seen[-1] == second and len(seen) > 2, timeout=60_000)
    qtbot.wait(200)
    assert first not in seen[seen.index(second):]


def test_a_bad_model_file_is_reported_not_raised(qtbot, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    svc = GenerationService()
    try:
        with qtbot.waitSignal(svc.pairFailed, timeout=10_000) as failed:
            svc.load(PairConfig(bad))
        assert "not a GGUF file" in failed.args[0] and "\n" not in failed.args[0]
        # generating without a model gives an error event, not a crash
        rid, events = collect(qtbot, svc, messages=MSGS)
        assert isinstance(events[-1][1], Done) and events[-1][1].stop_reason is StopReason.ERROR
    finally:
        svc.shutdown()


def test_started_says_whether_the_template_opened_a_think_block(qtbot, service):
    _, events = collect(qtbot, service, messages=MSGS, max_tokens=2)
    started = events[0][1]
    assert isinstance(started, Started) and started.prompt_tokens > 5 and started.starts_in_reasoning is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_decoding_thread_yields_to_the_window_and_its_workers_inherit_it():
    """llama.cpp's OpenMP workers start from the generation thread: they must inherit its lower priority."""
    import os
    import threading

    from specchat.workers.generation import lower_this_threads_priority

    seen = {}

    def nice_here() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def generation_thread():
        seen["before"] = nice_here()
        seen["lowered"] = lower_this_threads_priority(3)
        seen["after"] = nice_here()
        child = threading.Thread(target=lambda: seen.__setitem__("child", nice_here()))
        child.start()
        child.join()

    t = threading.Thread(target=generation_thread)
    t.start()
    t.join()
    assert seen["lowered"] and seen["after"] == seen["before"] + 3 == seen["child"]
    assert nice_here() == seen["before"]  # the calling (GUI) thread keeps its priority


def test_a_newer_load_supersedes_one_still_running(qtbot, qwen_target, qwen_draft, smollm, tmp_path):
    """Picking another pair while a big one loads: only the newest pair ever reports."""
    svc = GenerationService()
    loaded = []
    svc.pairLoaded.connect(loaded.append)
    try:
        svc.load(PairConfig(qwen_target, qwen_draft, ModelOptions(n_ctx=1024), calibration_cache=tmp_path / "c.json"))
        svc.load(PairConfig(smollm, None, ModelOptions(n_ctx=256), calibration_cache=tmp_path / "c.json"))
        qtbot.waitUntil(lambda: bool(loaded), timeout=60_000)
        qtbot.wait(300)
        assert [info.target for info in loaded] == [smollm.name]
    finally:
        svc.shutdown()


def test_closing_while_a_pair_loads_ends_the_thread(qtbot, qwen_target, qwen_draft, tmp_path):
    """The app closing mid-load must not leave a running thread behind (Qt aborts on that)."""
    svc = GenerationService()
    loaded = []
    svc.pairLoaded.connect(loaded.append)
    svc.load(PairConfig(qwen_target, qwen_draft, ModelOptions(n_ctx=1024), calibration_cache=tmp_path / "c.json"))
    qtbot.wait(500)  # the load is under way
    svc.shutdown()
    assert svc._thread.isFinished()
    qtbot.wait(100)
    assert loaded == []  # the given-up load never reports
