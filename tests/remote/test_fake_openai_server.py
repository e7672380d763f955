"""The fake server is faithful to the fixtures (so the client's fast tests test against what real
servers send), and its faults fail the way a real broken server does."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import httpx2
import pytest
from test_counters import STEPS, sse_events

from helpers.fake_openai_server import FakeServer, Script, wait_for
from specchat.remote.counters import delta, parse_metrics, sglang_request_spec, vllm_chunk_spec

MODEL = "Qwen/Qwen3-8B"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "stream_options": {"include_usage": True}}
SPEC = Script(reasoning=("The user", " greets me;"), content=("Hello", "! How can", " I help", " you today?", ""),
              spec_steps=STEPS)


def stream(server: FakeServer, body: dict | None = None, headers: dict | None = None) -> tuple[list, bool]:
    """The JSON payloads of a streamed answer, and whether it ended with [DONE]."""
    events, done = [], False
    with httpx2.Client(timeout=5) as client, client.stream("POST", f"{server.url}/v1/chat/completions",
                                                           json=body or CHAT, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events, done


def shape(chunk: dict) -> tuple:
    """A chunk's keys, and its choice's and delta's, values aside."""
    choices = chunk.get("choices") or [{}]
    return (tuple(sorted(chunk)), tuple(sorted(choices[0])), tuple(sorted(choices[0].get("delta", {}))))


@pytest.mark.parametrize("mode", ["summary", "detailed"])
def test_vllm_stream_matches_the_fixture(mode):
    fixture = sse_events(f"vllm_chat_stream_{mode}.sse")
    script = replace(SPEC, spec_metrics=mode, per_request_metrics=mode == "detailed")
    with FakeServer("vllm", script) as server:
        events, done = stream(server)
    assert done
    assert vllm_chunk_spec(events[-1]) == vllm_chunk_spec(fixture[-1])
    assert [i for i, e in enumerate(events) if "metrics" in e] == [len(events) - 1]
    assert {shape(c) for c in events} <= {shape(c) for c in fixture}  # no key the real server lacks
    assert events[-1]["metrics"] == fixture[-1]["metrics"]


def test_sglang_stream_matches_the_fixture():
    fixture = sse_events("sglang_chat_stream.sse")
    with FakeServer("sglang", SPEC) as server:
        events, done = stream(server, {**CHAT, "return_spec_tokens_details": True})
    assert done
    carriers = [i for i, e in enumerate(events) if e.get("sglext")]
    assert carriers == [len(events) - 2] and events[-1].get("usage")  # sglext, then usage, as SGLang sends
    fixture_spec = next(sglang_request_spec(c) for c in fixture if c.get("sglext"))
    assert sglang_request_spec(events[carriers[0]]) == fixture_spec
    assert any(c["choices"] and c["choices"][0]["delta"]["reasoning_content"] for c in events)
    assert {shape(c) for c in events} <= {shape(c) for c in fixture}


def scrape(client: httpx2.Client, server: FakeServer):
    return parse_metrics(client.get(f"{server.url}/metrics").text, "fake")


def test_vllm_metrics_advance_while_chunks_are_sent():
    # 7 pieces carry the 8 steps; after the role chunk and 3 pieces, 3 steps are out (3 * 8 // 7)
    with FakeServer("vllm", replace(SPEC, hang_after=4)) as server, httpx2.Client(timeout=5) as client:
        before = scrape(client, server).spec
        with client.stream("POST", f"{server.url}/v1/chat/completions", json=CHAT) as response:
            # Hold the iterator: httpx2 closes the response (and the connection) in a finally when an
            # abandoned line iterator is collected, which the GC may do at any moment of the wait below.
            lines = response.iter_lines()
            received = 0
            for line in lines:
                received += line.startswith("data: ")
                if received == 4:
                    break
            deadline = time.monotonic() + 5  # generous: CI runs this on two busy cores
            while ((middle := scrape(client, server)).spec.drafts == before.drafts
                   or middle.requests_running != 1.0) and time.monotonic() < deadline:
                time.sleep(0.02)
        assert middle.requests_running == 1.0
        moved = delta(before, middle.spec)
        assert moved is not None and moved.drafts == 3 and moved.accepted == 3 + 1 + 0
        server.script = SPEC
        stream(server)
        after = scrape(client, server).spec
    rest = delta(middle.spec, after)
    assert rest is not None and rest.drafts == len(STEPS)  # the whole second answer
    assert rest.accepted == sum(a for _, a in STEPS) and rest.per_position[0] == sum(1 for _, a in STEPS if a)


def test_the_flavours_answer_their_own_endpoints():
    with httpx2.Client(timeout=5) as client:
        with FakeServer("vllm") as vllm:
            card = client.get(f"{vllm.url}/v1/models").json()["data"][0]
            assert card["owned_by"] == "vllm" and card["max_model_len"] > 0
            health = client.get(f"{vllm.url}/health")
            assert health.status_code == 200 and health.content == b""
            assert "version" in client.get(f"{vllm.url}/version").json()
            assert parse_metrics(client.get(f"{vllm.url}/metrics").text, "fake").engine == "vllm"
        with FakeServer("sglang") as sglang:
            assert client.get(f"{sglang.url}/v1/models").json()["data"][0]["owned_by"] == "sglang"
            assert client.get(f"{sglang.url}/get_model_info").json()["model_path"] == MODEL
            assert "internal_states" in client.get(f"{sglang.url}/get_server_info").json()
        with FakeServer("openai") as plain:
            assert client.get(f"{plain.url}/v1/models").status_code == 200
            assert [client.get(f"{plain.url}{p}").status_code for p in ("/metrics", "/health", "/version")] == [404] * 3
            answer = client.post(f"{plain.url}/v1/chat/completions", json={**CHAT, "stream": False}).json()
            assert answer["choices"][0]["message"]["content"] == "Hello!" and "metrics" not in answer
            assert [r.path for r in plain.requests][-1] == "/v1/chat/completions"
            assert plain.requests[-1].body["model"] == MODEL


def test_a_wrong_or_missing_key_is_401_where_the_server_checks_it():
    with FakeServer("vllm", Script(api_key="k")) as server, httpx2.Client(timeout=5) as client:
        refused = client.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer nope"})
        assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
        assert client.get(f"{server.url}/v1/models").status_code == 401
        assert client.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer k"}).status_code == 200
        assert client.get(f"{server.url}/health").status_code == 200  # vLLM checks /v1 paths only
        assert server.requests[0].headers["authorization"] == "Bearer nope"
    with FakeServer("openai", Script(api_key="k")) as server, httpx2.Client(timeout=5) as client:
        assert client.get(f"{server.url}/v1/models").json()["error"]["code"] == "invalid_api_key"


def test_an_unknown_model_is_vllms_404():
    with FakeServer("vllm") as server, httpx2.Client(timeout=5) as client:
        answer = client.post(f"{server.url}/v1/chat/completions", json={**CHAT, "model": "nope"})
    assert answer.status_code == 404
    assert answer.json()["error"] == {"message": "The model `nope` does not exist.", "type": "NotFoundError",
                                      "param": "model", "code": 404}


def test_a_server_dying_mid_answer_cuts_the_body():
    with FakeServer("vllm", Script(die_after=2)) as server, pytest.raises(httpx2.RemoteProtocolError):
        stream(server)


def test_malformed_and_error_chunks():
    with FakeServer("vllm", Script(malformed_after=1)) as server, httpx2.Client(timeout=5) as client:
        text = client.post(f"{server.url}/v1/chat/completions", json=CHAT).text
        assert "data: {not json\n\n" in text
    with FakeServer("vllm", Script(error_chunk="CUDA out of memory")) as server:
        events, done = stream(server)
    assert done and events[-1] == {"error": {"message": "CUDA out of memory", "type": "InternalServerError",
                                             "param": None, "code": 500}}


def test_a_hanging_server_sees_the_client_leave():
    with FakeServer("vllm", Script(hang_after=1)) as server, httpx2.Client(timeout=5) as client:
        with client.stream("POST", f"{server.url}/v1/chat/completions", json=CHAT) as response:
            lines = response.iter_lines()  # held: dropping the iterator closes the response
            first = next(lines)
            assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"]["role"] == "assistant"
            time.sleep(0.1)
            assert not server.client_disconnected.is_set()  # hanging, not gone
        # leaving the block closes the unfinished response: the client's Stop
        assert wait_for(server.client_disconnected, 2.0)


def test_a_hanging_answer_does_not_outlive_close():
    server = FakeServer("vllm", Script(hang_after=0, delay_s=0.05))
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            stream(server)
        except Exception as exc:  # the cut connection, as the client will see it
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.2)
    started = time.monotonic()
    server.close()
    reader.join(3.0)
    assert time.monotonic() - started < 3.0 and not reader.is_alive()
    assert outcome and isinstance(outcome[0], httpx2.RemoteProtocolError)
