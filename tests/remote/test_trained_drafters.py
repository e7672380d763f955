"""Trained drafters on the real llama-server (the vendored llama.cpp's, scripts/test_server.py), through
SpecChat's own path: ``choose`` (a chat's managed llama-server) → ``open_backend`` → ``ManagedServer``.

For each of draft-eagle3, draft-mtp (the target's own MTP layers, and an ``mtp-*.gguf`` sidecar),
draft-dflash and draft-dspark, a tiny target and drafter (tests/helpers/tiny_drafters.py: the loader's
names and shapes, random weights, Qwen2.5's tokenizer) answer 32 tokens at temperature 0, and:

- the answer is the target's own, token for token: the same target started with no drafter
  (``--spec-type none``) gives the same text in the same number of tokens (lossless);
- the server drafted for it: SpecChat's ``Done`` stats carry drafted tokens > 0, the same count as
  llama-server's final ``timings.draft_n`` for the request (the telemetry path, end to end);
- SpecChat recognised the drafter from its header and ``check_head`` passed it.

And a head llama.cpp refuses (an MTP sidecar of the wrong hidden size: speculative.cpp:1376 aborts;
an EAGLE-3 head with 2 target layers: eagle3.cpp:9 refuses the load) is refused by ``choose`` before
any start, with the field ``check_head`` names; started anyway, it ends as one ``ServerError`` line
carrying llama.cpp's reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.tiny_drafters import KINDS, TinyPair, Tokenizer, write_all, write_eagle3, write_mtp_sidecar
from specchat.backends.choose import choose
from specchat.backends.factory import open_backend
from specchat.backends.pairs import PairError
from specchat.backends.remote import ManagedSpec, RemoteBackend, RemoteConfig
from specchat.config import AppConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, TokensEmitted
from specchat.engine.pair import CancelToken
from specchat.models.drafter_heads import DrafterKind, check_head, check_mtp_target, drafter_kind
from specchat.models.gguf_header import read_file_header
from specchat.profile import Profile
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import MANAGED

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(300)]

N_TOKENS = 32
# One thread: the tiny models cost ~10 ms a token, and on a busy 2-core machine two llama.cpp threads
# spend most of it waiting for each other at every barrier (an EAGLE-3 answer: 0.4 s with one, 15-56 s
# with two while other tests ran beside it).
THREADS = 1
PROMPT = ({"role": "user", "content": "Count to ten."},)
EXPECTED_KIND = {
    "draft-eagle3": DrafterKind.EAGLE3, "draft-mtp": DrafterKind.MTP_TARGET, "draft-mtp-sidecar": DrafterKind.MTP_HEAD,
    "draft-dflash": DrafterKind.DFLASH, "draft-dspark": DrafterKind.DSPARK,
}

Answer = tuple[str, Done, list[dict]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, qwen_draft: Path) -> dict[str, TinyPair]:
    """Every kind's tiny target and drafter, with the pinned Qwen2.5-Coder-0.5B's tokenizer."""
    return write_all(tmp_path_factory.mktemp("tiny-drafters"), qwen_draft)


@pytest.fixture(scope="module")
def run(llama_server_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Answer]]:
    """Answer with a managed llama-server for (target, draft, spec type), chosen and opened as the window
    does; the binary is found on PATH as a user's would be."""
    profile = Profile.at(tmp_path_factory.mktemp("profile"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{llama_server_binary.parent}{os.pathsep}{os.environ.get('PATH', '')}")

        def answer(target: Path, draft: Path | None, spec_type: str, *, unchecked: bool = False) -> Answer:
            """``unchecked``: start the server as asked, past choose's check of the head (llama.cpp's own say)."""
            config = RemoteConfig.managed_server(ManagedSpec(target, draft, spec_type=spec_type, n_ctx=1024,
                                                             threads=THREADS)) if unchecked else \
                choose(AppConfig.defaults(), profile, backend=MANAGED, target=target, draft=draft,
                       spec_type=spec_type, n_ctx=1024, threads=THREADS)
            backend = open_backend(config, CancelToken())
            assert isinstance(backend, RemoteBackend)
            chunks: list[dict] = []
            try:
                events = list(backend.answer(AnswerRequest(PROMPT, max_tokens=N_TOKENS), CancelToken(),
                                             observe=chunks.append))
            finally:
                backend.close()
            done = events[-1]
            assert isinstance(done, Done), events[-1]
            return "".join(e.text for e in events if isinstance(e, TokensEmitted)), done, chunks

        yield answer


@pytest.fixture(scope="module")
def plain(run: Callable[..., Answer]) -> Callable[[Path], Answer]:
    """The target's answer with no drafter (``--spec-type none``), once per target."""
    seen: dict[Path, Answer] = {}

    def get(target: Path) -> Answer:
        if target not in seen:
            seen[target] = run(target, None, "none")
        return seen[target]

    return get


def final_timings(chunks: list[dict]) -> dict:
    return [c["timings"] for c in chunks if "timings" in c][-1]


@pytest.mark.parametrize("kind", KINDS)
def test_each_trained_drafter_drafts_and_the_answer_is_the_targets_own(kind, tiny, run, plain):
    pair = tiny[kind]
    target = read_file_header(pair.target)
    if pair.draft is None:
        assert drafter_kind(target) is EXPECTED_KIND[kind] and check_mtp_target(target) is None
    else:
        head = read_file_header(pair.draft)
        assert drafter_kind(head) is EXPECTED_KIND[kind] and check_head(target, head) is None
    assert EXPECTED_KIND[kind].spec_type == pair.spec_type

    text, done, chunks = run(pair.target, pair.draft, pair.spec_type)
    plain_text, plain_done, _ = plain(pair.target)

    assert plain_done.stats.tokens == N_TOKENS and plain_done.stats.counts.drafted == 0
    assert done.stats.tokens == N_TOKENS and text == plain_text  # lossless: the target's own answer
    counts = done.stats.counts
    timings = final_timings(chunks)
    assert counts.drafted > 0 and (counts.drafted, counts.accepted) == (timings["draft_n"], timings["draft_n_accepted"])
    print(f"\n{kind}: {pair.target.name} + {pair.draft.name if pair.draft else '(own MTP layers)'}: "
          f"{done.stats.tokens} tokens = plain; drafted {counts.drafted}, accepted {counts.accepted} "
          f"in {counts.rounds_with_draft} rounds")


@pytest.mark.parametrize(("make", "target_kind", "spec_type", "named", "llama_says"), [
    (lambda tok, out: write_mtp_sidecar(out / "mtp-wide.gguf", tok, seed=11, n_embd=64), "draft-mtp", "draft-mtp",
     "qwen35.embedding_length is 64", "MTP input row width must match the target h_nextn width"),
    (lambda tok, out: write_eagle3(out / "eagle3-two.gguf", tok, seed=12, target_layers=(1, 3)), "draft-eagle3",
     "draft-eagle3", "eagle3.target_layers has 2 entries", "EAGLE3 requires exactly 3 entries"),
], ids=["mtp-sidecar-of-another-width", "eagle3-with-2-target-layers"])
def test_a_head_llama_cpp_refuses_is_one_line_with_its_reason(make, target_kind, spec_type, named, llama_says,
                                                             tiny, run, qwen_draft, tmp_path):
    head = make(Tokenizer.from_gguf(qwen_draft), tmp_path)
    target = tiny[target_kind].target
    line = check_head(read_file_header(target), read_file_header(head))
    assert line is not None and named in line
    with pytest.raises(PairError, match=named):  # the chat's path refuses it before any start
        run(target, head, spec_type)
    with pytest.raises(ServerError) as caught:  # started anyway: llama.cpp's own reason, in one line
        run(target, head, spec_type, unchecked=True)
    message = str(caught.value)
    assert llama_says in message and "\n" not in message
    print(f"\n{head.name}: SpecChat: {line}\n  llama-server: {message}")
