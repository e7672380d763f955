"""The chat's speculation switch on a server backend: an answer asked as baseline says what really ran.

A llama-server drafts as it was started, and no request can turn its drafting off (the vendored llama.cpp,
tools/server): the request fields ``speculative.n_max`` / ``speculative.type`` are compiled out
(server-schema.cpp:198-227, ``#if 0``), a task's ``params.speculative`` is a copy of the server's
(server-schema.cpp:528) that the slot never reads, and the slot's draft length is only the room left in
its context and ``max_tokens`` (``get_n_draft_max``, server-context.cpp:453-472, passed as the draft
params' ``n_max`` at server-context.cpp:2983-3014).  So a baseline answer of a drafting server still
drafts: it is not passed off as plain, it carries a permanent ``Fallback`` note (shown, and kept in its
stats' ``fallbacks``/``notes``) and its footer keeps "llama.cpp+draft".

The fast tests stream a scripted llama-server answer; the ``real_server`` ones start the real llama-server
(scripts/test_server.py) with a tiny EAGLE-3 pair (tests/helpers/tiny_drafters.py) through SpecChat's own
path, as tests/remote/test_trained_drafters.py does.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.tiny_drafters import Tokenizer, write_eagle3, write_qwen3_target
from specchat.backends.choose import choose
from specchat.backends.factory import open_backend
from specchat.backends.remote import RemoteBackend
from specchat.config import AppConfig
from specchat.engine.answer import AnswerRequest, Started
from specchat.engine.events import Done, Fallback, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.engine.settings import Mode
from specchat.profile import Profile
from specchat.remote.chat import request_body
from specchat.remote.client import Capabilities
from specchat.remote.kinds import LlamaServer
from specchat.remote.llama_server import MANAGED

HELLO = ({"role": "user", "content": "hi"},)


def llama(speculative: bool | None) -> Capabilities:
    return Capabilities(engine=LlamaServer.name, models=("m",), model="m", speculative=speculative,
                        speculation="draft-eagle3, up to 16 tokens" if speculative else "")


# -- without a server ----------------------------------------------------------------------------------


def test_a_baseline_request_body_asks_nothing_the_server_would_ignore():
    """No ``speculative.*`` field: llama-server compiles them out of its request schema, so a baseline
    request is the same body as an auto one (the answer says it drafted instead)."""
    baseline = request_body(llama(True), AnswerRequest(HELLO, mode=Mode.BASELINE))
    assert baseline == request_body(llama(True), AnswerRequest(HELLO, mode=Mode.AUTO))
    assert not [k for k in baseline if k.startswith("speculative")]
    assert baseline["timings_per_token"] is True  # the drafted counts still come back on every chunk


class ScriptedLlamaServer:
    """A ServerClient's streaming side, answering "abc" as llama-server streams it (one token a chunk,
    the running timings on each)."""

    where = "server scripted (http://127.0.0.1:1)"

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    @contextlib.contextmanager
    def stream_events(self, path: str, body: dict, cancel: CancelToken | None = None) -> Iterator[list[str]]:
        self.bodies.append(body)
        chunks = [{"choices": [{"delta": {"content": c}, "finish_reason": None}],
                   "timings": {"predicted_n": i + 1, "predicted_ms": 10.0 * (i + 1), "prompt_n": 3, "prompt_ms": 5.0}}
                  for i, c in enumerate("abc")]
        chunks.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
        yield [json.dumps(c) for c in chunks] + ["[DONE]"]

    def close(self) -> None:
        pass


def scripted_answer(caps: Capabilities, mode: Mode) -> list:
    backend = RemoteBackend(ScriptedLlamaServer(), caps)  # type: ignore[arg-type]
    return list(backend.answer(AnswerRequest(HELLO, mode=mode), CancelToken()))


def test_a_baseline_answer_of_a_drafting_server_says_speculation_stays_on():
    events = scripted_answer(llama(True), Mode.BASELINE)
    assert isinstance(events[0], Started)
    note = events[1]
    assert isinstance(note, Fallback) and note.permanent and not note.warning
    assert "cannot turn drafting off for one answer" in note.reason and "draft-eagle3" in note.reason
    assert "\n" not in note.reason and note.brief
    done = events[-1]
    assert isinstance(done, Done) and "".join(e.text for e in events if isinstance(e, TokensEmitted)) == "abc"
    assert done.stats.mode == "llama.cpp+draft"  # what ran: the server's drafter, not plain decoding
    assert done.stats.fallbacks == (note.reason,) and done.stats.notes == (note.brief,)


@pytest.mark.parametrize(("speculative", "mode"), [(True, Mode.AUTO), (True, Mode.DRAFT), (False, Mode.BASELINE),
                                                   (None, Mode.BASELINE)])
def test_no_note_when_the_answer_is_what_was_asked_or_the_server_does_not_say_it_drafts(speculative, mode):
    events = scripted_answer(llama(speculative), mode)
    assert not [e for e in events if isinstance(e, Fallback)]
    done = events[-1]
    assert isinstance(done, Done) and done.stats.fallbacks == () and done.stats.notes == ()
    assert done.stats.mode == ("llama.cpp+draft" if speculative else "llama.cpp")


def test_a_managed_server_note_names_the_chat_setting_that_gives_plain_decoding():
    backend = RemoteBackend(ScriptedLlamaServer(), llama(True), process=object())  # type: ignore[arg-type]
    note = backend.baseline_note(Mode.BASELINE)
    assert note is not None and "llama.cpp drafter to 'none'" in note.reason
    backend._process = None  # not ours to stop


# -- the real llama-server -------------------------------------------------------------------------------

N_TOKENS = 32
THREADS = 1  # see test_trained_drafters.py: one thread on a busy 2-core machine


@pytest.fixture(scope="module")
def eagle3_server(llama_server_binary: Path, qwen_draft: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteBackend]:
    """A managed llama-server for a tiny qwen3 target and its EAGLE-3 head, chosen and opened as the window
    does (the binary found on PATH)."""
    out = tmp_path_factory.mktemp("tiny-eagle3")
    tok = Tokenizer.from_gguf(qwen_draft)
    target = write_qwen3_target(out / "tiny-qwen3.gguf", tok, seed=0)
    head = write_eagle3(out / "tiny-eagle3.gguf", tok, seed=2)
    profile = Profile.at(tmp_path_factory.mktemp("profile"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{llama_server_binary.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        config = choose(AppConfig.defaults(), profile, backend=MANAGED, target=target, draft=head,
                        spec_type="draft-eagle3", n_ctx=1024, threads=THREADS)
        backend = open_backend(config, CancelToken())
    assert isinstance(backend, RemoteBackend) and backend.caps.speculative
    try:
        yield backend
    finally:
        backend.close()


def real_answer(backend: RemoteBackend, mode: Mode) -> tuple[str, list, list[dict]]:
    chunks: list[dict] = []
    events = list(backend.answer(AnswerRequest(HELLO, mode=mode, max_tokens=N_TOKENS, fresh_prompt=True),
                                 CancelToken(), observe=chunks.append))
    assert isinstance(events[-1], Done), events[-1]
    return "".join(e.text for e in events if isinstance(e, TokensEmitted)), events, chunks


def final_timings(chunks: list[dict]) -> dict:
    return [c["timings"] for c in chunks if "timings" in c][-1]


@pytest.mark.real_server
@pytest.mark.timeout(120)
def test_on_a_drafting_llama_server_a_baseline_answer_drafts_and_says_so(eagle3_server):
    auto_text, auto_events, auto_chunks = real_answer(eagle3_server, Mode.AUTO)
    base_text, base_events, base_chunks = real_answer(eagle3_server, Mode.BASELINE)
    auto, base = auto_events[-1].stats, base_events[-1].stats
    assert auto.tokens == base.tokens == N_TOKENS and base_text == auto_text  # the target's answer either way
    assert auto.counts.drafted > 0 and auto.counts.drafted == final_timings(auto_chunks)["draft_n"]
    # no request turns llama-server's drafting off: the baseline answer drafted, and says so
    assert base.counts.drafted > 0 and base.counts.drafted == final_timings(base_chunks)["draft_n"]
    notes = [e for e in base_events if isinstance(e, Fallback)]
    assert len(notes) == 1 and base.fallbacks == (notes[0].reason,) and base.mode == "llama.cpp+draft"
    assert not [e for e in auto_events if isinstance(e, Fallback)] and auto.fallbacks == ()
    print(f"\nAUTO: drafted {auto.counts.drafted}, accepted {auto.counts.accepted}; BASELINE: drafted "
          f"{base.counts.drafted}, accepted {base.counts.accepted}; {N_TOKENS} tokens, same text")


@pytest.mark.real_server
@pytest.mark.timeout(120)
@pytest.mark.parametrize("off", [{"speculative.n_max": 0}, {"speculative.type": "none"},
                                 {"speculative.n_max": 0, "speculative.n_min": 0, "speculative.type": "none"}],
                         ids=["n_max=0", "type=none", "all"])
def test_llama_server_ignores_the_per_request_speculative_fields(off, eagle3_server):
    """The evidence for the note: the request fields an off switch would be are ignored (compiled out,
    server-schema.cpp:198).  If a llama.cpp update honours them, this fails: then send them for baseline."""
    backend = eagle3_server
    plain_body = request_body(backend.caps, AnswerRequest(HELLO, max_tokens=N_TOKENS, fresh_prompt=True))
    runs = []
    for body in (plain_body, plain_body | off):
        with backend.client.stream_events("/v1/chat/completions", body, CancelToken()) as events:
            docs = [json.loads(d) for d in events if d.strip() != "[DONE]"]
        text = "".join((c.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for c in docs)
        runs.append((text, final_timings(docs)))
    (text, timings), (off_text, off_timings) = runs
    assert off_text == text and off_timings["predicted_n"] == timings["predicted_n"] == N_TOKENS
    assert timings["draft_n"] > 0 and off_timings["draft_n"] > 0
    print(f"\n{off}: draft_n {off_timings['draft_n']} (without: {timings['draft_n']})")
