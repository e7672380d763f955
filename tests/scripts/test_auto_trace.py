"""scripts/auto_trace.py: a simulated run answer by answer, and one answer's plans beside its rounds."""

from __future__ import annotations

import auto_trace  # scripts/auto_trace.py, put on sys.path by tests/conftest.py
from specchat.harness import simulate as sim
from specchat.harness.trace import agreement_trace


def test_each_round_is_shown_beside_the_plan_it_played():
    """The rounds listed under an answer are that answer's: their drafted and accepted tokens add up to
    the answer's, and each ran the drafter its plan named (a plan not played, or a round without its
    plan, would shift every line after it)."""
    trace = agreement_trace(0.8, prompts=3, tokens=96, seed=1)
    rows = auto_trace.run(trace, sim.load_profile("h100-qwen7b-q4km-steady"), seed=1)
    assert len(rows) == 3
    assert any(row.drafted for row in rows)  # at 0.8 on the H100 auto drafts
    for row in rows:
        assert sum(r.drafted for _, _, r in row.rounds) == row.drafted
        assert sum(r.accepted for _, _, r in row.rounds) == row.accepted
        assert all(plan.drafter is r.drafter for plan, _, r in row.rounds)
        assert row.multiplier > 0


def test_the_command_prints_every_answer_and_the_rounds_of_the_one_asked(capsys):
    assert auto_trace.main(["--profile", "rtx3090-llama8b-q4_0", "--seed", "0", "--answer", "7"]) == 0
    out = capsys.readouterr().out.splitlines()
    answers = [line for line in out if line.startswith("answer ")]
    assert len(answers) == 13  # the builtin trace's prompts
    assert answers[7].startswith("answer 7 json: auto ")
    rounds = out[out.index(answers[7]) + 1 : out.index(answers[8])]
    assert rounds and all(line.startswith("  ") and " | drafted " in line for line in rounds)
