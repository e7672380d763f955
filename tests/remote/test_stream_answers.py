"""Streamed answers from servers as engine events, against a real HTTP server speaking each
server's documented formats (tests/helpers/fake_openai_server.py; vLLM and SGLang cannot run here)."""

from __future__ import annotations

import threading
import time

import pytest

from helpers.fake_openai_server import FakeServer, Script, wait_for
from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine.answer import AnswerRequest, Started
from specchat.engine.events import Done, Error, Prefilled, RoundStats, StopReason, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.engine.reasoning import split_reasoning
from specchat.remote.errors import ServerError
from specchat.remote.servers import ServerConfig

HELLO = ({"role": "user", "content": "hi"},)
STEPS = ((3, 3), (3, 1), (3, 0), (3, 3), (3, 2))


class FixedKey:
    def __init__(self, key: str = "") -> None:
        self.key = key

    def get(self, name: str) -> str:
        return self.key


def connect(server: FakeServer, key: str = "", model: str = "") -> RemoteBackend:
    return RemoteBackend.connect(RemoteConfig(ServerConfig("fake", server.url, model=model)),
                                 keychain=FixedKey(key))  # type: ignore[arg-type]


def run(backend: RemoteBackend, cancel: CancelToken | None = None, **request) -> list:
    """The answer's engine events, after the ``Started`` every backend's answer begins with."""
    events = list(backend.answer(AnswerRequest(HELLO, **request), cancel or CancelToken()))
    assert isinstance(events[0], Started) and events[0].prompt_tokens == 0
    return events[1:]


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TokensEmitted))


@pytest.mark.parametrize("flavour, engine", [("vllm", "vllm"), ("sglang", "sglang"), ("openai", "openai")])
def test_each_server_is_recognised_by_what_it_answers(flavour, engine):
    with FakeServer(flavour) as server:
        backend = connect(server)
        try:
            assert backend.caps.engine == engine
            assert backend.caps.notes  # every backend says what it cannot report (at least GPU memory)
            assert any("GPU memory" in n for n in backend.caps.notes)
        finally:
            backend.close()


def test_a_vllm_answer_streams_its_reasoning_apart_and_ends_with_the_exact_per_request_acceptance():
    script = Script(reasoning=("Let me", " think."), content=("The", " answer", "."), spec_steps=STEPS,
                    spec_metrics="detailed")
    with FakeServer("vllm", script) as server:
        backend = connect(server)
        try:
            events = run(backend, max_tokens=64)
        finally:
            backend.close()
    split = split_reasoning(text_of(events))
    assert split.reasoning == "Let me think." and split.answer == "The answer."
    assert isinstance(events[0], Prefilled)
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.EOG
    s = done.stats
    assert (s.drafted, s.accepted, s.rounds_with_draft, s.counts.rounds_fully_accepted) == (15, 9, 5, 2)
    assert s.tokens == script.completion_tokens
    body = [r for r in server.requests if r.path == "/v1/chat/completions"][-1].body
    assert body["stream_options"] == {"include_usage": True} and body["model"] == script.model


def test_vllm_counters_polled_while_streaming_become_live_rounds():
    script = Script(content=tuple(f"w{i} " for i in range(12)), spec_steps=STEPS * 2, delay_s=0.12)
    with FakeServer("vllm", script) as server:
        backend = connect(server)
        try:
            assert backend.caps.metrics
            events = run(backend)
        finally:
            backend.close()
    live = [e for e in events if isinstance(e, RoundStats)]
    assert live and sum(r.drafted for r in live) == 30 and sum(r.accepted for r in live) == 18


def test_an_sglang_answer_takes_its_acceptance_from_sglext():
    with FakeServer("sglang", Script(spec_steps=STEPS)) as server:
        backend = connect(server)
        try:
            events = run(backend)
        finally:
            backend.close()
    done = events[-1]
    assert isinstance(done, Done) and done.stats.accepted == 9 and done.stats.drafted == 15
    assert [r for r in server.requests if r.path == "/v1/chat/completions"][-1].body.get(
        "return_spec_tokens_details") is True


def test_a_plain_openai_server_gives_tok_s_and_no_acceptance():
    with FakeServer("openai", Script(content=tuple("abcdefgh"), delay_s=0.01)) as server:
        backend = connect(server)
        try:
            events = run(backend)
        finally:
            backend.close()
    done = events[-1]
    assert text_of(events) == "abcdefgh" and done.stats.token_acceptance is None and done.stats.decode_tok_s


@pytest.mark.parametrize("fault, expect", [
    ({"die_after": 3}, "closed the connection mid-answer"),
    ({"malformed_after": 3}, "malformed chunk"),
    ({"error_chunk": "out of KV cache", "error_after": 3}, "out of KV cache"),
])
def test_a_failure_mid_answer_keeps_the_partial_answer_with_one_line(fault, expect):
    with FakeServer("vllm", Script(content=tuple(f"t{i} " for i in range(10)), **fault)) as server:
        backend = connect(server)
        try:
            events = run(backend)
        finally:
            backend.close()
    errors = [e for e in events if isinstance(e, Error)]
    done = events[-1]
    assert len(errors) == 1 and expect in errors[0].message and "\n" not in errors[0].message
    assert isinstance(done, Done) and done.stop_reason is StopReason.ERROR
    assert text_of(events).startswith("t0 ") and done.stats.tokens >= 1
    assert "partial answer is kept" in errors[0].message


def test_stop_leaves_a_server_that_stopped_sending_at_once_and_closes_the_connection():
    with FakeServer("vllm", Script(content=tuple(f"t{i} " for i in range(10)), hang_after=3)) as server:
        backend = connect(server)
        cancel = CancelToken()
        try:
            threading.Timer(0.5, cancel.cancel).start()
            t0 = time.monotonic()
            events = run(backend, cancel)
            took = time.monotonic() - t0
        finally:
            backend.close()
        assert wait_for(server.client_disconnected, 5.0)
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.CANCELLED and took < 5
    assert not any(isinstance(e, Error) for e in events) and text_of(events).startswith("t0 ")


def test_a_wrong_key_and_an_unknown_model_are_one_line_each():
    with FakeServer("vllm", Script(api_key="right")) as server:
        with pytest.raises(ServerError, match="refused the API key"):
            connect(server, "wrong")
        with pytest.raises(ServerError, match="does not serve model 'nope'"):
            connect(server, "right", model="nope")
        backend = connect(server, "right")
        try:
            assert text_of(run(backend)) == "Hello!"
        finally:
            backend.close()


def test_an_unreachable_server_is_one_line():
    with FakeServer("openai") as server:
        url = server.url
    with pytest.raises(ServerError, match="unreachable") as info:
        RemoteBackend.connect(RemoteConfig(ServerConfig("gone", url)), keychain=FixedKey())  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
