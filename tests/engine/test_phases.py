"""Rounds are filed under the reasoning block or the answer, from the text they emitted."""

from __future__ import annotations

from specchat.engine.events import Done, GenerationStats, RoundStats, StopReason, TokenOrigin, TokensEmitted
from specchat.engine.phases import PhaseTagger
from specchat.engine.settings import Drafter
from specchat.metrics import PhaseSplit


def _round(i: int, drafted: int, accepted: int, wall: float = 0.1) -> RoundStats:
    return RoundStats(index=i, drafter=Drafter.MODEL, k=drafted, drafted=drafted, accepted=accepted,
                      emitted=accepted + 1, draft_s=0.0, verify_s=wall, overhead_s=0.0)


def _text(t: str) -> TokensEmitted:
    return TokensEmitted((1,), (TokenOrigin.TARGET,), t)


def _run(tagger: PhaseTagger, script: list[tuple[str, RoundStats]]) -> list[RoundStats]:
    out = []
    for text, rs in script:
        tagger.tag(_text(text))
        tagged = tagger.tag(rs)
        assert isinstance(tagged, RoundStats)
        out.append(tagged)
    return out


def test_rounds_inside_and_after_the_think_block_are_split_with_their_own_acceptance_and_speed() -> None:
    tagger = PhaseTagger()
    tagger.tag(_text("<think>"))  # the first token, out of the prefill: not a round
    rounds = _run(tagger, [
        ("Let me see", _round(0, 4, 1, wall=0.2)),
        (" what 2+2 is.", _round(1, 4, 2, wall=0.2)),
        ("</think>", _round(2, 4, 0)),  # all tag: keeps the phase it started in
        ("The answer", _round(3, 4, 4, wall=0.1)),
        (" is 4.", _round(4, 4, 3, wall=0.1)),
    ])
    assert [r.phase for r in rounds] == ["reasoning"] * 3 + ["answer"] * 2
    done = tagger.tag(Done(StopReason.EOG, GenerationStats("auto")))
    assert isinstance(done, Done)
    split = done.stats.phases
    assert split.reasoning.token_acceptance == 3 / 12 and split.answer.token_acceptance == 7 / 8
    assert split.reasoning.decoded == 2 + 3 + 1 and abs(split.reasoning.decode_s - 0.5) < 1e-9
    assert abs(split.answer.decode_tok_s - (5 + 4) / 0.2) < 1e-9
    assert split.has_reasoning and "reasoning 25% accepted" in split.summary()


def test_a_template_that_opens_the_block_in_the_prompt_starts_in_reasoning() -> None:
    tagger = PhaseTagger(starts_in_reasoning=True)
    rounds = _run(tagger, [("hmm, thinking", _round(0, 2, 1)), ("</think>Yes.", _round(1, 2, 2))])
    assert [r.phase for r in rounds] == ["reasoning", "answer"]  # "Yes." outweighs nothing of reasoning


def test_an_answer_without_reasoning_has_no_split_to_show() -> None:
    tagger = PhaseTagger()
    _run(tagger, [("plain text", _round(0, 3, 3)), (" more", _round(1, 3, 1))])
    done = tagger.tag(Done(StopReason.EOG, GenerationStats("auto")))
    assert isinstance(done, Done)
    assert not done.stats.phases.has_reasoning and done.stats.phases.summary() == ""
    assert done.stats.phases.answer.drafted == 6


def test_phase_split_round_trips_through_json_and_adds_up() -> None:
    tagger = PhaseTagger()
    tagger.tag(_text("<think>"))
    _run(tagger, [("a", _round(0, 2, 1)), ("</think>b", _round(1, 2, 2))])
    split = tagger.split
    assert PhaseSplit.from_dict(split.to_dict()) == split
    assert (split + split).reasoning.drafted == 4 and PhaseSplit.from_dict(None) == PhaseSplit()
