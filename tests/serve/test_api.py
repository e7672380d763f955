"""specchat serve against real clients: the official ``openai`` package, raw HTTP (httpx2, sockets) and
SpecChat's own remote backend, over the fake pair (the real generation loop, no llama.cpp work)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest

from helpers.fakes import FakeSpec, fake_pair
from specchat.backends.local import LocalBackend
from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine.answer import AnswerRequest, Started
from specchat.engine.events import Done, StopReason, TokensEmitted
from specchat.engine.pair import CancelToken, PairConfig
from specchat.engine.settings import Mode
from specchat.remote.servers import ServerConfig
from specchat.serve.http import Api, ApiServer, Limits
from specchat.serve.lane import BackendLane

HELLO = [{"role": "user", "content": "hello there"}]
SPEC = FakeSpec()
LIMITS = Limits()


class Recording:
    """The backend, with the end of every answer it gave kept."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.ends: list[Done] = []

    @property
    def info(self):
        return self.backend.info

    def answer(self, request, cancel):
        for ev in self.backend.answer(request, cancel):
            if isinstance(ev, Done):
                self.ends.append(ev)
            yield ev

    def close(self) -> None:
        self.backend.close()


class Served:
    def __init__(self, spec: FakeSpec = SPEC, *, key: str = "", waiting: int = 8,
                 limits: Limits = LIMITS, mode: Mode = Mode.AUTO) -> None:
        pair = fake_pair(PairConfig(Path("target.gguf"), Path("draft.gguf")), spec)
        self.backend = Recording(LocalBackend(pair))
        self.lane = BackendLane(self.backend, mode=mode, waiting=waiting)  # type: ignore[arg-type]
        self.api = Api(self.lane, api_key=key, limits=limits)
        self.server = ApiServer(self.api, "127.0.0.1", 0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.lane.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.stop()
        self.thread.join(10)
        self.backend.close()

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=30)


def direct_text(spec: FakeSpec = SPEC, messages=HELLO, mode: Mode = Mode.AUTO) -> str:
    """What the same pair answers without the server (as ``specchat chat`` gets it)."""
    backend = LocalBackend(fake_pair(PairConfig(Path("target.gguf"), Path("draft.gguf")), spec))
    try:
        events = list(backend.answer(AnswerRequest(tuple(messages), mode=mode), CancelToken()))
    finally:
        backend.close()
    return "".join(ev.answer for ev in events if isinstance(ev, TokensEmitted))


def test_the_openai_package_gets_the_same_answer_as_the_pair_itself_with_what_speculation_did():
    with Served() as s:
        models = s.client().models.list()
        assert [m.id for m in models.data] == ["target.gguf"]
        r = s.client().chat.completions.create(model="target.gguf", messages=HELLO, max_tokens=200)
    assert r.choices[0].message.content == direct_text()
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 120 and r.usage.prompt_tokens > 0
    spec = r.model_extra["specchat"]
    assert spec["mode"] == "auto" and spec["drafted"] >= spec["accepted"] > 0
    details = r.usage.completion_tokens_details
    assert details.accepted_prediction_tokens == spec["accepted"]
    assert details.rejected_prediction_tokens == spec["drafted"] - spec["accepted"]


def test_a_stream_gives_the_same_text_and_ends_with_the_usage_when_asked():
    with Served() as s:
        chunks = list(s.client().chat.completions.create(
            model="x", messages=HELLO, stream=True, stream_options={"include_usage": True},
            extra_body={"specchat": {"mode": "lookup"}}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == direct_text(mode=Mode.LOOKUP)
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 120
    assert chunks[-1].model_extra["specchat"]["mode"] == "lookup"


def test_max_tokens_and_stop_strings_end_the_answer_as_openai_says():
    with Served() as s:
        short = s.client().chat.completions.create(model="x", messages=HELLO, max_completion_tokens=7)
        full = direct_text()
        word = full[20:26]
        stopped = s.client().chat.completions.create(model="x", messages=HELLO, stop=[word])
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 7
    assert stopped.choices[0].message.content == full[:full.index(word)]
    assert stopped.choices[0].finish_reason == "stop"


RAW = "<|im_start|>user\nonce upon a time<|im_end|>\n<|im_start|>assistant\n"  # the fake answers after this


def test_completions_take_a_raw_prompt_streamed_and_not():
    with Served() as s:
        whole = s.client().completions.create(model="x", prompt=RAW, max_tokens=10)
        parts = list(s.client().completions.create(model="x", prompt=RAW, max_tokens=10, stream=True))
    assert whole.object == "text_completion" and whole.usage.completion_tokens == 10
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text


def post(url: str, body: bytes | str, **headers) -> httpx2.Response:
    data = body.encode() if isinstance(body, str) else body
    return httpx2.post(url, content=data, headers={"content-type": "application/json", **headers}, timeout=30)


@pytest.mark.parametrize(("body", "status", "names"), [
    ("{not json", 400, "not JSON"),
    ('{"messages": []}', 400, "messages"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400, "temperature"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e999}', 400, "temperature"),
    ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}', 400, "max_tokens"),
    ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": true}', 400, "max_tokens"),
    ('{"messages": [{"role": "tool", "content": "hi"}]}', 400, "role"),
    ('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, "text parts"),
    ('{"messages": [{"role": "user", "content": "hi"}], "n": 3}', 400, "n must be 1"),
    ('{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}', 400, "tools"),
    ('{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}', 400, "response_format"),
    ('{"messages": [{"role": "user", "content": "hi"}], "specchat": {"mode": "turbo"}}', 400, "specchat.mode"),
    ('{"messages": [{"role": "user", "content": "hi"}], "stop": [""]}', 400, "stop"),
    ("[" * 5000 + "]" * 5000, 400, "nested deeper"),
    ('"just a string"', 400, "JSON object"),
])
def test_a_bad_request_gets_an_openai_error_object_naming_what_is_wrong(body, status, names):
    with Served() as s:
        r = post(s.url + "/chat/completions", body)
        assert r.status_code == status
        error = r.json()["error"]
        assert names in error["message"] and error["type"] == "invalid_request_error"
        # and the server goes on answering
        ok = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=3)
        assert ok.usage.completion_tokens == 3


def test_a_body_over_the_cap_is_refused_before_it_is_read_whole():
    with Served(limits=Limits(max_body=1 << 20)) as s:
        big = json.dumps({"messages": [{"role": "user", "content": "x" * (10 << 20)}]})
        r = post(s.url + "/chat/completions", big)
        assert r.status_code == 413 and "over 1 MiB" in r.json()["error"]["message"]
        # a body that says nothing of its length (chunked) is cut at the cap too
        r = httpx2.post(s.url + "/chat/completions", content=iter([b"x" * (256 << 10)] * 8), timeout=30)
        assert r.status_code == 413


def test_unknown_routes_wrong_methods_and_missing_keys_are_error_objects():
    with Served(key="sekrit") as s:
        assert httpx2.get(s.url + "/nope").status_code == 404
        assert httpx2.get(s.url + "/chat/completions").json()["error"]["message"].startswith("method not allowed")
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").chat.completions.create(model="x", messages=HELLO)
        r = s.client("sekrit").chat.completions.create(model="x", messages=HELLO, max_tokens=2)
        assert r.usage.completion_tokens == 2
        assert httpx2.get(s.url.removesuffix("/v1") + "/health").json() == {"status": "ok"}


def test_a_flood_beyond_the_line_gets_429_with_retry_after_and_every_accepted_request_is_answered_once():
    spec = FakeSpec(answer_tokens=30, decode_s=0.01)
    with Served(spec, waiting=3) as s:
        results: list[httpx2.Response] = []
        lock = threading.Lock()

        def ask(i: int) -> None:
            r = post(s.url + "/chat/completions", json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}))
            with lock:
                results.append(r)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    ok = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code == 429]
    assert len(ok) + len(refused) == 12 and refused and len(ok) >= 4
    assert all(r.headers["retry-after"] == "2" and r.json()["error"]["code"] == "queue_full" for r in refused)
    ids = [r.json()["id"] for r in ok]
    assert len(set(ids)) == len(ids)
    # the backend answered exactly the accepted ones, each to its end
    assert len(s.backend.ends) == len(ok) and all(e.stop_reason is StopReason.EOG for e in s.backend.ends)


def _raw_stream(url: str, body: dict) -> socket.socket:
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    sock = socket.create_connection((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def _wait(predicate, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_client_that_vanishes_mid_stream_cancels_its_answer_and_the_next_is_answered():
    spec = FakeSpec(answer_tokens=2000, decode_s=0.01, n_ctx=4096)
    with Served(spec) as s:
        sock = _raw_stream(s.url, {"messages": HELLO, "stream": True, "max_tokens": 2000})
        got = b""
        while got.count(b"data: ") < 3:
            got += sock.recv(4096)
        sock.close()
        _wait(lambda: len(s.backend.ends) == 1)
        assert s.backend.ends[0].stop_reason is StopReason.CANCELLED
        assert s.backend.ends[0].stats.counts.tokens < 2000
        r = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=5)
        assert r.usage.completion_tokens == 5
        _wait(lambda: any(rec.stop == "disconnected" for rec in s.api.traffic.recent))


def test_a_client_that_vanishes_while_waiting_in_line_is_never_answered():
    spec = FakeSpec(answer_tokens=300, decode_s=0.01)
    with Served(spec) as s:
        first = _raw_stream(s.url, {"messages": HELLO, "stream": True})
        _wait(lambda: first.recv(1) != b"")  # the first answer streams
        waiting = _raw_stream(s.url, {"messages": [{"role": "user", "content": "later"}], "max_tokens": 50})
        _wait(lambda: s.lane.waiting == 1)
        waiting.close()
        _wait(lambda: any(rec.status == 499 for rec in s.api.traffic.recent))
        first.close()
        _wait(lambda: len(s.backend.ends) == 1)
        ok = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=4)
        assert ok.usage.completion_tokens == 4
        assert len(s.backend.ends) == 2  # the vanished one was skipped, not answered


def test_specchats_own_remote_backend_chats_with_specchats_server():
    with Served() as s:
        backend = RemoteBackend.connect(RemoteConfig(ServerConfig("another-specchat", s.url.removesuffix("/v1"))))
        try:
            events = list(backend.answer(AnswerRequest(tuple(HELLO)), CancelToken()))
        finally:
            backend.close()
    assert isinstance(events[0], Started)
    assert "".join(ev.answer for ev in events if isinstance(ev, TokensEmitted)) == direct_text()
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.EOG


def test_a_chat_on_another_specchat_keeps_its_mode_and_reads_what_speculation_did():
    with Served() as s:
        backend = RemoteBackend.connect(RemoteConfig(ServerConfig("another-specchat", s.url.removesuffix("/v1"))))
        try:
            assert backend.caps.engine == "specchat" and backend.caps.n_ctx == 2048
            plain = list(backend.answer(AnswerRequest(tuple(HELLO), mode=Mode.BASELINE), CancelToken()))
            drafted = list(backend.answer(AnswerRequest(tuple(HELLO), mode=Mode.DRAFT), CancelToken()))
        finally:
            backend.close()
    assert [e.stats.mode for e in s.backend.ends] == ["baseline", "draft"]  # each request ran in its chat's mode
    assert not any(type(ev).__name__ == "Fallback" for ev in plain)  # no "cannot turn drafting off" note
    mine = drafted[-1].stats.counts
    theirs = s.backend.ends[1].stats.counts
    assert (mine.drafted, mine.accepted) == (theirs.drafted, theirs.accepted) and theirs.drafted > 0
    assert plain[-1].stats.counts.drafted == 0


def test_a_stream_held_open_and_never_read_does_not_hold_up_the_next_client():
    spec = FakeSpec(answer_tokens=3000, n_ctx=4096)
    with Served(spec) as s:
        held = _raw_stream(s.url, {"messages": HELLO, "stream": True, "max_tokens": 3000})  # never read
        _wait(lambda: len(s.backend.ends) == 1)  # its answer was given whole, into a stream nobody reads
        r = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=5)
        assert r.usage.completion_tokens == 5
        held.close()


def test_cache_prompt_false_prefills_the_prompt_whole_and_usage_says_what_was_reused():
    with Served() as s:
        first = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=4)
        again = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=4)
        fresh = s.client().chat.completions.create(model="x", messages=HELLO, max_tokens=4,
                                                   extra_body={"cache_prompt": False})
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert 0 < again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert fresh.choices[0].message.content == again.choices[0].message.content
