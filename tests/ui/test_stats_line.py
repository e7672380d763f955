"""The stats line under an answer: every figure in words, and no multiplier it cannot back."""

from __future__ import annotations

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.metrics import Counts
from specchat.stats_line import stats_line
from specchat.store import MessageStats, PlainReference

SPEC = Counts.of_answer(101, 2.0, prefill_s=0.35) + Counts(drafted=180, accepted=120, rounds=60, rounds_with_draft=60,
                                                           k_sum=180)


def plain(*rates: float) -> PlainReference:
    """Plain runs of 101 tokens at these rates."""
    return PlainReference(rates, Counts.total(Counts.of_answer(101, 100 / r) for r in rates))


def test_the_line_has_first_token_speed_tokens_drafter_acceptance_and_the_stop_in_words() -> None:
    text = stats_line(MessageStats(SPEC, mode="draft", stop_reason="max_tokens", drafters=(("model", 180, 120),)),
                      "done")
    assert text.startswith("50.0 tok/s · 101 tokens · first token 350 ms · draft model · ")
    assert "67% draft accepted (120 of 180 drafted)" in text and text.endswith("stop: the token limit")


def test_auto_says_which_drafter_it_used_and_why_not_the_draft_model() -> None:
    stats = MessageStats(SPEC, mode="auto", stop_reason="eog", drafters=(("lookup", 180, 120),),
                         notes=("the draft model cannot pay here, best case 0.80x",))
    assert "auto used lookup: the draft model cannot pay here, best case 0.80x" in stats_line(stats, "done")
    both = MessageStats(SPEC, mode="auto", drafters=(("model", 150, 110), ("lookup", 30, 10)))
    assert "auto used draft model (150 drafted) and lookup (30 drafted)" in stats_line(both, "done")
    nothing = MessageStats(Counts.of_answer(101, 2.0), mode="auto", stop_reason="cancelled")
    text = stats_line(nothing, "stopped")
    assert "auto drafted nothing" in text and "draft accepted" not in text and "stop: stopped by you" in text


def test_a_servers_answer_says_what_auto_chose_for_its_task_and_why() -> None:
    on = MessageStats(SPEC, mode="llama.cpp+draft", stop_reason="eog",
                      notes=("auto: llama-server's draft-mtp on for code: 1.42x plain over 6 answers",))
    assert "· llama.cpp+draft: auto: llama-server's draft-mtp on for code: 1.42x plain over 6 answers ·" in \
        stats_line(on, "done")
    off = MessageStats(Counts.of_answer(101, 2.0), mode="llama.cpp", stop_reason="eog",
                       notes=("auto: speculation off for chat: 0.93x plain over 7 answers",))
    assert "nothing drafted: auto: speculation off for chat: 0.93x plain over 7 answers" in stats_line(off, "done")


def test_no_multiplier_from_fewer_than_three_plain_runs() -> None:
    stats = MessageStats(SPEC, mode="draft", stop_reason="eog", drafters=(("model", 180, 120),))
    assert "vs plain: not measured yet (0 of 3 plain runs)" in stats_line(stats, "done", plain())
    one = stats_line(stats, "done", plain(25.0))
    assert "vs plain: not measured yet (1 of 3 plain runs)" in one and "x vs plain" not in one
    assert "x vs plain" not in stats_line(stats, "done", plain(25.0, 20.0))


def test_the_multiplier_says_how_many_plain_runs_it_rests_on_and_their_spread() -> None:
    stats = MessageStats(SPEC, mode="draft", stop_reason="eog", drafters=(("model", 180, 120),))
    text = stats_line(stats, "done", plain(25.0, 25.0, 50.0, 25.0))  # pooled: 400 decoded tokens in 14 s
    assert "1.75x vs plain (4 plain runs, 1.00–2.00x)" in text


def test_auto_s_repeated_re_checks_fold_into_one_note() -> None:
    notes = ("draft model not used: costs timed on a busy machine, no best case claimed",
             "re-checked at 1.26x the calibrated costs (timed on a busy machine)",
             "re-checked at 2.01x the calibrated costs (timed on a busy machine)",
             "re-checked at 1.87x the calibrated costs (timed on a busy machine)")
    text = stats_line(MessageStats(SPEC, mode="auto", drafters=(("lookup", 180, 120),), notes=notes), "done")
    assert ("auto used lookup: draft model not used: costs timed on a busy machine, no best case claimed; "
            "re-checked 3 times, last at 1.87x the calibrated costs (timed on a busy machine) · ") in text
    once = MessageStats(SPEC, mode="auto", drafters=(("lookup", 180, 120),), notes=notes[:2])
    assert "; re-checked at 1.26x the calibrated costs (timed on a busy machine) · " in stats_line(once, "done")


def test_an_answer_measured_on_a_busy_machine_claims_no_multiplier() -> None:
    busy = MessageStats(SPEC, mode="draft", stop_reason="eog", drafters=(("model", 180, 120),), busy=True,
                        busy_why="other work kept 1.7 of 2 cores busy")
    text = stats_line(busy, "done", plain(25.0, 25.0, 50.0, 25.0))
    assert "vs plain: not claimed (this answer ran on a busy machine)" in text and "x vs plain" not in text
    quiet = stats_line(MessageStats(SPEC, mode="draft", stop_reason="eog", busy=False), "done", plain(25.0, 25.0, 25.0))
    assert "2.00x vs plain" in quiet


def test_a_plain_answer_has_no_multiplier_and_says_it_ran_plain() -> None:
    text = stats_line(MessageStats(Counts.of_answer(101, 2.0), mode="baseline", stop_reason="eog"), "done", None)
    assert "plain decoding" in text and "vs plain" not in text


def test_in_the_app_the_multiplier_appears_once_three_plain_runs_of_the_pair_are_measured(qtbot, fake_app) -> None:
    app = fake_app(FakeSpec(answer_tokens=60))
    chat = app.add_chat(speculation="draft")
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "first")
    wait_idle(qtbot, s)
    footer = pane.conversation.messages[-1].footer
    assert "draft model" in footer and "vs plain: not measured yet (0 of 3 plain runs)" in footer
    pane.update_settings(speculation="baseline")
    for n in range(3):
        send(qtbot, pane, f"plain {n}")
        wait_idle(qtbot, s)
        assert "plain decoding" in pane.conversation.messages[-1].footer
    pane.update_settings(speculation="draft")
    send(qtbot, pane, "again")
    wait_idle(qtbot, s)
    assert "x vs plain (3 plain runs, " in pane.conversation.messages[-1].footer
    pane.show_chat(chat)  # built again from the store: the first answer now has its three plain runs too
    assert "x vs plain (3 plain runs, " in pane.conversation.messages[1].footer
