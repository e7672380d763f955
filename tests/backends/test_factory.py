"""One factory of backends, and their answers through the generation thread and the answer service:
a local pair (the fake models) and a server (tests/helpers/fake_openai_server.py, a real HTTP server
on 127.0.0.1) go the same way, and a server's reasoning reaches the stored message apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fake_openai_server import FakeServer, Script
from helpers.fakes import FakePairFactory, FakeSpec
from specchat.backends.factory import OPENERS, backend_factory, open_backend
from specchat.backends.local import LocalBackend
from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine import Done, TokensEmitted
from specchat.engine.answer import AnswerRequest, Started
from specchat.engine.cancel import CancelToken
from specchat.engine.pair import PairConfig
from specchat.remote.servers import ServerConfig
from specchat.services.answers import AnswerService
from specchat.store import ChatSettings, open_store
from specchat.workers.generation import GenerationService

HELLO = ({"role": "user", "content": "hi"},)


def test_the_factory_opens_a_local_pair_and_a_server_from_their_configs(monkeypatch):
    monkeypatch.setenv("SPECCHAT_API_KEY", "k")  # never the OS keychain in a test
    local = backend_factory(FakePairFactory(FakeSpec(answer_tokens=12)))(PairConfig(Path("t.gguf")), CancelToken())
    try:
        assert isinstance(local, LocalBackend) and local.info.target == "t.gguf" and local.info.server is None
        events = list(local.answer(AnswerRequest(HELLO, max_tokens=12), CancelToken()))
    finally:
        local.close()
    assert isinstance(events[0], Started) and events[0].prompt_tokens > 0 and isinstance(events[-1], Done)
    text = "".join(e.text for e in events if isinstance(e, TokensEmitted))
    assert text and "".join(e.answer for e in events if isinstance(e, TokensEmitted)) == text  # no <think>: all answer
    with FakeServer("vllm") as server:
        remote = open_backend(RemoteConfig(ServerConfig("box", server.url)), CancelToken())
        try:
            assert isinstance(remote, RemoteBackend) and remote.info.server is not None
            assert remote.info.server.summary.startswith("vllm serving")
            assert remote.info.backend == "vllm at box (" + server.url + ")"
        finally:
            remote.close()


def test_a_config_no_backend_opens_is_refused():
    with pytest.raises(TypeError, match="no backend opens a str"):
        open_backend("t.gguf", CancelToken())  # type: ignore[arg-type]
    assert set(OPENERS) == {PairConfig, RemoteConfig}


def test_a_servers_reasoning_is_stored_apart_from_its_answer(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_API_KEY", "k")
    script = Script(reasoning=("Let me", " think."), content=("The", " answer", "."))
    with FakeServer("vllm", script) as server, open_store(tmp_path / "db.sqlite3") as store:
        config = RemoteConfig(ServerConfig("box", server.url))
        generation = GenerationService(FakePairFactory(FakeSpec()))
        service = AnswerService(store, generation, lambda settings: config)
        try:
            chat = store.create_chat("c", ChatSettings(backend="box"))
            store.add_message(chat.id, "user", "hi")
            with qtbot.waitSignal(service.finished, timeout=10_000) as done:
                service.ask(chat.id)
            stored = done.args[1]
            assert stored.state == "done"
            assert stored.reasoning == "Let me think." and stored.content == "The answer."
        finally:
            service.shutdown()
            generation.shutdown()
