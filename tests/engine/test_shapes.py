"""The shapes a round feeds llama.cpp (engine/shapes.py): steady where CUDA graphs make them cost.

The fake records every decode's batch size and counts the decodes llama.cpp's CUDA backend
would re-capture a graph for (it replays only after two calls of one shape).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fakes import FakeClock, FakeSpec, fake_pair
from specchat.engine import Done, Mode, RoundStats, TokensEmitted
from specchat.engine.pair import PairConfig
from specchat.engine.settings import ControllerSettings
from specchat.engine.shapes import CATCH_UP_ONE_BY_ONE, VerifyShape

MSGS = [{"role": "user", "content": "hello"}]


@pytest.fixture(autouse=True)
def fake_time(monkeypatch):
    """Rounds cost what the fake's table says, re-captures included: the controller's choices, which these
    tests count the shapes of, are then the same on every machine (timed for real, the fake's decodes
    take microseconds and the choices follow the machine's jitter)."""
    return FakeClock().install(monkeypatch)
# lookup drafts every proposal it has, 2 tokens of it: the shapes, not the controller's choices, are tested
EVERY_PROPOSAL = ControllerSettings(k_min=2, lookup_k_max=2, min_gain=0.0)


def answer(shape_sensitive: bool, mode: Mode, *, miss_every: int = 4, max_tokens: int = 400,
           settings: ControllerSettings | None = None):
    pair = fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf"), controller=settings or ControllerSettings()),
                     FakeSpec(shape_sensitive=shape_sensitive, miss_every=miss_every, answer_tokens=400))
    prompt = pair.chat_prompt(MSGS).tokens
    tokens, rounds, done = [], [], None
    for ev in pair.generate(prompt, mode=mode, max_tokens=max_tokens):
        if isinstance(ev, TokensEmitted):
            tokens += ev.token_ids
        elif isinstance(ev, RoundStats):
            rounds.append(ev)
        elif isinstance(ev, Done):
            done = ev
    return pair, tokens, rounds, done


def assert_draft_shapes_steady(pair) -> None:
    """After the prompt every draft decode is one token, but for the long catch-ups after rounds
    the draft did not run (a fallback to plain, lookup in auto), which go as one batch; each of
    those costs at most three re-captures (its own and the next two steps')."""
    long = [n for n in pair.draft.shapes[1:] if n != 1]
    assert all(n > CATCH_UP_ONE_BY_ONE for n in long), pair.draft.shapes
    assert pair.draft.recaptures(since=1) <= 2 + 3 * len(long)


@pytest.mark.parametrize("miss_every", [0, 3, 4, 7])
def test_on_a_shape_sensitive_backend_every_draft_decode_is_one_token_and_the_answer_is_unchanged(miss_every):
    plain = answer(False, Mode.BASELINE, miss_every=miss_every)[1]

    pair, tokens, rounds, _ = answer(True, Mode.DRAFT, miss_every=miss_every)

    assert tokens == plain  # lossless: the padding rows are never sampled
    assert sum(r.drafted for r in rounds) > 50
    assert_draft_shapes_steady(pair)


def test_on_a_cpu_the_draft_still_catches_up_in_one_batch():
    """Nothing changes where shapes cost nothing: a fully accepted draft is caught up in one decode."""
    pair, _tokens, rounds, _ = answer(False, Mode.DRAFT, miss_every=0)

    assert any(r.accepted == r.drafted > 0 for r in rounds)
    assert 2 in pair.draft.shapes[1:]


@pytest.mark.parametrize("mode", [Mode.DRAFT, Mode.LOOKUP, Mode.AUTO])
def test_the_verify_batch_keeps_its_size_across_rounds(mode, fake_time):
    settings = EVERY_PROPOSAL if mode is Mode.LOOKUP else None
    plain = answer(False, Mode.BASELINE)[1]
    loose_pair, _t, loose_rounds, _ = answer(False, mode, settings=settings)

    start = fake_time()
    pair, tokens, rounds, _ = answer(True, mode, settings=settings)
    took = fake_time() - start

    assert tokens == plain
    verify = pair.target.shapes[1:]  # every decode after the prompt is a round's verify
    assert len(verify) == len(rounds)
    if mode is Mode.AUTO:
        # auto changes K where the text changes what pays (prompt lookup finds the fake's answer repeating
        # and drafts 16 tokens of it): each change is priced, and all of them cost little of the answer
        assert pair.target.recaptures(since=1) * FakeClock.RECAPTURE_S < 0.1 * took
    else:
        assert pair.target.recaptures(since=1) <= max(3, len(rounds) // 10)
        # the same choices as the loop that ignores shapes (auto's differ: it prices the sizes), fewer changes
        assert pair.target.recaptures(since=1) <= loose_pair.target.recaptures(since=1)
    assert_draft_shapes_steady(pair)  # and the draft's, whatever the mode
    if mode is Mode.LOOKUP:  # proposals of 2 tokens and none: the batch holds 3 through short dips
        assert 2 in {r.drafted for r in rounds} and max(r.drafted for r in loose_rounds) == 2
        assert max(r.verify_rows for r in rounds) == 3
        assert pair.target.recaptures(since=1) < loose_pair.target.recaptures(since=1) / 2
    if mode is Mode.AUTO:  # the draft model's short catch-ups went one by one
        assert pair.draft.recaptures(since=1) < loose_pair.draft.recaptures(since=1) / 2


def test_plain_decoding_is_never_padded():
    pair, _tokens, _rounds, _ = answer(True, Mode.BASELINE)
    assert set(pair.target.shapes[1:]) == {1}


def linear(per_row: float):
    return lambda n: 1.0 + per_row * (n - 1)  # seconds for a verify of n rows


def test_the_held_size_grows_at_once_and_shrinks_once_padding_has_cost_a_change():
    shape = VerifyShape(linear(0.25), recapture_s=0.5)  # a change: two re-captured calls, 1.0 s
    assert shape.size_for(4, room=100) == 4
    assert shape.size_for(6, room=100) == 6  # a round that needs more gets it at once
    assert shape.size_for(3, room=100) == 6  # wastes 0.75 s of padding: less than a change
    assert shape.size_for(2, room=100) == 3  # 0.75 + 1.0 >= 1.0: shrinks to the largest need of the dip
    assert shape.changes == 2


def test_a_need_that_fits_exactly_starts_the_waste_over():
    shape = VerifyShape(linear(0.25), recapture_s=0.5)
    assert [shape.size_for(n, room=100) for n in (5, 4, 5, 4, 5, 4)] == [5] * 6  # 0.25 s, then again from 0
    assert shape.changes == 0


def test_a_probe_gets_its_rows_for_its_own_round_and_the_held_size_stays():
    """A probe drafts one round to learn; growing the held size for it left the plain rounds after it
    padded until the waste paid for a change back (simulated H100 chat: 2.5 plain tokens a probe)."""
    shape = VerifyShape(linear(0.25), recapture_s=0.5)
    assert [shape.size_for(1, room=100) for _ in range(3)] == [1, 1, 1]
    assert shape.size_for(5, room=100, one_off=True) == 5 and shape.fresh  # a new size: re-captured
    assert [shape.size_for(1, room=100) for _ in range(3)] == [1, 1, 1]  # not padded to the probe's 5
    assert shape.changes == 0
    assert shape.size_for(3, room=100, one_off=True) == 3 and shape.size_for(6, room=100) == 6  # a plan grows it
    assert shape.size_for(5, room=100, one_off=True) == 6  # a probe inside the held size is padded as any round


def test_one_off_rounds_in_a_row_keep_the_size_the_backend_replays_where_padding_costs_less_than_a_change():
    """A draft model that usually drafts briefly gets rows for each round of a run; at a confidence stop its
    drafts vary in length, and each length of its own re-captured (simulated H100 JSON after a chat: 6 of 13
    rounds)."""
    shape = VerifyShape(linear(0.25), recapture_s=0.5)  # a change: two re-captured calls, 1.0 s
    given = [shape.size_for(n, room=100, one_off=True) for n in (9, 9, 9, 7, 9, 6, 9, 3)]
    # 7 and 6 rows fit in the replayed 9 for 0.5 and 0.75 s of padding; 3 rows would waste 1.5 s
    assert given == [9, 9, 9, 9, 9, 9, 9, 3]
    assert shape.size_for(8, room=100, one_off=True) == 8  # 3 was given last: 9 is no longer replayed
    # 8 is replayed now, but a context with room for 7 rows is never padded past them
    assert shape.size_for(8, room=100, one_off=True) == 8 and shape.size_for(6, room=7, one_off=True) == 6
    assert shape.changes == 0 and shape.size_for(1, room=100) == 1  # the held size never grew for them


def test_one_off_rounds_inside_the_held_size_do_not_keep_it_for_the_plain_rounds_between_them():
    """Prompt lookup's 3-token tries fit the held 4 rows exactly; had each started the waste over, the plain
    rounds between them would be padded to 4 rows for as long as lookup kept trying (simulated H100 summary:
    0.91x plain over an answer)."""
    shape = VerifyShape(linear(0.25), recapture_s=0.5)  # a change: two re-captured calls, 1.0 s
    assert shape.size_for(4, room=100) == 4  # a run of drafts grew it
    given = [shape.size_for(n, room=100, one_off=one_off) for n, one_off in [(4, True), (1, False)] * 3]
    # 0.75 s of padding a plain round: the second plain round reaches a change and shrinks to one row
    assert given == [4, 4, 4, 1, 4, 1]
    assert shape.size == 1 and shape.changes == 1


def test_a_flat_verify_curve_never_shrinks_and_a_steep_one_follows_at_once():
    flat = VerifyShape(lambda n: 1.0, recapture_s=0.5)
    assert [flat.size_for(n, room=100) for n in (8, 1, 1, 1, 1, 1)] == [8] * 6
    steep = VerifyShape(linear(2.0), recapture_s=0.5)
    assert [steep.size_for(n, room=100) for n in (8, 1, 1)] == [8, 1, 1]


def test_the_held_size_never_passes_the_context_nor_falls_below_the_need():
    shape = VerifyShape(lambda n: 1.0)
    assert shape.size_for(8, room=100) == 8
    assert shape.size_for(2, room=5) == 5
    assert shape.size_for(3, room=2) == 3  # the need itself always fits (the loop checked it)


def test_a_long_catch_up_still_goes_in_one_batch():
    """After rounds the draft did not run (lookup or plain in auto), one by one would cost more."""
    pair = fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf")), FakeSpec(shape_sensitive=True))
    drafter = pair.model_drafter
    context = pair.chat_prompt(MSGS).tokens
    drafter.prefill(context)
    grown = context + [ord("a")] * (CATCH_UP_ONE_BY_ONE + 3)
    before = len(pair.draft.shapes)

    drafter.propose(grown, 4)

    assert pair.draft.shapes[before] == CATCH_UP_ONE_BY_ONE + 3


def test_each_round_says_the_batch_it_verified_so_the_costs_learn_the_size_that_was_paid():
    pair, _tokens, rounds, _ = answer(True, Mode.LOOKUP, settings=EVERY_PROPOSAL)

    assert [r.verify_rows for r in rounds] == pair.target.shapes[1:]
    assert any(r.verify_rows > r.drafted + 1 for r in rounds)  # padded rounds, learned at their padded size
    plain_pair, _t, plain_rounds, _ = answer(False, Mode.LOOKUP, settings=EVERY_PROPOSAL)
    assert [r.verify_rows for r in plain_rounds] == [r.drafted + 1 for r in plain_rounds]


@pytest.mark.parametrize("shape_sensitive", [False, True])
def test_the_token_a_drafts_stop_declined_is_verified_and_the_answer_is_unchanged(shape_sensitive):
    """The fake's verify rows cost about 1% of a pass each (a GPU's curve), so the token the draft's stop
    (0.6) declines at its unsure positions (about 0.52 sure) is sent anyway (Plan.spare_p), in the loop as
    in the simulator: some are right and commit a token each, and the answer is plain decoding's."""
    spec = FakeSpec(shape_sensitive=shape_sensitive, miss_every=7, unsure_every=5, answer_tokens=300)
    pairs = [fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf")), spec) for _ in range(2)]
    prompt = pairs[0].chat_prompt(MSGS).tokens
    runs = []
    for pair, mode in zip(pairs, (Mode.BASELINE, Mode.DRAFT), strict=True):
        tokens, rounds = [], []
        for ev in pair.generate(prompt, mode=mode, max_tokens=400):
            if isinstance(ev, TokensEmitted):
                tokens += ev.token_ids
            elif isinstance(ev, RoundStats):
                rounds.append(ev)
        runs.append((tokens, rounds))
    (plain, _), (tokens, rounds) = runs

    assert tokens == plain
    spare = [r for r in rounds if r.spare]
    assert sum(r.spare_accepted for r in spare) >= 5
    assert all(r.accepted <= r.drafted and r.emitted <= r.accepted + r.spare_accepted + 1 for r in rounds)
