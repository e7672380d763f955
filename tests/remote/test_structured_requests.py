"""A chat's JSON schema or GBNF grammar reaches each server in the field that server reads."""

from __future__ import annotations

import json

import pytest

from helpers.fake_openai_server import FakeServer, Script
from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, Error, StopReason
from specchat.engine.pair import CancelToken
from specchat.engine.settings import SamplingSettings, StructuredOutput
from specchat.remote.chat import request_body
from specchat.remote.client import Capabilities
from specchat.remote.kinds import VLLM, LlamaServer, SGLang
from specchat.remote.servers import ServerConfig

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
GRAMMAR = 'root ::= "yes" | "no"\n'
HELLO = ({"role": "user", "content": "hi"},)


class NoKey:
    def get(self, name: str) -> str:
        return ""


def held(kind: str, text: str) -> AnswerRequest:
    return AnswerRequest(HELLO, sampling=SamplingSettings(structured=StructuredOutput(kind, text)))


def caps(engine: str) -> Capabilities:
    return Capabilities(engine=engine, models=("m",), model="m")


def sent_body(server: FakeServer) -> dict:
    return [r for r in server.requests if r.path == "/v1/chat/completions"][-1].body


def answer(server: FakeServer, request: AnswerRequest) -> list:
    backend = RemoteBackend.connect(RemoteConfig(ServerConfig("fake", server.url)), keychain=NoKey())  # type: ignore[arg-type]
    try:
        return list(backend.answer(request, CancelToken()))
    finally:
        backend.close()


def test_llama_server_gets_its_own_json_schema_and_grammar_fields():
    body = request_body(caps(LlamaServer.name), held("json_schema", json.dumps(SCHEMA)))
    assert body["json_schema"] == SCHEMA and "response_format" not in body
    body = request_body(caps(LlamaServer.name), held("grammar", GRAMMAR))
    assert body["grammar"] == GRAMMAR and "json_schema" not in body


def test_no_structured_output_sends_no_structured_field():
    body = request_body(caps(VLLM.name), AnswerRequest(HELLO))
    assert not {"json_schema", "grammar", "response_format", "structured_outputs", "ebnf"} & set(body)


@pytest.mark.parametrize("flavour", ["vllm", "sglang", "openai"])
def test_a_schema_goes_to_openai_style_servers_as_response_format(flavour):
    with FakeServer(flavour, Script(content=('{"answer": "x"}',))) as server:
        events = answer(server, held("json_schema", json.dumps(SCHEMA)))
        assert isinstance(events[-1], Done) and events[-1].stop_reason is not StopReason.ERROR
        fmt = sent_body(server)["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == SCHEMA and fmt["json_schema"]["name"]


def test_a_grammar_goes_to_vllm_as_structured_outputs_grammar():
    with FakeServer("vllm", Script(content=("yes",))) as server:
        answer(server, held("grammar", GRAMMAR))
        body = sent_body(server)
    assert body["structured_outputs"] == {"grammar": GRAMMAR}
    assert "guided_grammar" not in body  # removed in vLLM 0.12


def test_a_grammar_goes_to_sglang_as_ebnf():
    assert request_body(caps(SGLang.name), held("grammar", GRAMMAR))["ebnf"] == GRAMMAR


def test_a_server_that_takes_no_grammar_says_so_in_one_line_and_is_not_asked():
    with FakeServer("openai") as server:
        events = answer(server, held("grammar", GRAMMAR))
        asked = [r for r in server.requests if r.path == "/v1/chat/completions"]
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "no GBNF grammar" in errors[0].message and "\n" not in errors[0].message
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.ERROR
    assert not asked
