"""Against a real llama-server, built from the llama.cpp that llama-cpp-python vendors
(scripts/test_server.py), serving the Qwen pair with ``--spec-type draft-simple --metrics``.

What a user relies on: the answer streams; the acceptance SpecChat rebuilds from the
stream is the server's own, exactly (its final ``timings`` and its ``/metrics``
counters); Stop stops the server generating; a server that dies mid-answer leaves the
partial answer and one line; a wrong API key is one line.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from specchat.backends.remote import RemoteBackend, RemoteConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, Error, RoundStats, StopReason, TokenOrigin, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.metrics import Counts
from specchat.remote.client import ServerClient
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import ManagedServer
from specchat.remote.servers import ServerConfig

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(600)]

CODE = ({"role": "user", "content": "Write a Python function that checks whether a number is prime."},)


class FixedKey:
    def __init__(self, key: str) -> None:
        self.key = key

    def get(self, name: str) -> str:
        return self.key


@pytest.fixture(scope="module")
def pair_server(llama_server_binary, qwen_target, qwen_draft, tmp_path_factory):
    server = ManagedServer(llama_server_binary, qwen_target, qwen_draft, spec_type="draft-simple", n_ctx=2048,
                           threads=2, log_dir=tmp_path_factory.mktemp("llama-server"))
    url = server.start(timeout_s=300)
    yield server, url
    server.stop()


def connect(url: str, key: str = "") -> RemoteBackend:
    return RemoteBackend.connect(RemoteConfig(ServerConfig("test", url)), keychain=FixedKey(key))  # type: ignore[arg-type]


def answer(backend: RemoteBackend, cancel=None, *, max_tokens=96, observe=None, messages=CODE):
    return backend.answer(AnswerRequest(messages, max_tokens=max_tokens), cancel or CancelToken(), observe=observe)


def test_a_streamed_answer_carries_the_servers_rounds_and_its_draft_tokens(pair_server):
    _, url = pair_server
    backend = connect(url)
    try:
        assert backend.caps.engine == "llama.cpp" and backend.caps.speculative is True and backend.caps.metrics
        events = list(answer(backend))
    finally:
        backend.close()
    text = "".join(e.text for e in events if isinstance(e, TokensEmitted))
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason in (StopReason.EOG, StopReason.MAX_TOKENS)
    assert "def " in text
    origins = [o for e in events if isinstance(e, TokensEmitted) for o in e.origins]
    assert len(origins) == done.stats.tokens and TokenOrigin.DRAFT in origins
    assert done.stats.rounds_with_draft > 0 and done.stats.decode_tok_s


def test_the_rebuilt_acceptance_equals_the_servers_timings_and_its_metrics_counters(pair_server):
    _, url = pair_server
    backend = connect(url)
    chunks: list[dict] = []
    try:
        before = backend.client.metrics()
        events = list(answer(backend, observe=chunks.append, max_tokens=128))
        after = backend.client.metrics()
    finally:
        backend.close()
    rounds = [e for e in events if isinstance(e, RoundStats)]
    rebuilt = Counts.total(r.counts for r in rounds)
    final = [c["timings"] for c in chunks if "timings" in c][-1]
    # the server's own figures for this answer, two ways
    assert (rebuilt.drafted, rebuilt.accepted) == (final["draft_n"], final["draft_n_accepted"])
    assert before is not None and after is not None and before.spec is not None and after.spec is not None
    assert rebuilt.drafted == after.spec.draft_tokens - before.spec.draft_tokens
    assert rebuilt.accepted == after.spec.accepted - before.spec.accepted
    assert rebuilt.rounds_with_draft == after.spec.drafts - before.spec.drafts  # rounds, not only tokens
    done = events[-1]
    assert isinstance(done, Done) and done.stats.token_acceptance == pytest.approx(
        final["draft_n_accepted"] / final["draft_n"])
    print(f"\nrebuilt: {rebuilt.rounds_with_draft} rounds, {rebuilt.accepted}/{rebuilt.drafted} accepted, "
          f"{rebuilt.rounds_fully_accepted} fully; timings {final['draft_n_accepted']}/{final['draft_n']}; "
          f"/metrics {after.spec.drafts - before.spec.drafts} drafts, "
          f"{after.spec.accepted - before.spec.accepted}/{after.spec.draft_tokens - before.spec.draft_tokens}")


def test_stop_ends_the_answer_and_the_server_stops_generating(pair_server):
    _, url = pair_server
    backend = connect(url)
    cancel = CancelToken()
    try:
        before = backend.client.metrics()
        got = 0
        events = []
        for ev in answer(backend, cancel, max_tokens=1500, messages=(
                {"role": "user", "content": "Write a long, detailed essay on the history of compilers."},)):
            events.append(ev)
            if isinstance(ev, TokensEmitted):
                got += len(ev.origins)
                if got >= 20 and not cancel.cancelled:
                    cancel.cancel()
                    stopped_at = time.monotonic()
        done = events[-1]
        assert isinstance(done, Done) and done.stop_reason is StopReason.CANCELLED
        assert time.monotonic() - stopped_at < 5
        # the server noticed the client going: its slot is free again and it generated far fewer than 1500
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            slots = backend.client.get_json("/slots")
            if not any(s.get("is_processing") for s in slots):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the server kept generating after Stop")
        after = backend.client.metrics()
        assert after is not None and before is not None
        assert after.tokens_generated - before.tokens_generated < 300
    finally:
        backend.close()


def test_a_server_killed_mid_answer_leaves_the_partial_answer_and_one_line(llama_server_binary, qwen_target,
                                                                         tmp_path):
    server = ManagedServer(llama_server_binary, qwen_target, n_ctx=1024, threads=2, log_dir=tmp_path)
    url = server.start(timeout_s=300)
    backend = connect(url)
    try:
        events = []
        got = 0
        for ev in answer(backend, max_tokens=1500, messages=(
                {"role": "user", "content": "Count from 1 to 500, one number per line."},)):
            events.append(ev)
            if isinstance(ev, TokensEmitted):
                got += len(ev.origins)
                if got == 10:
                    os.kill(server.pid, signal.SIGKILL)
        errors = [e for e in events if isinstance(e, Error)]
        done = events[-1]
        assert isinstance(done, Done) and done.stop_reason is StopReason.ERROR
        assert len(errors) == 1 and "\n" not in errors[0].message and "partial answer is kept" in errors[0].message
        assert done.stats.tokens >= 10
    finally:
        backend.close()
        server.stop()


def test_a_wrong_api_key_is_one_line_and_the_right_one_works(llama_server_binary, qwen_draft, tmp_path):
    server = ManagedServer(llama_server_binary, qwen_draft, n_ctx=512, threads=2, api_key="s3cret", log_dir=tmp_path)
    url = server.start(timeout_s=300)
    try:
        with pytest.raises(ServerError, match="refused the API key") as info:
            connect(url, "wrong")
        assert "\n" not in str(info.value) and "s3cret" not in str(info.value)
        with ServerClient(ServerConfig("test", url), "s3cret") as client:
            assert client.probe().engine == "llama.cpp"
    finally:
        server.stop()


@pytest.mark.parametrize("extra_buffers", [False, True])
def test_the_cpu_kernel_verdict_reaches_the_real_server_and_it_answers(llama_server_binary, qwen_draft, tmp_path,
                                                                       monkeypatch, extra_buffers):
    """Where the probe found llama.cpp's extra CPU kernels fault (AMX on some virtual machines), the real
    llama-server runs with --no-repack: its log shows no repacked weights, and it answers a prompt longer
    than one token (the batch that faulted).  Where they run, it is llama.cpp's default."""
    from specchat.engine import cpu_kernels

    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    real = cpu_kernels.verdict()
    if extra_buffers and not real.extra_buffers:
        pytest.skip(f"this machine's kernels fault: {real.line()}")
    monkeypatch.setattr(cpu_kernels, "_verdict", cpu_kernels.CpuVerdict(
        "runs" if extra_buffers else "faults", extra_buffers, ("AMX",), "" if extra_buffers else "SIGILL"))
    # -lv 4: llama.cpp's load lines (where the weights went) reach the server's log
    server = ManagedServer(llama_server_binary, qwen_draft, n_ctx=512, threads=2, log_dir=tmp_path,
                           extra_args=("-lv", "4"))
    url = server.start(timeout_s=300)
    backend = connect(url)
    try:
        events = list(answer(backend, max_tokens=8))
        assert isinstance(events[-1], Done) and events[-1].stop_reason is not StopReason.ERROR
        log = server.log_path.read_text(errors="replace")
        assert "CPU_Mapped model buffer" in log
        assert ("CPU_REPACK model buffer" in log) is (extra_buffers and "CPU_REPACK" in real.buffers)
        assert ("AMX model buffer" in log) is (extra_buffers and "AMX" in real.buffers)
    finally:
        backend.close()
        server.stop()
