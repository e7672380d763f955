"""The text of an answer is split into reasoning and answer once, in the event stream; rounds are
filed under the reasoning block or the answer, from the text they emitted."""

from __future__ import annotations

from specchat.engine.events import Done, GenerationStats, RoundStats, StopReason, TokenOrigin, TokensEmitted
from specchat.engine.phases import PhaseTagger, split_answer
from specchat.engine.settings import Drafter
from specchat.metrics import PhaseSplit

STATS = GenerationStats("draft")


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


def _split(events: list) -> tuple[str, str]:
    chunks = [e for e in events if isinstance(e, TokensEmitted)]
    return "".join(c.reasoning for c in chunks), "".join(c.answer for c in chunks)


def test_the_stream_carries_its_text_split_with_tags_cut_across_chunks() -> None:
    events = list(split_answer([_text("<thi"), _text("nk>let me"), _text(" see</th"), _round(0, 3, 2),
                                _text("ink>The "), _text("answer <think> stays"), Done(StopReason.EOG, STATS)]))
    assert _split(events) == ("let me see", "The answer <think> stays")  # one think block per answer
    assert [e.text for e in events if isinstance(e, TokensEmitted)][0] == "<thi"  # the raw text is kept
    assert isinstance(events[-1], Done) and events[-1].stats.phases.has_reasoning


def test_a_template_that_opens_the_block_starts_the_stream_in_reasoning() -> None:
    events = list(split_answer([_text("hmm"), _text("</think>Hi"), Done(StopReason.EOG, STATS)],
                               starts_in_reasoning=True))
    assert _split(events) == ("hmm", "Hi")


def test_text_held_back_as_a_possible_tag_comes_before_done_when_the_answer_ends() -> None:
    events = list(split_answer([_text("<think>cut off at </thi"), Done(StopReason.MAX_TOKENS, STATS)]))
    assert _split(events) == ("cut off at </thi", "")
    rest = events[-2]
    assert isinstance(rest, TokensEmitted) and rest.token_ids == () and rest.reasoning == "</thi"
    assert isinstance(events[-1], Done)
    events = list(split_answer([_text("a < b"), _text(" and <"), Done(StopReason.EOG, STATS)]))
    assert _split(events) == ("", "a < b and <")
