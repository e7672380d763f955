"""``auto`` on a server: speculation on or off per answer and task, from measured rates (fake ones here).

The real managed llama-server switching on and off under it: tests/remote/test_server_auto_switch.py.
"""

from __future__ import annotations

from specchat.backends.server_auto import (
    EXPLORE_EVERY,
    MIN_ANSWERS,
    OFF_MODE,
    ON_MODE,
    WINDOW,
    Rates,
    Sample,
    ServerAuto,
    samples_of,
)
from specchat.metrics import Counts

DRAFTER = "llama-server's draft-mtp"


def answer(on: bool, tok_s: float, tokens: int = 101) -> Sample:
    """One answer that decoded ``tokens - 1`` tokens after its first at ``tok_s``."""
    return Sample(on, Counts.of_answer(tokens, (tokens - 1) / tok_s))


def measured(on_rate: float, off_rate: float, n_on: int = 3, n_off: int = 3) -> list[Sample]:
    return [answer(True, on_rate)] * n_on + [answer(False, off_rate)] * n_off


def test_speculation_stays_on_for_a_task_where_it_measured_faster_and_says_by_how_much():
    choice = ServerAuto(DRAFTER).choose("code", measured(14.2, 10.0, 3, 2) + [answer(False, 10.0)])
    assert choice.on and not choice.explore
    assert choice.why == "auto: llama-server's draft-mtp on for code: 1.42x plain over 6 answers"


def test_speculation_goes_off_for_a_task_where_it_measured_slower():
    choice = ServerAuto(DRAFTER).choose("chat", measured(9.3, 10.0, 4, 3), running=True)
    assert not choice.on and not choice.explore
    assert choice.why == "auto: speculation off for chat: 0.93x plain over 7 answers"


def test_each_task_is_decided_by_its_own_rates():
    auto = ServerAuto(DRAFTER)
    by_task = {"code": measured(15.0, 10.0), "creative": measured(8.0, 10.0)}
    assert auto.choose("code", by_task["code"]).on
    assert not auto.choose("creative", by_task["creative"]).on


def test_too_few_answers_on_a_side_measure_that_side():
    auto = ServerAuto(DRAFTER)
    fast = [answer(True, 30.0)] * 5  # however fast, no plain answer to compare with yet
    choice = auto.choose("json", fast + [answer(False, 10.0)], running=True)
    assert not choice.on and choice.explore
    assert choice.why == ("auto: speculation off for json to measure it: 5 of 3 answers measured with speculation on, "
                          "1 of 3 with it off")
    first = auto.choose("json", [], running=None)  # nothing measured: the drafter the server was started with
    assert first.on and first.explore
    assert not auto.choose("json", [], running=False).on  # a tie keeps what runs: no restart spent on it


def test_measuring_a_task_costs_one_restart_not_one_per_answer():
    auto, samples, running, restarts = ServerAuto(DRAFTER), [], True, 0
    for _ in range(2 * MIN_ANSWERS):
        choice = auto.choose("code", samples, running)
        assert choice.explore
        restarts += choice.on != running
        running = choice.on
        samples.append(answer(running, 12.0 if running else 10.0))
    assert restarts == 1  # three answers with the drafter, then three without
    assert [s.on for s in samples] == [True] * MIN_ANSWERS + [False] * MIN_ANSWERS
    decided = auto.choose("code", samples, running)
    assert decided.on and not decided.explore and "1.20x plain over 6 answers" in decided.why


def test_within_the_margin_what_runs_stays():
    auto = ServerAuto(DRAFTER)
    near = measured(10.3, 10.0)
    on = auto.choose("edit", near, running=True)
    off = auto.choose("edit", near, running=False)
    assert on.on and not off.on
    assert on.why == "auto: llama-server's draft-mtp stays on for edit: 1.03x plain over 6 answers, within the 5% margin"
    assert off.why.startswith("auto: speculation stays off for edit: 1.03x")


def test_once_decided_the_other_side_is_measured_again_now_and_then_bounded():
    auto = ServerAuto(DRAFTER)
    rates = measured(15.0, 10.0)
    choices = [auto.choose("code", rates, running=True) for _ in range(3 * EXPLORE_EVERY)]
    explored = [i for i, c in enumerate(choices) if c.explore]
    assert explored == [EXPLORE_EVERY - 1, 2 * EXPLORE_EVERY - 1, 3 * EXPLORE_EVERY - 1]
    assert all(not choices[i].on for i in explored) and all(c.on for c in choices if not c.explore)
    assert choices[explored[0]].why == ("auto: speculation off for code once, to measure it again: "
                                        "1.50x plain over 6 answers")
    assert not any(c.explore for c in (auto.choose("chat", rates) for _ in range(EXPLORE_EVERY - 1)))  # per task


def test_the_newest_answers_decide_and_counts_pool_not_ratios():
    old_fast = [answer(True, 30.0)] * 20
    new = measured(9.0, 10.0, WINDOW, WINDOW)
    assert not ServerAuto(DRAFTER).choose("code", old_fast + new).on  # the machine changed: the old answers go
    # two on-answers, 200 tokens at 20 tok/s and 2 tokens at 1 tok/s, pool to 201/11 s, not the mean of 20 and 1
    r = Rates.of([answer(True, 20.0, tokens=201), answer(True, 1.0, tokens=2)])
    assert r.n_on == 2 and r.on_tok_s is not None and abs(r.on_tok_s - 201 / 11) < 1e-9
    assert Rates.of(measured(12.0, 10.0, MIN_ANSWERS, MIN_ANSWERS - 1)).ratio is None


def test_stored_runs_of_the_managed_server_become_samples():
    c = Counts.of_answer(5, 1.0)
    got = samples_of([(ON_MODE, c), (OFF_MODE, c), ("auto", c), ("baseline", c)])
    assert got == ((True, c), (False, c))  # a local pair's runs are not this server's


def test_a_long_restart_makes_the_looks_back_rarer():
    """Each look at the other side costs two restarts: with a 30 s restart beside 10 s answers, looking once in
    ten answers would spend 60 s per 83 s of answers; it looks once in 144 (two restarts within 5%)."""
    rates = measured(15.0, 10.0)  # 100 tokens at 15 and 10 tok/s: answers of 6.7 and 10 s, 8.3 s on average
    auto = ServerAuto(DRAFTER)
    cheap = [auto.choose("code", rates, running=True, restart_s=0.5).explore for _ in range(2 * EXPLORE_EVERY)]
    assert sum(cheap) == 2  # a restart of half a second: as often as EXPLORE_EVERY says
    auto = ServerAuto(DRAFTER)
    dear = [auto.choose("code", rates, running=True, restart_s=30.0) for _ in range(200)]
    looks = [i for i, c in enumerate(dear) if c.explore]
    assert looks == [144 - 1]  # ceil(2 * 30 / (0.05 * 8.33)) = 144 answers between looks
