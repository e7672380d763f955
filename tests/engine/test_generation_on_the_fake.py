"""The generation loop and the controller on the fake table model (tests/helpers/fakes.py): no GGUF file.

The fake's target is a table, so the right answer is known in advance: every mode must
emit exactly the target's greedy answer (lossless), whatever the draft gets wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fakes import ANSWERS, FakeClock, FakeSpec, fake_pair
from specchat.engine import Done, Fallback, Mode, RoundStats, StopReason, TokensEmitted
from specchat.engine.pair import CancelToken, PairConfig

MSGS = [{"role": "user", "content": "hello"}]


@pytest.fixture(autouse=True)
def fake_time(monkeypatch):
    """Rounds cost what the fake's table says: the controller's choices (K, when to fall back) are the
    same on every machine, not the machine's microsecond jitter."""
    return FakeClock().install(monkeypatch)


def run(pair, mode: Mode, max_tokens: int = 500, cancel_after: int | None = None):
    prompt = pair.chat_prompt(MSGS).tokens
    cancel = CancelToken()
    text, rounds, notes, done = [], [], [], None
    for ev in pair.generate(prompt, mode=mode, max_tokens=max_tokens, cancel=cancel):
        if isinstance(ev, TokensEmitted):
            text.append(ev.text)
            if cancel_after is not None and len("".join(text)) >= cancel_after:
                cancel.cancel()
        elif isinstance(ev, RoundStats):
            rounds.append(ev)
        elif isinstance(ev, Fallback):
            notes.append(ev)
        elif isinstance(ev, Done):
            done = ev
    return "".join(text), rounds, notes, done


def make(spec: FakeSpec, draft: bool = True):
    return fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf") if draft else None), spec)


def _greedy(pair, prompt, n):
    ctx, out = list(prompt), []
    for _ in range(n):
        t = pair.target.next_token(ctx)
        if pair.target.is_eog(t):
            break
        out.append(t)
        ctx.append(t)
    return out


@pytest.mark.parametrize("mode", list(Mode))
def test_every_mode_emits_exactly_the_targets_greedy_answer(mode):
    pair = make(FakeSpec(answer_tokens=150, miss_every=3))
    text, rounds, _, done = run(pair, mode)
    prompt = pair.chat_prompt(MSGS).tokens
    assert text == bytes(_greedy(pair, prompt, 1000)).decode()
    assert len(text) == 150 and done.stop_reason is StopReason.EOG
    assert text[:20] in "".join(ANSWERS) * 2


def test_a_draft_that_is_sometimes_wrong_is_partly_accepted_and_the_counts_add_up():
    pair = make(FakeSpec(answer_tokens=300, miss_every=10))
    _, rounds, _, done = run(pair, Mode.DRAFT)
    s = done.stats
    assert s.drafted > 0 and 0.6 < s.token_acceptance < 1.0
    assert s.accepted == sum(r.accepted for r in rounds)
    assert s.rounds == len(rounds) and s.drafted == sum(r.drafted for r in rounds)
    assert s.tokens == 300


def test_a_perfect_draft_is_accepted_whole_up_to_the_end_of_the_answer():
    pair = make(FakeSpec(answer_tokens=200, miss_every=0))
    _, rounds, _, done = run(pair, Mode.DRAFT)
    *body, last = [r for r in rounds if r.drafted]
    assert len(body) > 20 and all(r.accepted == r.drafted for r in body)
    # the last round drafts the end of turn, which is accepted; what the draft made up after it is not
    assert last.accepted >= 1 and last.emitted == last.accepted and done.stop_reason is StopReason.EOG
    assert done.stats.tokens == 200


def test_stop_takes_effect_within_a_round():
    pair = make(FakeSpec(answer_tokens=400))
    text, rounds, _, done = run(pair, Mode.DRAFT, cancel_after=50)
    assert done.stop_reason is StopReason.CANCELLED
    assert 50 <= len(text) <= 50 + pair.config.controller.k_max + 1


def test_the_context_filling_up_ends_the_answer_with_a_reason():
    pair = make(FakeSpec(answer_tokens=5000, n_ctx=256))
    text, _, _, done = run(pair, Mode.DRAFT, max_tokens=5000)
    assert done.stop_reason is StopReason.CONTEXT_FULL and "context full" in done.message
    assert len(pair.target.tokens) <= 256


def test_a_model_that_cannot_roll_back_runs_plain_and_says_why():
    pair = make(FakeSpec(answer_tokens=40, can_trim=False))
    text, rounds, notes, done = run(pair, Mode.DRAFT)
    assert len(text) == 40 and all(r.drafted == 0 for r in rounds)
    assert notes and notes[0].permanent and "cannot roll back" in notes[0].reason


def test_a_poor_draft_makes_the_guard_rails_fall_back_and_say_so():
    # the draft is always wrong, and a draft decode costs what a verify does: drafting cannot pay
    pair = make(FakeSpec(answer_tokens=400, miss_every=1, decode_s=0.002,
                         costs={n: 0.002 for n in (1, 2, 3, 5, 9)}, draft_cost_s=0.002))
    _, rounds, notes, done = run(pair, Mode.DRAFT)
    assert any("acceptance" in n.reason for n in notes)
    assert any(r.fallback for r in rounds) and done.stats.fallback_rounds > 0


def test_the_answer_says_which_drafter_ran_and_how_much_of_its_draft_was_accepted():
    pair = make(FakeSpec(answer_tokens=200))
    _, rounds, _, done = run(pair, Mode.DRAFT)
    drafted = sum(r.drafted for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    assert drafted > 0 and done.stats.drafters == (("model", drafted, accepted),)
    assert done.stats.notes == ()


def test_auto_that_refuses_the_draft_model_says_why_in_a_few_words_for_the_stats_line():
    # a draft decode costs what a verify does: the draft model cannot pay even if always right
    pair = make(FakeSpec(answer_tokens=120, costs={n: 0.002 for n in (1, 2, 3, 5, 9)}, draft_cost_s=0.002))
    _, rounds, notes, done = run(pair, Mode.AUTO)
    assert notes and notes[0].permanent
    assert done.stats.notes[0].startswith("the draft model cannot pay here, best case ")
    assert done.stats.notes[0].endswith("x") and "model" not in {name for name, _, _ in done.stats.drafters}
    # the fake's rounds cost far less than its calibration says: auto re-checks, and says so too
    assert all(n.startswith("re-checked at ") for n in done.stats.notes[1:])
    assert all(r.drafter != "model" for r in rounds)


def test_auto_measures_how_often_the_draft_agrees_with_the_target_over_the_prompt():
    """Where decodes replay CUDA graphs, auto compares both models' greedy choices at the prompt's last
    positions at prefill (at most 64, the rows of logits both contexts hold) and tells the controller
    (DraftController.new_prompt); no other mode, and no other backend, pays for the rows.  The fake's models
    agree on every prompt position and the draft misses the answer's first token (miss_every=1): the last
    row is that token."""
    for mode, shaped in ((Mode.DRAFT, True), (Mode.AUTO, False)):
        other = make(FakeSpec(miss_every=1, shape_sensitive=shaped))
        run(other, mode, max_tokens=4)
        assert other.controller.prompt_agreement is None
    pair = make(FakeSpec(miss_every=1, shape_sensitive=True))
    run(pair, Mode.AUTO, max_tokens=4)
    rows = min(64, len(pair.chat_prompt(MSGS).tokens))
    assert pair.controller.prompt_agreement == pytest.approx((rows - 1) / rows)
    # the same prompt again (Regenerate) is the same text: both caches hold it, nothing is measured
    pair.controller.new_prompt(0.5)
    run(pair, Mode.AUTO, max_tokens=4)
    assert pair.controller.prompt_agreement == 0.5
