"""Stop during a decode: llama.cpp's abort callback ends it within one graph node, the KV cache is rolled
back to what it held before that decode, and the pair answers the next question as if the stopped one
had never started.

Deterministic, no clock: the answer is stopped between two llama.cpp calls of one decode (after the first
chunk of a long prefill), so the next chunk starts with the flag set and llama.cpp aborts it at
its first node; without the callback that chunk would run to its end and the decode would succeed.
How fast a Stop lands on a long prefill is measured, not asserted (scripts/measure_stop.py).
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from helpers.fakes import FakeSpec, fake_pair
from specchat.engine import Done, Mode, Prefilled, StopReason, TokensEmitted
from specchat.engine.cancel import CancelToken
from specchat.engine.pair import PairConfig, SpeculativePair
from specchat.engine.runtime import DecodeAborted, LoadedModel, ModelOptions

# small chunks, so that a prompt of a few hundred tokens is several llama.cpp calls; one thread: the
# machine's cores may be busy with other tests
OPTIONS = ModelOptions(n_ctx=1024, n_batch=128, n_threads=1)
LONG = "Here is a list of fruits, one per line, with a note on each. " + " ".join(
    f"Item {i}: the fruit number {i} is sweet and round." for i in range(24))


def cancel_after_calls(monkeypatch: pytest.MonkeyPatch, cancel: CancelToken, n: int, ctx=None) -> list[int]:
    """Cancel ``cancel`` once llama_decode has returned ``n`` times (on ``ctx`` only, if given); the
    return codes seen, in order."""
    real = llama_cpp.llama_decode
    codes: list[int] = []
    seen = [0]

    def decode(c, batch):  # noqa: ANN001 (ctypes arguments)
        rc = real(c, batch)
        codes.append(rc)
        if ctx is None or ctypes_address(c) == ctypes_address(ctx):
            seen[0] += 1
            if seen[0] == n:
                cancel.cancel()
        return rc

    monkeypatch.setattr(llama_cpp, "llama_decode", decode)
    return codes


def ctypes_address(p) -> int:  # noqa: ANN001
    import ctypes

    return ctypes.cast(p, ctypes.c_void_p).value or 0


@pytest.mark.real_models
def test_a_stopped_decode_is_aborted_and_rolled_back_to_what_the_cache_held(smollm, monkeypatch):
    with LoadedModel(smollm, OPTIONS) as model:
        tokens = model.tokenize(LONG, add_special=True)
        assert len(tokens) > 40 + 2 * OPTIONS.n_batch  # three chunks at least
        model.decode(tokens[:40], logits="none")
        cancel = CancelToken()
        codes = cancel_after_calls(monkeypatch, cancel, 1)
        with model.abort_on(cancel), pytest.raises(DecodeAborted, match="stopped"):
            model.decode(tokens[40:], logits="last")
        assert codes == [0, 2]  # the first chunk ran, the second was aborted by the callback, no third
        assert model.tokens == tokens[:40]
        monkeypatch.undo()

        model.decode(tokens[40:], logits="last")  # the context is usable, and holds what it says
        after_stop = model.logits(-1).copy()
    with LoadedModel(smollm, OPTIONS) as fresh:
        fresh.decode(tokens[:40], logits="none")
        fresh.decode(tokens[40:], logits="last")
        assert (after_stop == fresh.logits(-1)).all()


@pytest.mark.real_models
def test_outside_abort_on_a_cancelled_token_aborts_nothing(smollm):
    with LoadedModel(smollm, OPTIONS) as model:
        cancel = CancelToken()
        with model.abort_on(cancel):
            cancel.cancel()
            with pytest.raises(DecodeAborted):
                model.decode(model.tokenize("Hello there", add_special=True))
        model.decode(model.tokenize("Hello there", add_special=True))  # the flag went with the block
        assert len(model.tokens) > 0


@pytest.fixture(scope="module")
def long_pair(smollm, tmp_path_factory):
    cfg = PairConfig(smollm, smollm, OPTIONS,
                     calibration_cache=tmp_path_factory.mktemp("cal") / "calibration.json")
    with SpeculativePair(cfg) as pair:
        yield pair


def answer(pair: SpeculativePair, question: str, mode: Mode, cancel: CancelToken | None = None
           ) -> tuple[list[int], Done, bool]:
    prompt = pair.chat_prompt([{"role": "user", "content": question}]).tokens
    ids: list[int] = []
    done, prefilled = None, False
    for ev in pair.generate(prompt, mode=mode, max_tokens=16, cancel=cancel or CancelToken()):
        if isinstance(ev, TokensEmitted):
            ids.extend(ev.token_ids)
        elif isinstance(ev, Prefilled):
            prefilled = True
        elif isinstance(ev, Done):
            done = ev
    assert done is not None
    return ids, done, prefilled


SHORT, LONG_QUESTION = "Name a fruit.", "Name a fruit.\n" + LONG + "\nWhich fruit is number 7?"


def start_over(pair: SpeculativePair) -> None:
    """Empty caches, then the short question: both caches hold its prompt, which the long one starts with."""
    pair.target.clear()
    pair.draft.clear()
    answer(pair, SHORT, Mode.BASELINE)
    pair.draft.clear()
    pair.draft.decode(pair.chat_prompt([{"role": "user", "content": SHORT}]).tokens, logits="none")


@pytest.mark.real_models
@pytest.mark.parametrize("where", ["target", "draft"])
def test_stop_during_a_long_prefill_ends_the_answer_and_the_next_one_is_as_without_it(long_pair, monkeypatch,
                                                                                      where):
    """The long question is stopped mid-prefill, on the target or on the draft (whose prefill follows the
    target's).  Each cache then holds a prefix of the prompt and nothing else (the rest decodes to the same
    logits on both: the same model, the same prefix), and the question asked again answers what a pair that
    never saw the stop answers (plain decoding: the same shapes whatever the controller learned)."""
    pair = long_pair
    long_prompt = pair.chat_prompt([{"role": "user", "content": LONG_QUESTION}]).tokens
    start_over(pair)
    cancel = CancelToken()
    model = pair.target if where == "target" else pair.draft
    codes = cancel_after_calls(monkeypatch, cancel, 1, ctx=model.ctx)
    ids, done, prefilled = answer(pair, LONG_QUESTION, Mode.DRAFT, cancel)
    monkeypatch.undo()
    assert 2 in codes  # llama.cpp aborted a decode
    assert done.stop_reason is StopReason.CANCELLED and ids == [] and not prefilled

    assert 0 < len(model.tokens) < len(long_prompt) - OPTIONS.n_batch  # the stopped model is back at the prefix it held
    assert model.tokens == long_prompt[:len(model.tokens)]
    kept = min(m.keep_prefix(long_prompt) for m in (pair.target, pair.draft))  # as the next answer does
    rows = []
    for m in (pair.target, pair.draft):
        m.trim(kept)
        m.decode(long_prompt[kept:], logits="last")
        rows.append(m.logits(-1).copy())
    assert (rows[0] == rows[1]).all()

    start_over(pair)
    cancel = CancelToken()
    cancel_after_calls(monkeypatch, cancel, 1, ctx=model.ctx)
    answer(pair, LONG_QUESTION, Mode.DRAFT, cancel)
    monkeypatch.undo()
    after_stop, done_after, _ = answer(pair, LONG_QUESTION, Mode.BASELINE)
    start_over(pair)  # the same history without the stop
    without_stop, done_without, _ = answer(pair, LONG_QUESTION, Mode.BASELINE)
    assert after_stop == without_stop and len(after_stop) > 0 and done_after.stop_reason == done_without.stop_reason


# -- the same on the fake (fast tier) ----------------------------------------------------------------

def test_on_the_fake_a_stop_before_the_prefill_ends_shows_nothing_and_decodes_nothing_more():
    pair = fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf")), FakeSpec(answer_tokens=100))
    prompt = pair.chat_prompt([{"role": "user", "content": "hello"}]).tokens
    cancel = CancelToken()
    cancel.cancel()  # Stop pressed while the answer's prefill runs
    events = list(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=50, cancel=cancel))
    assert not any(isinstance(e, TokensEmitted | Prefilled) for e in events)
    assert isinstance(events[-1], Done) and events[-1].stop_reason is StopReason.CANCELLED
    assert pair.target.decode_calls == 1 and pair.target.tokens == []  # the prefill's decode, aborted

    again = list(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=50, cancel=CancelToken()))
    assert again[-1].stop_reason is StopReason.MAX_TOKENS  # the next answer runs: nothing was left armed
