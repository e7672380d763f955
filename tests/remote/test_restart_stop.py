"""Stop while ``auto`` restarts SpecChat's managed llama-server (with or without its drafter): the answer ends at
once, nothing that was shown is lost, the server goes on coming up, and the next answer waits for it.

The fake llama-server (tests/helpers/fake_llama_server.py) with a slow load stands in for a large model; the
switch itself with the real server: tests/remote/test_server_auto_switch.py."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import pytest

from helpers.procs import alive
from specchat.backends.remote import ManagedSpec, RemoteBackend
from specchat.engine.answer import AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done, Fallback, StopReason
from specchat.engine.settings import Mode
from specchat.metrics import Counts
from specchat.remote.errors import ServerError

HELLO = ({"role": "user", "content": "hi"},)
OFF_FASTER = ((True, Counts.of_answer(101, 10.0)),) * 3 + ((False, Counts.of_answer(101, 5.0)),) * 3


def pids(launcher: Path) -> list[int]:
    path = launcher.parent / "runs.jsonl"
    return [json.loads(line)["pid"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def backend(fake_llama_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_LLAMA_SLOTS", "1")  # the fake says whether it drafts, as llama-server's /slots does
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    spec = ManagedSpec(target, draft, spec_type="draft-simple", n_ctx=1024, binary=str(fake_llama_server),
                       log_dir=tmp_path / "logs")
    b = RemoteBackend._start_managed(spec, "llama-server")
    assert b.auto is not None and b.caps.speculative
    # every restart from here loads until the test lets it (tmp_path/ready), however slow the machine
    monkeypatch.setenv("FAKE_LLAMA_READY_FILE", str(tmp_path / "ready"))
    monkeypatch.setenv("FAKE_LLAMA_START_DELAY_S", "1")  # and starts slowly, as on a loaded machine
    try:
        yield b
    finally:
        b.close()


def stopped_during_the_restart(backend: RemoteBackend, launcher: Path) -> list:
    """An auto answer that restarts the server without its drafter, stopped once the new server runs (it says so
    in runs.jsonl: on a loaded machine a process can take seconds to start)."""
    cancel = CancelToken()
    request = AnswerRequest(HELLO, mode=Mode.AUTO, max_tokens=8, task="chat", measured=OFF_FASTER)
    started = len(pids(launcher))
    threading.Thread(target=lambda: _when(lambda: len(pids(launcher)) > started) and cancel.cancel(),
                     daemon=True).start()
    return list(backend.answer(request, cancel))


def _when(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_during_a_restart_ends_the_answer_at_once_and_the_next_answer_waits_for_the_server(
        backend, fake_llama_server, tmp_path):
    events = stopped_during_the_restart(backend, fake_llama_server)  # it returns while the new server still loads
    notes = [e.reason for e in events if isinstance(e, Fallback)]
    assert notes and notes[0].startswith("restarting llama-server without its drafter")
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.CANCELLED
    first, second = pids(fake_llama_server)
    assert not alive(first) and alive(second)  # the old server is gone, the new one goes on loading
    assert not (tmp_path / "ready").exists()  # so the answer ended before its load did
    (tmp_path / "ready").touch()

    again = backend.answer(AnswerRequest(HELLO, mode=Mode.AUTO, max_tokens=8, task="chat", measured=OFF_FASTER),
                           CancelToken())
    waiting = [e for e in again if isinstance(e, Fallback)][:1]  # up to the wait, before any streaming
    assert waiting and waiting[0].reason == "waiting for llama-server to come back without its drafter (plain decoding)"
    with contextlib.suppress(ServerError):  # it waits, then streams (the fake serves no answers)
        for _ in again:
            pass
    assert backend.caps.speculative is False  # the server came back without its drafter: that one is used
    assert pids(fake_llama_server) == [first, second]  # and it was not started a third time


def test_closing_during_a_restart_stops_the_server_that_is_starting(backend, fake_llama_server):
    events = stopped_during_the_restart(backend, fake_llama_server)
    assert events[-1].stop_reason is StopReason.CANCELLED
    starting = pids(fake_llama_server)[-1]
    assert alive(starting)
    backend.close()
    assert not alive(starting)
