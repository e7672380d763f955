"""Server kinds are classes tried in order from one list: a kind registered there is tried by the
probe, and what it says shapes the capabilities and the request body."""

from __future__ import annotations

from typing import Any

from helpers.fake_openai_server import FakeServer
from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.pair import CancelToken
from specchat.remote import kinds
from specchat.remote.client import ServerClient
from specchat.remote.kinds import OpenAICompatible, Probe, Recognised, Said, ServerKind
from specchat.remote.servers import ServerConfig

HELLO = ({"role": "user", "content": "hi"},)


class SystemOwned(ServerKind):
    """A kind recognised by what its /v1/models says (the fake generic server's owner, "system")."""

    name = "system-owned"

    def __init__(self) -> None:
        self.asked = 0

    def recognise(self, probe: Probe) -> Recognised | None:
        self.asked += 1
        return Recognised({"seen": "system"}) if "system" in probe.owners else None

    def describe(self, said: Said, props: Any, counters, probe: Probe) -> None:
        said.notes.append(f"recognised from {props['seen']}")

    def body_extras(self, body: dict[str, Any], req) -> None:
        body["system_extra"] = True


class FixedKey:
    def get(self, name: str) -> str:
        return ""


def test_a_kind_registered_in_the_list_is_tried_by_the_probe_and_shapes_the_answer(monkeypatch):
    with FakeServer("openai") as server, ServerClient(ServerConfig("box", server.url)) as client:
        assert client.probe().engine == "openai"  # the built-in list: a generic OpenAI-compatible server
        kind = SystemOwned()
        monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS[:-1], kind, kinds.KINDS[-1]))
        caps = client.probe()
        assert kind.asked == 1 and caps.engine == "system-owned" and caps.kind is kind
        assert "recognised from system" in caps.notes
        backend = RemoteBackend.connect(RemoteConfig(ServerConfig("box", server.url)), keychain=FixedKey())  # type: ignore[arg-type]
        try:
            list(backend.answer(AnswerRequest(HELLO), CancelToken()))
        finally:
            backend.close()
        body = [r for r in server.requests if r.path == "/v1/chat/completions"][-1].body
        assert body["system_extra"] is True


def test_the_kinds_are_tried_in_order_and_the_catch_all_is_last(monkeypatch):
    builtin = kinds.KINDS
    assert isinstance(builtin[-1], OpenAICompatible) and {"vllm", "llama.cpp", "sglang"} <= {k.name for k in builtin}
    late = SystemOwned()
    monkeypatch.setattr(kinds, "KINDS", (*builtin, late))  # after the catch-all: never reached
    with FakeServer("openai") as server, ServerClient(ServerConfig("box", server.url)) as client:
        assert client.probe().engine == "openai" and late.asked == 0
