"""Each class of hostile server (tests/helpers/hostile_server.py) ends in one line or a clean stop,
keeps what was streamed, stays bounded in memory, and lets Stop and close through at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from helpers.hostile_server import HostileServer, ask_chat
from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, Error, StopReason, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.remote.client import ServerClient
from specchat.remote.errors import ServerError
from specchat.remote.servers import ServerConfig

HELLO = ({"role": "user", "content": "hi"},)
CHILD = """import resource, sys
from specchat.cli import main
rc = main(sys.argv[1:])
print("maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(rc)
"""


class NoKey:
    def get(self, name: str) -> str:
        return ""


def connect(server: HostileServer) -> RemoteBackend:
    return RemoteBackend.connect(RemoteConfig(ServerConfig("hostile", server.url)), keychain=NoKey())  # type: ignore[arg-type]


def answer_in_thread(backend: RemoteBackend, cancel: CancelToken, **request) -> tuple[threading.Thread, list]:
    events: list = []
    thread = threading.Thread(target=lambda: events.extend(backend.answer(AnswerRequest(HELLO, **request), cancel)),
                              daemon=True)
    thread.start()
    return thread, events


@pytest.mark.parametrize("mode", ["no_headers", "trickle_headers"])
def test_stop_while_the_server_withholds_its_headers_ends_the_answer_as_stopped(mode):
    with HostileServer(mode) as server:
        backend = connect(server)
        cancel = CancelToken()
        thread, events = answer_in_thread(backend, cancel)
        assert server.requested.wait(10)
        cancel.cancel()
        thread.join(30)  # does not hang: a generous bound, not a timing
        backend.close()
    assert not thread.is_alive()
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.CANCELLED
    assert not any(isinstance(e, Error) for e in events)


@pytest.mark.parametrize("mode", ["no_headers", "trickle_headers"])
def test_closing_the_backend_while_the_server_withholds_its_headers_ends_the_answer(mode):
    with HostileServer(mode) as server:
        backend = connect(server)
        thread, events = answer_in_thread(backend, CancelToken())
        assert server.requested.wait(10)
        backend.close()
        thread.join(30)
    assert not thread.is_alive()
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.ERROR
    assert "closed" in events[-1].message


def test_headers_trickled_for_ever_end_the_answer_in_one_line_at_the_headers_deadline(monkeypatch):
    """No Stop needed: a server that keeps trickling header bytes (each read is "progress") is given up
    at the headers' own deadline, which a trickle cannot extend."""
    from specchat.remote import client

    monkeypatch.setattr(client, "HEADERS_S", 1.0)
    with HostileServer("trickle_headers") as server:
        backend = connect(server)
        try:
            events = list(backend.answer(AnswerRequest(HELLO), CancelToken()))
        finally:
            backend.close()
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.ERROR
    assert "did not answer within 1 s" in done.message and "\n" not in done.message


def test_an_endless_line_is_one_error_and_the_text_before_it_is_kept():
    with HostileServer("endless_line") as server:
        backend = connect(server)
        try:
            events = list(backend.answer(AnswerRequest(HELLO), CancelToken()))
        finally:
            backend.close()
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and "line longer than 1 MiB" in errors[0].message
    assert "kept" in "".join(e.answer for e in events if isinstance(e, TokensEmitted))
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.ERROR


def test_a_claim_of_ten_million_tokens_is_refused_in_one_line_not_looped_over():
    with HostileServer("huge_counts") as server:
        backend = connect(server)
        try:
            assert backend.caps.per_round  # recognised as llama-server: its running counts drive the rounds
            events = list(backend.answer(AnswerRequest(HELLO), CancelToken()))
        finally:
            backend.close()
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and "claims 10000000 tokens" in errors[0].message
    assert "kept" in "".join(e.answer for e in events if isinstance(e, TokensEmitted))
    assert events[-1].stats.tokens <= 2


def test_a_huge_error_body_is_read_to_64_kib_and_said_in_one_line():
    with HostileServer("huge_error") as server:
        backend = connect(server)
        try:
            events = list(backend.answer(AnswerRequest(HELLO), CancelToken()))
        finally:
            backend.close()
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.ERROR
    assert "refused the API key (HTTP 401" in done.message and "\n" not in done.message
    assert len(done.message) < 600


def test_a_server_streaming_past_max_tokens_is_cut_there_as_max_tokens():
    with HostileServer("past_max_tokens") as server:
        backend = connect(server)
        try:
            events = list(backend.answer(AnswerRequest(HELLO, max_tokens=8), CancelToken()))
        finally:
            backend.close()
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.MAX_TOKENS
    assert "".join(e.answer for e in events if isinstance(e, TokensEmitted)) == "word " * 8
    assert done.stats.tokens == 8


def test_deeply_nested_json_from_a_server_is_one_server_error():
    with HostileServer("deep_json") as server, pytest.raises(ServerError, match="nested deeper than 64"):
        connect(server)


def test_the_probe_has_an_overall_deadline_whatever_the_server_trickles():
    with HostileServer("slow_models") as server, ServerClient(ServerConfig("hostile", server.url)) as client, \
            pytest.raises(ServerError, match="did not answer within 2 s"):
        client.probe(deadline_s=2.0)


def _cli(args: list[str], tmp_path) -> tuple[int, str, int]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""),
                                                                  os.path.abspath("app")) if p))
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    rss = int(done.stderr.rsplit("maxrss_kib", 1)[1].split()[0])
    lines = [line for line in done.stderr.splitlines() if line.startswith("specchat:")]
    return done.returncode, "\n".join(lines), rss


@pytest.mark.parametrize("mode, flags, rc, says", [
    ("endless_line", [], 2, "line longer than 1 MiB"),
    ("past_max_tokens", ["--max-tokens", "8"], 0, ""),
    ("huge_error", [], 2, "refused the API key"),
])
def test_the_cli_against_a_hostile_server_ends_in_one_line_within_200_mb(mode, flags, rc, says, tmp_path):
    with HostileServer("past_max_tokens") as normal:
        _, _, baseline = _cli(ask_chat(normal.url, "--max-tokens", "4"), tmp_path)
    with HostileServer(mode) as server:
        code, line, rss = _cli(ask_chat(server.url, *flags), tmp_path)
    assert code == rc
    assert (says in line and len(line.splitlines()) == 1) if says else not line
    assert rss - baseline < 200 * 1024, (rss, baseline)


@pytest.mark.parametrize("args", [["servers", "check"], ["models", "search", "x"]])
def test_deep_json_on_the_cli_is_one_line_and_exit_2(args, tmp_path, monkeypatch):
    with HostileServer("deep_json") as server:
        argv = [*args, server.url] if args[0] == "servers" else args
        env_extra = {"HF_ENDPOINT": server.url} if args[0] == "models" else {}
        monkeypatch.setattr(os, "environ", dict(os.environ, **env_extra))
        code, line, _ = _cli(argv, tmp_path)
    assert code == 2 and len(line.splitlines()) == 1 and "internal error" not in line
