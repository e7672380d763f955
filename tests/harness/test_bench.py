"""The benchmark table: totals over runs pool the counts, as every other screen does."""

import json
from pathlib import Path

import pytest

from helpers.fakes import FakeSpec, fake_pair
from specchat import metrics
from specchat.engine import Mode
from specchat.engine.pair import PairConfig
from specchat.engine.settings import SamplingSettings
from specchat.harness.bench import BenchRun, format_table, run_bench, summarize
from specchat.harness.suite import BenchPrompt
from specchat.metrics import Counts

# docs/ARCHITECTURE.md, "Command line contract": scripts read these keys of every run
CONTRACT_KEYS = {"mode", "task", "prompt_id", "tokens", "token_ids", "output", "decode_tok_s", "prefill_tok_s",
                 "drafted", "accepted", "token_acceptance", "sequence_acceptance", "rounds", "decode_s", "draft_s",
                 "verify_s", "overhead_s"}


def run(mode: str, prompt: str, *, tokens: int, decode_s: float, drafted=0, accepted=0, rwd=0, rfa=0, k_sum=0,
        prompt_tokens=100, prefill_s=1.0, repeat=0):
    counts = Counts(tokens=tokens, decoded=tokens - 1, prompt_tokens=prompt_tokens, drafted=drafted,
                    accepted=accepted, rounds=max(rwd, 1), rounds_with_draft=rwd, rounds_fully_accepted=rfa,
                    k_sum=k_sum, prefill_s=prefill_s, decode_s=decode_s, verify_s=decode_s,
                    overhead_s=0.1 * decode_s)
    return BenchRun(mode=mode, task="code", prompt_id=prompt, repeat=repeat, token_ids=list(range(tokens)),
                    output="x" * tokens, stop_reason="max_tokens", fallbacks=[], counts=counts)


def test_totals_over_prompts_pool_the_counts_instead_of_averaging_ratios():
    runs = [
        run("baseline", "a", tokens=11, decode_s=1.0),
        run("baseline", "b", tokens=91, decode_s=9.0),
        # a short answer: its one round was fully accepted (100%)
        run("draft", "a", tokens=11, decode_s=0.5, drafted=4, accepted=4, rwd=1, rfa=1, k_sum=4),
        # a long one: none of its 9 rounds was (0%); the pooled figure is 1 of 10 rounds, not 50%
        run("draft", "b", tokens=91, decode_s=6.0, drafted=36, accepted=12, rwd=9, rfa=0, k_sum=36,
            prompt_tokens=300, prefill_s=1.0),
    ]
    rows = {(r.task, r.mode): r for r in summarize(runs, [Mode.BASELINE, Mode.DRAFT])}
    total = rows[("all", "draft")]
    assert total.sequence_acceptance == 0.1
    assert total.token_acceptance == 16 / 40
    assert total.mean_k == 4.0
    assert total.decode_tok_s == (10 + 90) / 6.5
    assert total.multiplier == (100 / 6.5) / (100 / 10.0)
    assert total.prefill_tok_s == (100 + 300) / 2.0  # pooled too: not the median of 100 and 300 tok/s
    assert total.overhead_share == pytest.approx(0.1)  # pooled overhead / pooled decode time
    assert rows[("all", "baseline")].token_acceptance is None  # nothing drafted: a dash, not 0%


def test_the_multiplier_comes_with_how_sure_it_is_from_the_runs_measured_side_by_side():
    """A shared machine's speed drifts between prompts (here 2x): pairs of runs made side by side cancel the
    drift, so a mode that is always 1.5x its neighbouring plain run is known to be 1.5x, while one whose
    ratio varies from 0.9x to 1.1x gets an interval that says it may be either side of plain."""
    runs = []
    for rep in range(2):
        for i, slow in enumerate((1.0, 2.0, 1.0, 2.0)):  # the machine's speed at that moment
            runs.append(run("baseline", f"p{i}", tokens=101, decode_s=10.0 * slow, repeat=rep))
            runs.append(run("draft", f"p{i}", tokens=101, decode_s=10.0 * slow / 1.5, repeat=rep))
            runs.append(run("lookup", f"p{i}", tokens=101, decode_s=10.0 * slow / (0.9 if (i + rep) % 2 else 1.1),
                            repeat=rep))
    rows = {r.mode: r for r in summarize(runs, ["baseline", "draft", "lookup"]) if r.task == "all"}
    mean, low, high = rows["draft"].paired
    assert mean == pytest.approx(1.5) and low == pytest.approx(1.5) and high == pytest.approx(1.5)
    mean, low, high = rows["lookup"].paired
    assert low < 0.95 and high > 1.05 and low < mean < high
    assert rows["baseline"].paired is None  # plain against itself has nothing to say
    table = format_table(list(rows.values()))
    assert "95% paired" in table and f"{low:.2f}-{high:.2f}" in table and "1.50-1.50" in table


def test_one_pair_gives_no_interval_and_the_table_shows_a_dash():
    runs = [run("baseline", "a", tokens=11, decode_s=1.0), run("draft", "a", tokens=11, decode_s=0.5),
            run("draft", "b", tokens=11, decode_s=0.5)]  # b has no plain run beside it: not a pair
    row = next(r for r in summarize(runs, ["baseline", "draft"]) if r.task == "all" and r.mode == "draft")
    assert row.paired is None
    assert format_table([row]).splitlines()[-1].split()[4] == "-"


def test_a_run_keeps_every_key_of_the_json_contract_and_reads_back():
    r = run("draft", "a", tokens=11, decode_s=0.5, drafted=4, accepted=3, rwd=1, rfa=0, k_sum=4)
    doc = json.loads(json.dumps(r.to_json()))
    assert doc.keys() >= CONTRACT_KEYS
    assert doc["decode_tok_s"] == 20.0 and doc["token_acceptance"] == 0.75 and doc["sequence_acceptance"] == 0.0
    assert doc["tokens"] == 11 and doc["token_ids"] == list(range(11)) and doc["mean_k"] == 4.0
    assert BenchRun.from_json(doc) == r


def test_a_run_from_an_older_file_gets_its_decoded_tokens_from_its_tokens():
    old = run("baseline", "a", tokens=11, decode_s=2.0).to_json()
    del old["decoded"], old["prefill_s"], old["prompt_tokens"], old["reused_tokens"], old["fallback_rounds"]
    assert BenchRun.from_json(old).decode_tok_s == 5.0


def test_decode_speed_leaves_out_the_first_token_and_is_undefined_without_decoding():
    assert metrics.decode_tok_s(metrics.decoded_tokens(11), 2.0) == 5.0
    assert metrics.decode_tok_s(metrics.decoded_tokens(1), 2.0) is None
    assert metrics.multiplier(None, 10.0) is None and metrics.multiplier(15.0, 10.0) == 1.5


@pytest.mark.parametrize("first_sight", [False, True])
def test_first_sight_measures_a_repeat_as_new_instead_of_a_copy_of_the_run_before(first_sight):
    """Prompt lookup remembers earlier answers (Regenerate copies the last one), so a bench's repeat of a
    prompt can draft the whole answer before it and 'win' 2x; --first-sight empties that memory every run.
    Every decode of the fake pair costs the same at any size, so a copy pays on any machine: what is
    drafted depends on what lookup remembers, not on how busy the machine is (the CLI's own test of the
    flag ran the real 135M model, whose 2-token verify on a loaded CI machine cost as much as a copy won)."""
    pair = fake_pair(PairConfig(target=Path("t.gguf")), FakeSpec(answer_tokens=80, decode_s=0.002))
    prompt = BenchPrompt(id="p", task="chat", messages=({"role": "user", "content": "Tell me about the sea."},))
    runs, _ = run_bench(pair, [prompt], [Mode.BASELINE, Mode.LOOKUP], max_tokens=64, repeat=2,
                        sampling=SamplingSettings(), first_sight=first_sight)
    first, repeat = (next(r for r in runs if r.mode == "lookup" and r.repeat == i) for i in (0, 1))
    assert repeat.token_ids == first.token_ids  # the same answer (lossless) ...
    # a first question: the fake answer has little to copy from its own context (0-3 of 63 tokens drafted)
    assert first.accepted <= 10
    if first_sight:
        assert repeat.accepted <= 10  # ... drafted only from its own context, as a first question is
    else:
        assert repeat.accepted >= 40  # ... drafted from the memory of the answer before (53-54 of 63)
