"""``auto`` on SpecChat's managed llama-server: per task, speculation on (the server's drafter) or off (the
same server restarted without it), from the rates measured there, and why in the answer's stats line.

The real llama-server (scripts/test_server.py) with a tiny qwen3 target and its EAGLE-3 head
(tests/helpers/tiny_drafters.py), chosen and opened as the window does.  The choice itself, with fake
rates: tests/backends/test_server_auto.py.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from helpers.tiny_drafters import Tokenizer, write_eagle3, write_qwen3_target
from specchat.backends.choose import choose
from specchat.backends.factory import open_backend
from specchat.backends.remote import ManagedSpec, RemoteBackend
from specchat.cli.servers import server_events
from specchat.config import AppConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, Fallback, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.engine.settings import Mode, SamplingSettings
from specchat.metrics import Counts
from specchat.profile import Profile
from specchat.remote.client import Capabilities, ServerClient
from specchat.remote.errors import ServerError
from specchat.remote.kinds import LlamaServer
from specchat.remote.llama_server import MANAGED, ManagedServer
from specchat.remote.servers import ServerConfig
from specchat.serve.http import Api, ApiServer
from specchat.serve.lane import BackendLane

HELLO = ({"role": "user", "content": "hi"},)
N_TOKENS = 24
THREADS = 1  # one thread on a busy 2-core machine (test_trained_drafters.py)


def rate(tok_s: float) -> Counts:
    return Counts.of_answer(101, 100 / tok_s)


def seeds(on_tok_s: float, off_tok_s: float) -> tuple[tuple[bool, Counts], ...]:
    """What the window passes: the task's stored answers on this server, three a side."""
    return ((True, rate(on_tok_s)),) * 3 + ((False, rate(off_tok_s)),) * 3


@pytest.fixture(scope="module")
def eagle3(llama_server_binary: Path, qwen_draft: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteBackend]:
    out = tmp_path_factory.mktemp("tiny-eagle3-auto")
    tok = Tokenizer.from_gguf(qwen_draft)
    target = write_qwen3_target(out / "tiny-qwen3.gguf", tok, seed=0)
    head = write_eagle3(out / "tiny-eagle3.gguf", tok, seed=2)
    profile = Profile.at(tmp_path_factory.mktemp("profile"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{llama_server_binary.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        config = choose(AppConfig.defaults(), profile, backend=MANAGED, target=target, draft=head,
                        spec_type="draft-eagle3", n_ctx=1024, threads=THREADS)
        backend = open_backend(config, CancelToken())
    assert isinstance(backend, RemoteBackend) and backend.caps.speculative and backend.auto is not None
    try:
        yield backend
    finally:
        backend.close()


def ask(backend: RemoteBackend, mode: Mode = Mode.AUTO, task: str = "chat",
        measured: tuple[tuple[bool, Counts], ...] = ()) -> tuple[str, Done]:
    events = list(backend.answer(AnswerRequest(HELLO, mode=mode, max_tokens=N_TOKENS, fresh_prompt=True, task=task,
                                               measured=measured), CancelToken()))
    done = events[-1]
    assert isinstance(done, Done), done
    return "".join(e.text for e in events if isinstance(e, TokensEmitted)), done


@pytest.mark.real_server
@pytest.mark.timeout(300)
def test_auto_turns_the_drafter_off_where_it_measured_slower_and_on_where_faster(eagle3):
    on_text, on = ask(eagle3, Mode.DRAFT)
    assert on.stats.counts.drafted > 0 and on.stats.mode == "llama.cpp+draft"

    off_text, off = ask(eagle3, task="code", measured=seeds(on_tok_s=5.0, off_tok_s=10.0))
    assert not eagle3.caps.speculative  # the same server, restarted without its drafter
    assert off.stats.counts.drafted == 0 and off.stats.mode == "llama.cpp"
    assert off_text == on_text and off.stats.tokens == N_TOKENS  # plain decoding: the target's own answer
    assert off.stats.notes == ("auto: speculation off for code: 0.50x plain over 6 answers",)

    back_text, back = ask(eagle3, task="json", measured=seeds(on_tok_s=15.0, off_tok_s=10.0))
    assert eagle3.caps.speculative and back.stats.counts.drafted > 0 and back_text == on_text
    assert back.stats.notes == ("auto: llama-server's draft-eagle3 on for json: 1.50x plain over 6 answers",)

    ask(eagle3, task="code", measured=seeds(on_tok_s=5.0, off_tok_s=10.0))
    assert not eagle3.caps.speculative
    _, drafted = ask(eagle3, Mode.DRAFT)  # asked for the drafter: it is back, whatever auto chose before
    assert eagle3.caps.speculative and drafted.stats.counts.drafted > 0 and drafted.stats.notes == ()


@pytest.mark.real_server
@pytest.mark.timeout(300)
def test_without_stored_rates_auto_measures_both_sides_from_its_own_answers(eagle3):
    """No store (``specchat serve``, the CLI): each answer's rate is recorded by the backend, so the choice
    moves from measuring to deciding as answers come."""
    notes = [ask(eagle3, task="summary")[1].stats.notes[0] for _ in range(6)]
    assert notes[0].startswith("auto: llama-server's draft-eagle3 on for summary to measure it: 0 of 3")
    # one side until it has its answers, then the other: one restart to measure a task
    assert notes[2] == ("auto: llama-server's draft-eagle3 on for summary to measure it: 2 of 3 answers measured "
                        "with speculation on, 0 of 3 with it off")
    assert notes[3] == ("auto: speculation off for summary to measure it: 3 of 3 answers measured with "
                        "speculation on, 0 of 3 with it off")
    assert "3 of 3 answers measured with speculation on, 2 of 3 with it off" in notes[5]
    decided = ask(eagle3, task="summary")[1].stats.notes[0]  # three a side now: a figure, either way
    assert "x plain over 6 answers" in decided and "to measure it" not in decided
    print("\n" + "\n".join([*notes, decided]))


# -- the restart itself, on the fake llama-server (fast tier) ---------------------------------------------


def fake_runs(launcher: Path) -> list[dict]:
    path = launcher.parent / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(60)
def test_turning_the_drafter_off_restarts_the_same_server_without_it_and_a_failed_restart_is_one_line(
        fake_llama_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    target, head = tmp_path / "target.gguf", tmp_path / "mtp.gguf"
    target.write_bytes(b"GGUF")
    head.write_bytes(b"GGUF")
    spec = ManagedSpec(target, head, spec_type="draft-mtp", n_ctx=512, threads=1, binary=str(fake_llama_server),
                       log_dir=tmp_path / "logs")
    process = ManagedServer(fake_llama_server, target, head, spec_type="draft-mtp", n_ctx=512, threads=1,
                            log_dir=tmp_path / "logs")
    client = ServerClient(ServerConfig(MANAGED, process.start(timeout_s=30)))
    # the fake answers /health and /props only: what a probe of the real one would say
    caps = Capabilities(engine=LlamaServer.name, models=("m",), model="m", speculative=True, speculation="draft-mtp")
    backend = RemoteBackend(client, caps, process, "llama-server on this machine (draft-mtp)", spec)
    monkeypatch.setenv("FAKE_LLAMA_FAIL", "llama_model_load: error loading model: out of memory")
    try:
        events: list[object] = []
        with pytest.raises(ServerError) as first:
            for ev in backend.answer(AnswerRequest(HELLO, task="code", measured=seeds(5.0, 10.0)), CancelToken()):
                events.append(ev)
        # before the restart (seconds for a large model) the user reads what is happening and why
        notes = [e.reason for e in events if isinstance(e, Fallback)]
        assert notes == ["restarting llama-server without its drafter (plain decoding) "
                         "(auto: speculation off for code: 0.50x plain over 6 answers)"]
        with pytest.raises(ServerError) as second:  # every later answer says the same, nothing half-started
            list(backend.answer(AnswerRequest(HELLO, mode=Mode.DRAFT), CancelToken()))
    finally:
        backend.close()
    started, restarted = (r["argv"] for r in fake_runs(fake_llama_server))
    assert "--spec-type" in started and started[started.index("--spec-type") + 1] == "draft-mtp" and str(head) in started
    # the same server (binary, target, context, threads) without the drafter
    assert restarted[restarted.index("-m") + 1] == str(target) and str(head) not in restarted
    assert "--spec-type" not in restarted or restarted[restarted.index("--spec-type") + 1] == "none"
    assert restarted[restarted.index("-c") + 1] == "512" and restarted[restarted.index("-t") + 1] == "1"
    line = str(first.value)
    assert line.startswith("llama-server did not start again without its drafter (") and "out of memory" in line
    assert line.endswith("load the chat's pair again") and "\n" not in line and str(second.value) == line


@pytest.mark.real_server
@pytest.mark.timeout(300)
def test_through_specchat_serve_a_request_names_its_task_and_hears_why(eagle3):
    """``specchat serve --server llama-server:TYPE``'s lane over the same managed server: a request's
    ``"specchat": {"mode": "auto", "task": ...}`` is decided per task from the answers it measured, and
    ``specchat.why`` says so."""
    lane = BackendLane(eagle3, mode=Mode.BASELINE)  # the request's mode wins over the server's default
    server = ApiServer(Api(lane), "127.0.0.1", 0)
    stop = threading.Event()
    thread = threading.Thread(target=lane.run, args=(stop,), daemon=True)
    thread.start()
    server.start()
    try:
        got = []
        for _ in range(2):
            r = httpx2.post(server.url + "/chat/completions", timeout=120, json={
                "messages": list(HELLO), "max_tokens": N_TOKENS, "cache_prompt": False,
                "specchat": {"mode": "auto", "task": "Creative"}})
            assert r.status_code == 200, r.text
            ext = r.json()["specchat"]
            got.append((ext["mode"], [w for w in ext["why"] if w.startswith("auto: ")]))
    finally:
        stop.set()
        server.stop()
        thread.join(10)
    (mode1, [why1]), (mode2, [why2]) = got
    assert why1.endswith("for creative to measure it: 0 of 3 answers measured with speculation on, 0 of 3 with it off")
    # the first answer's rate was recorded: the second goes on measuring the side that runs
    on_first = mode1 == "llama.cpp+draft"
    assert why1.startswith("auto: llama-server's draft-eagle3 on" if on_first else "auto: speculation off")
    assert mode2 == mode1
    assert why2.endswith("1 of 3 answers measured with speculation on, 0 of 3 with it off" if on_first
                         else "0 of 3 answers measured with speculation on, 1 of 3 with it off")


@pytest.mark.real_server
@pytest.mark.timeout(300)
def test_the_bench_measures_the_managed_server_with_its_drafter_in_every_answer(eagle3):
    """``specchat bench --server llama-server:TYPE``'s contender: auto would measure plain on the second
    answer (one answer a side to compare); the bench's row is the drafter's, every time."""
    args = argparse.Namespace(sampling=SamplingSettings(temperature=0.0), max_tokens=N_TOKENS, reasoning=None, stop=())
    for _ in range(3):
        done = list(server_events(eagle3, args, list(HELLO), fresh=True))[-1]
        assert isinstance(done, Done) and done.stats.counts.drafted > 0 and done.stats.mode == "llama.cpp+draft"
