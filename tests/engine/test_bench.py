"""The benchmark table: totals over runs pool the counts, as every other screen does."""

from specchat import metrics
from specchat.engine import Mode
from specchat.engine.bench import BenchRun, summarize


def run(mode: str, prompt: str, *, tokens: int, decode_s: float, drafted=0, accepted=0, rwd=0, rfa=0, k_sum=0):
    return BenchRun(
        mode=mode, task="code", prompt_id=prompt, repeat=0, tokens=tokens, token_ids=[], output="",
        decode_tok_s=(tokens - 1) / decode_s, prefill_tok_s=100.0, drafted=drafted, accepted=accepted,
        token_acceptance=metrics.token_acceptance(accepted, drafted),
        sequence_acceptance=metrics.sequence_acceptance(rfa, rwd), rounds=max(rwd, 1), decode_s=decode_s,
        draft_s=0.0, verify_s=decode_s, overhead_s=0.1 * decode_s, mean_k=metrics.mean_k(k_sum, rwd) or 0.0,
        stop_reason="length", fallbacks=[], rounds_with_draft=rwd, rounds_fully_accepted=rfa, k_sum=k_sum,
    )


def test_totals_over_prompts_pool_the_counts_instead_of_averaging_ratios():
    runs = [
        run("baseline", "a", tokens=11, decode_s=1.0),
        run("baseline", "b", tokens=91, decode_s=9.0),
        # a short answer: its one round was fully accepted (100%)
        run("draft", "a", tokens=11, decode_s=0.5, drafted=4, accepted=4, rwd=1, rfa=1, k_sum=4),
        # a long one: none of its 9 rounds was (0%); the pooled figure is 1 of 10 rounds, not 50%
        run("draft", "b", tokens=91, decode_s=6.0, drafted=36, accepted=12, rwd=9, rfa=0, k_sum=36),
    ]
    rows = {(r.task, r.mode): r for r in summarize(runs, [Mode.BASELINE, Mode.DRAFT])}
    total = rows[("all", "draft")]
    assert total.sequence_acceptance == 0.1
    assert total.token_acceptance == 16 / 40
    assert total.mean_k == 4.0
    assert total.decode_tok_s == (10 + 90) / 6.5
    assert total.multiplier == (100 / 6.5) / (100 / 10.0)
    assert rows[("all", "baseline")].token_acceptance is None  # nothing drafted: a dash, not 0%


def test_decode_speed_leaves_out_the_first_token_and_is_undefined_without_decoding():
    assert metrics.decode_tok_s(metrics.decoded_tokens(11), 2.0) == 5.0
    assert metrics.decode_tok_s(metrics.decoded_tokens(1), 2.0) is None
    assert metrics.multiplier(None, 10.0) is None and metrics.multiplier(15.0, 10.0) == 1.5
