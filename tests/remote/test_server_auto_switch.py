"""``auto`` on SpecChat's managed llama-server: per task, speculation on (the server's drafter) or off (the
same server restarted without it), from the rates measured there, and why in the answer's stats line.

The real llama-server (scripts/test_server.py) with a tiny qwen3 target and its EAGLE-3 head
(tests/helpers/tiny_drafters.py), chosen and opened as the window does.  The choice itself, with fake
rates: tests/backends/test_server_auto.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.tiny_drafters import Tokenizer, write_eagle3, write_qwen3_target
from specchat.backends.choose import choose
from specchat.backends.factory import open_backend
from specchat.backends.remote import RemoteBackend
from specchat.config import AppConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.engine.settings import Mode
from specchat.metrics import Counts
from specchat.profile import Profile
from specchat.remote.llama_server import MANAGED

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(300)]

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


def test_without_stored_rates_auto_measures_both_sides_from_its_own_answers(eagle3):
    """No store (``specchat serve``, the CLI): each answer's rate is recorded by the backend, so the choice
    moves from measuring to deciding as answers come."""
    notes = [ask(eagle3, task="summary")[1].stats.notes[0] for _ in range(6)]
    assert notes[0].startswith("auto: llama-server's draft-eagle3 on for summary to measure it: 0 of 3")
    assert notes[1] == ("auto: speculation off for summary to measure it: 1 of 3 answers measured with "
                        "speculation on, 0 of 3 with it off")
    assert "2 of 3 answers measured with speculation on, 2 of 3 with it off" in notes[4]
    decided = ask(eagle3, task="summary")[1].stats.notes[0]  # three a side now: a figure, either way
    assert "x plain over 6 answers" in decided and "to measure it" not in decided
    print("\n" + "\n".join([*notes, decided]))
