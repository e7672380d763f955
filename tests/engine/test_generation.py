"""The generation loop on real GGUF models: lossless, stoppable, and safe at the edges."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from specchat.engine import (
    Done,
    Error,
    Fallback,
    Mode,
    Prefilled,
    RoundStats,
    SamplingSettings,
    StopReason,
    TokenOrigin,
    TokensEmitted,
)
from specchat.engine.pair import CancelToken, IncompatiblePair, PairConfig, SpeculativePair
from specchat.engine.runtime import LoadedModel, ModelOptions
from specchat.engine.settings import Drafter
from specchat.metrics import Counts

pytestmark = pytest.mark.real_models

CODE_PROMPT = [{"role": "user", "content": "Write a Python function is_prime(n) with a docstring, then show "
                                           "three example calls."}]


def collect(events) -> tuple[list[int], str, Done, list]:
    ids, text, others, done = [], [], [], None
    for ev in events:
        if isinstance(ev, TokensEmitted):
            ids.extend(ev.token_ids)
            text.append(ev.text)
        elif isinstance(ev, Done):
            done = ev
        else:
            others.append(ev)
    assert done is not None, "every generation ends with Done"
    return ids, "".join(text), done, others


@pytest.fixture(scope="module")
def qwen_pair(qwen_target, qwen_draft, tmp_path_factory):
    cfg = PairConfig(qwen_target, qwen_draft, ModelOptions(n_ctx=2048),
                     calibration_cache=tmp_path_factory.mktemp("cal") / "calibration.json")
    with SpeculativePair(cfg) as pair:
        yield pair


@pytest.fixture(scope="module")
def small_pair(smollm, tmp_path_factory):
    """SmolLM2-135M drafting for itself: fast, and the draft always proposes the target's argmax."""
    cfg = PairConfig(smollm, smollm, ModelOptions(n_ctx=512),
                     calibration_cache=tmp_path_factory.mktemp("cal") / "calibration.json")
    with SpeculativePair(cfg) as pair:
        yield pair


def top2_gap(pair: SpeculativePair, context: list[int]) -> float:
    """Gap between the target's two best logits after ``context``, by plain single-token decoding."""
    t = pair.target
    t.clear()
    t.decode(context[:-1], logits="none")
    t.decode(context[-1:], logits="last")
    row = np.sort(t.logits(-1).astype(np.float64))
    t.clear()
    return float(row[-1] - row[-2])


@pytest.mark.parametrize("mode", [Mode.DRAFT, Mode.LOOKUP, Mode.AUTO])
def test_greedy_speculation_equals_plain_decoding_on_the_qwen_pair(qwen_pair, mode):
    prompt = qwen_pair.chat_prompt(CODE_PROMPT).tokens
    qwen_pair.target.clear()
    plain, _, done_plain, _ = collect(qwen_pair.generate(prompt, mode=Mode.BASELINE, max_tokens=96))
    qwen_pair.target.clear()
    spec, _, done_spec, _ = collect(qwen_pair.generate(prompt, mode=mode, max_tokens=96))
    assert done_plain.stop_reason in (StopReason.MAX_TOKENS, StopReason.EOG)
    if mode is Mode.DRAFT:
        assert done_spec.stats.drafted > 0 and done_spec.stats.accepted > 0
    if spec == plain:
        return
    # llama.cpp's batched and single-token evaluations differ in the last bits (docs/ARCHITECTURE.md, "Near-ties"):
    # a difference is allowed only where the target's top two logits are a near-tie
    at = next(i for i, (a, b) in enumerate(zip(plain, spec, strict=False)) if a != b)
    gap = top2_gap(qwen_pair, prompt + plain[:at])
    print(f"{mode.value}: first difference at token {at}, top-2 logit gap {gap:.4f}")
    # measured here: divergences at gaps of 0.0005 to 0.14 in 30 of 90 benchmark runs (docs/benchmarks.md)
    assert gap < 0.25, f"{mode.value} diverged at token {at} where the target was not near a tie (gap {gap:.3f})"


def test_emitted_tokens_say_where_they_came_from(small_pair):
    prompt = small_pair.chat_prompt([{"role": "user", "content": "Count from 1 to 20."}]).tokens
    origins = Counter()
    for ev in small_pair.generate(prompt, mode=Mode.DRAFT, max_tokens=40):
        if isinstance(ev, TokensEmitted):
            origins.update(ev.origins)
            assert len(ev.origins) == len(ev.token_ids)
    assert origins[TokenOrigin.DRAFT] > 0 and origins[TokenOrigin.TARGET] > 0


def test_sampling_with_speculation_matches_plain_sampling(small_pair):
    """At temperature 0.9 the two-token continuations have the same distribution with and without a draft.

    The draft proposes the model's own argmax; a verifier that simply accepted it
    would make every sample the greedy continuation, which this test rejects.
    """
    prompt = small_pair.chat_prompt([{"role": "user", "content": "Name a colour."}]).tokens
    n = 250

    def samples(mode: Mode) -> Counter:
        out = Counter()
        for seed in range(n):
            s = SamplingSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, seed=seed * 7919 + 1)
            ids, _, done, _ = collect(small_pair.generate(prompt, mode=mode, sampling=s, max_tokens=2))
            out[tuple(ids)] += 1
        return out

    plain, spec = samples(Mode.BASELINE), samples(Mode.DRAFT)
    keys = [k for k in plain | spec if plain[k] + spec[k] >= 10]
    table = np.array([[plain[k] for k in keys] + [n - sum(plain[k] for k in keys)],
                      [spec[k] for k in keys] + [n - sum(spec[k] for k in keys)]])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 3, "the prompt must leave the model several likely answers"
    _, p, _, _ = chi2_contingency(table)
    assert p > 0.001, f"speculative sampling differs from plain sampling (p={p:.2g}): {plain} vs {spec}"
    greedy = max(plain, key=plain.get)
    assert spec[greedy] < n * 0.95


def test_incompatible_pair_is_refused_before_anything_loads(qwen_target, smollm, gemma, monkeypatch):
    loads = []
    monkeypatch.setattr(LoadedModel, "__init__", lambda self, *a, **k: loads.append(a))
    with pytest.raises(IncompatiblePair, match="vocabulary sizes differ"):
        SpeculativePair(PairConfig(qwen_target, smollm))
    with pytest.raises(IncompatiblePair, match="tokenizer type differs: 'gpt2' vs 'llama'"):
        SpeculativePair(PairConfig(qwen_target, gemma))
    assert loads == []


def test_cancel_stops_within_one_round_and_keeps_the_partial_answer(small_pair):
    prompt = small_pair.chat_prompt([{"role": "user", "content": "Write a long story about a cat."}]).tokens
    cancel = CancelToken()
    seen = 0
    done = None
    for ev in small_pair.generate(prompt, mode=Mode.DRAFT, max_tokens=400, cancel=cancel):
        if isinstance(ev, TokensEmitted):
            seen += len(ev.token_ids)
            if seen >= 10:
                cancel.cancel()
        if isinstance(ev, Done):
            done = ev
    assert done.stop_reason is StopReason.CANCELLED
    assert 10 <= done.stats.tokens == seen <= 10 + small_pair.controller.settings.k_max + 1


def test_stop_string_ends_the_answer_and_is_not_shown(small_pair):
    prompt = small_pair.chat_prompt([{"role": "user", "content": "Count from 1 to 10, comma separated."}]).tokens
    _, text, done, _ = collect(small_pair.generate(prompt, mode=Mode.DRAFT, max_tokens=60, stop=["5"]))
    assert done.stop_reason is StopReason.STOP_STRING
    assert "4" in text and "5" not in text


def test_context_full_stops_cleanly_and_the_pair_stays_usable(smollm, tmp_path):
    cfg = PairConfig(smollm, smollm, ModelOptions(n_ctx=96), calibration_cache=tmp_path / "c.json")
    with SpeculativePair(cfg) as pair:
        prompt = pair.chat_prompt([{"role": "user", "content": "Write a long story about a cat."}]).tokens
        ids, _, done, _ = collect(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=1000))
        assert done.stop_reason is StopReason.CONTEXT_FULL
        assert "context full" in done.message
        # every token but the newest sits in the KV cache (llama.cpp rounds n_ctx up)
        assert len(prompt) + len(ids) == pair.target.n_ctx + 1
        # the caches were not corrupted: the same request gives the same answer again
        again, _, _, _ = collect(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=1000))
        assert again == ids


def test_prompt_longer_than_the_context_is_an_error_not_a_crash(smollm, tmp_path):
    cfg = PairConfig(smollm, None, ModelOptions(n_ctx=64), calibration_cache=tmp_path / "c.json")
    with SpeculativePair(cfg) as pair:
        prompt = pair.chat_prompt([{"role": "user", "content": "word " * 400}]).tokens
        _, _, done, others = collect(pair.generate(prompt, mode=Mode.AUTO, max_tokens=10))
        assert done.stop_reason is StopReason.ERROR
        holds = f"context holds {pair.target.n_ctx}"
        assert any(isinstance(e, Error) and holds in e.message for e in others)
        short = pair.chat_prompt([{"role": "user", "content": "Hi"}]).tokens
        ids, _, done, _ = collect(pair.generate(short, mode=Mode.AUTO, max_tokens=5))
        assert done.stop_reason in (StopReason.MAX_TOKENS, StopReason.EOG) and ids


def test_draft_mode_without_a_draft_says_so(smollm, tmp_path):
    cfg = PairConfig(smollm, None, ModelOptions(n_ctx=256), calibration_cache=tmp_path / "c.json")
    with SpeculativePair(cfg) as pair:
        prompt = pair.chat_prompt([{"role": "user", "content": "Hi"}]).tokens
        _, _, done, others = collect(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=5))
        assert any(isinstance(e, Fallback) and e.permanent and "no draft model" in e.reason for e in others)
        assert done.stats.drafted == 0


def test_follow_up_turn_reuses_the_cached_prefix(small_pair):
    messages = [{"role": "user", "content": "Say hello."}]
    prompt = small_pair.chat_prompt(messages).tokens
    ids, text, _, _ = collect(small_pair.generate(prompt, mode=Mode.AUTO, max_tokens=20))
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Again."}]
    prompt2 = small_pair.chat_prompt(messages).tokens
    prefilled = [e for e in small_pair.generate(prompt2, mode=Mode.AUTO, max_tokens=3)
                 if type(e).__name__ == "Prefilled"]
    assert prefilled[0].reused_tokens >= len(prompt)


def test_the_answer_totals_are_the_sum_of_its_rounds(small_pair):
    prompt = small_pair.chat_prompt([{"role": "user", "content": "Count from 1 to 20."}]).tokens
    _, _, done, others = collect(small_pair.generate(prompt, mode=Mode.AUTO, max_tokens=40))
    rounds = [e for e in others if isinstance(e, RoundStats)]
    prefilled = next(e for e in others if isinstance(e, Prefilled))
    assert rounds and all(isinstance(r.drafter, Drafter) for r in rounds)
    c = done.stats.counts
    assert Counts.total(r.counts for r in rounds) == replace(
        c, tokens=0, decoded=0, prompt_tokens=0, reused_tokens=0, prefill_s=0.0, decode_s=0.0)
    assert (c.prompt_tokens, c.reused_tokens, c.prefill_s) == (len(prompt), prefilled.reused_tokens,
                                                               prefilled.seconds)
    assert c.decoded == c.tokens - 1 and c.decode_s >= c.rounds_s  # the decode clock also runs between rounds
