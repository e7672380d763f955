"""The recorder turns recorded-style engine event streams into the numbers and series docs/ARCHITECTURE.md defines."""

import math

import numpy as np
import pytest

from helpers.event_streams import R, answer_events, feed_all, timed
from specchat.engine.events import Done, Fallback, Prefilled, RoundStats, TokensEmitted
from specchat.engine.settings import ControllerSettings
from specchat.metrics import MIN_PLAIN_RUNS
from specchat.telemetry import GpuMemory, MemorySample, TelemetryRecorder


def test_ten_rounds_drafting_four_accepting_three():
    """75% token acceptance, 0% sequence acceptance: no draft was ever accepted whole."""
    rec = TelemetryRecorder()
    events = answer_events([R(4, 4, 3)] * 10)
    feed_all(rec, 1, "chat", events)
    snap = rec.snapshot()
    stats = events[-1].stats
    for numbers in (snap.answer, snap.total):
        assert numbers.token_acceptance == pytest.approx(0.75) == stats.token_acceptance
        assert numbers.sequence_acceptance == 0.0 == stats.sequence_acceptance
        assert numbers.mean_k == 4.0 and numbers.mean_accepted == 3.0
        assert numbers.tokens == 41 and numbers.rounds == 10 and numbers.current_k == 4
        assert numbers.tok_s == pytest.approx(stats.decode_tok_s)  # the engine's own totals once done
        assert numbers.fallback_share == 0.0
    assert len(snap.rounds) == 10
    np.testing.assert_allclose(snap.rounds.token_acceptance, 0.75)
    np.testing.assert_array_equal(snap.rounds.sequence_acceptance, 0.0)
    np.testing.assert_array_equal(snap.rounds.k, 4)
    np.testing.assert_array_equal(snap.rounds.seq, np.arange(10))
    np.testing.assert_allclose(snap.rounds.tok_s, 4 / 0.042)  # emitted / (draft + verify + overhead)
    np.testing.assert_allclose(snap.rounds.draft_s + snap.rounds.verify_s + snap.rounds.overhead_s, 0.042)


def test_whole_drafts_accepted_count_for_sequence_acceptance():
    rec = TelemetryRecorder()
    feed_all(rec, 1, None, answer_events([R(4, 4, 4)] * 3 + [R(4, 4, 1)] + [R(0, 0, 0)]))
    total = rec.totals()
    assert total.sequence_acceptance == 0.75  # 3 of the 4 rounds with a draft; the plain round is not counted
    assert total.token_acceptance == 13 / 16
    assert rec.snapshot().rounds.sequence_acceptance[-1] == 0.75  # a plain round repeats the window's value


def test_live_decode_rate_counts_tokens_after_the_first_over_round_time():
    rec = TelemetryRecorder()
    events = answer_events([R(4, 4, 3, 0.01, 0.03, 0.0), R(4, 4, 1, 0.01, 0.05, 0.0)])
    for t, e in timed(events[:-1]):  # everything but Done
        rec.feed(7, "c", e, now=t)
    live = rec.snapshot()
    assert live.answer_streaming and live.answer_request_id == 7
    assert live.answer.tokens == 1 + 4 + 2
    assert live.answer.decoded_tokens == 6
    assert live.answer.tok_s == pytest.approx(6 / 0.10)
    rec.feed(7, "c", events[-1])
    done = rec.snapshot()
    assert not done.answer_streaming
    assert done.answer.tok_s == pytest.approx(events[-1].stats.decode_tok_s)
    assert done.answer.prefill_tok_s == pytest.approx(100 / 0.5)


def test_smoothed_rate_stays_between_the_slowest_and_fastest_round():
    rec = TelemetryRecorder(smoothing=0.3)
    pattern = [(4, 0.02), (0, 0.05), (2, 0.03), (4, 0.02), (1, 0.08)]
    rounds = [R(4, 4, a, 0.01, v, 0.001) for a, v in pattern * 4]
    feed_all(rec, 1, None, answer_events(rounds))
    s = rec.snapshot().rounds
    assert np.all(s.tok_s_smooth >= s.tok_s.min() - 1e-9) and np.all(s.tok_s_smooth <= s.tok_s.max() + 1e-9)
    assert s.tok_s.std() > s.tok_s_smooth[5:].std()  # and it really smooths
    assert s.tok_s_smooth[0] == s.tok_s[0]  # each answer starts from its first round


def test_rolling_acceptance_forgets_rounds_outside_the_window():
    rec = TelemetryRecorder(settings=ControllerSettings(window_rounds=4))
    feed_all(rec, 1, None, answer_events([R(4, 4, 0)] * 4 + [R(4, 4, 4)] * 4))
    s = rec.snapshot().rounds
    assert s.token_acceptance[3] == 0.0 and s.token_acceptance[-1] == 1.0
    assert s.sequence_acceptance[5] == 0.5
    assert rec.totals().token_acceptance == 0.5  # the running number is not windowed


def test_new_thresholds_are_drawn_at_once_and_the_rounds_stay():
    """The app settings changed: the next snapshot has the new guard-rail lines and window, nothing is lost."""
    rec = TelemetryRecorder(settings=ControllerSettings(window_rounds=4))
    feed_all(rec, 1, None, answer_events([R(4, 4, 0)] * 2 + [R(4, 4, 4)] * 2))
    before = rec.snapshot()
    assert (before.min_token_acceptance, before.min_sequence_acceptance) == (0.5, 0.6)
    rec.set_settings(ControllerSettings(window_rounds=2, min_token_acceptance=0.3, min_sequence_acceptance=0.8))
    after = rec.snapshot()
    assert after.version > before.version  # a panel that draws by version sees the change
    assert (after.min_token_acceptance, after.min_sequence_acceptance, after.window_rounds) == (0.3, 0.8, 2)
    assert len(after.rounds) == 4 and rec.totals().rounds == before.total.rounds
    feed_all(rec, 2, None, answer_events([R(4, 4, 4)]))
    assert rec.snapshot().rounds.token_acceptance[-1] == 1.0  # the window kept its 2 newest rounds: all accepted
    same = rec.snapshot().version
    rec.set_settings(rec.settings)  # the same settings: nothing to draw again
    assert rec.snapshot().version == same


def test_fallback_markers_carry_their_reasons():
    s = ControllerSettings(window_rounds=4)
    rail = Fallback("model drafter: token acceptance 25% < 50% over the last 4 rounds; "
                    "plain decoding for 64 tokens")
    warn = Fallback("fell back to plain decoding on 40% of rounds (> 15%)", warning=True)
    rounds = [R(4, 4, 1)] * 3 + [R(4, 4, 1, fallback_after=(rail,))]
    cooling = R(0, 0, 0, plain_by_fallback=True)
    rounds += [cooling] * 3 + [R(0, 0, 0, plain_by_fallback=True, fallback_after=(warn,))]
    rounds += [R(2, 2, 2)] + [R(0, 0, 0)]
    rec = TelemetryRecorder(settings=s)
    events = answer_events(rounds)
    for t, e in timed(events[:-1]):
        rec.feed(1, "c", e, now=t)
    snap = rec.snapshot()
    assert [(m.seq, m.k, m.reason, m.warning) for m in snap.markers] == [(3, 4, rail.reason, False),
                                                                         (7, 0, warn.reason, True)]
    np.testing.assert_array_equal(snap.rounds.fallback, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0])
    # plain rounds after the guard rail, until the next round with a draft
    np.testing.assert_array_equal(snap.rounds.in_fallback, [0, 0, 0, 0, 1, 1, 1, 1, 0, 0])
    assert snap.answer.fallback_share == 0.4
    records = rec.rounds()
    assert records[3].fallback and records[3].fallback_reason == rail.reason
    assert records[7].fallback_reason == warn.reason and not records[8].fallback
    assert snap.min_token_acceptance == 0.5 and snap.min_sequence_acceptance == 0.6  # threshold lines
    rec.feed(1, "c", events[-1])
    assert rec.snapshot().answer.fallback_share == 0.4  # the engine's count, now that it is done


def test_a_note_before_the_first_round_lands_on_that_round():
    rec = TelemetryRecorder()
    note = Fallback("speculation off: the target's memory cannot be trimmed (recurrent)", permanent=True)
    t = feed_all(rec, 1, "c", answer_events([R(0, 0, 0)] * 3, notes=[note]))
    feed_all(rec, 2, "c", answer_events([R(3, 3, 3)] * 2, notes=[note]), t0=t + 1)
    markers = rec.snapshot().markers
    assert [(m.seq, m.reason, m.permanent, m.request_id) for m in markers] == [(0, note.reason, True, 1),
                                                                               (3, note.reason, True, 2)]
    records = rec.rounds()
    assert [r.fallback for r in records] == [True, False, False, True, False]
    assert records[0].fallback_reason == note.reason
    assert not any(r.in_fallback for r in records)  # a permanent note is not a guard-rail cooldown


def test_multiplier_needs_a_plain_rate():
    rec = TelemetryRecorder()
    events = answer_events([R(4, 4, 3)] * 5)
    feed_all(rec, 1, "c", events)
    assert rec.snapshot().answer.multiplier is None and rec.snapshot().plain_rate is None
    rec.set_plain_rate(20.0)
    snap = rec.snapshot()
    assert snap.plain_rate == 20.0 and snap.plain_rate_source == "set"
    assert snap.answer.multiplier == pytest.approx(snap.answer.tok_s / 20.0)
    assert snap.total.multiplier == pytest.approx(events[-1].stats.decode_tok_s / 20.0)
    rec.set_plain_rate(None)
    assert rec.snapshot().answer.multiplier is None


def test_plain_rate_is_learned_from_baseline_answers():
    rec = TelemetryRecorder()
    plain = answer_events([R(0, 0, 0, 0.0, 0.030, 0.002)] * 20, mode="baseline")
    t = 0.0
    for request_id in range(1, MIN_PLAIN_RUNS + 1):  # one plain answer is noise: a rate needs MIN_PLAIN_RUNS
        assert rec.plain_rate is None and rec.snapshot().plain_answers == request_id - 1
        t = feed_all(rec, request_id, "c", plain, t0=t + 1)
    assert rec.plain_rate == pytest.approx(plain[-1].stats.decode_tok_s)  # the same answers: the same rate
    assert rec.plain_rate_source == "baseline answers"
    spec = answer_events([R(4, 4, 3)] * 10)
    feed_all(rec, MIN_PLAIN_RUNS + 1, "c", spec, t0=t + 1)
    snap = rec.snapshot()
    expected = spec[-1].stats.decode_tok_s / plain[-1].stats.decode_tok_s
    assert snap.answer.multiplier == pytest.approx(expected)
    assert snap.total.multiplier == pytest.approx(expected)  # the plain answer is not in the numerator
    assert snap.total.answers == MIN_PLAIN_RUNS + 1 and snap.total.tokens == MIN_PLAIN_RUNS * 21 + 41
    rec.set_plain_rate(10.0)  # a rate measured on purpose wins
    assert rec.plain_rate == 10.0
    rec.reset_plain_rate()  # another pair
    assert rec.plain_rate is None and rec.snapshot().total.multiplier is None


def test_snapshot_arrays_cannot_be_written_and_do_not_change_later():
    rec = TelemetryRecorder()
    t = feed_all(rec, 1, None, answer_events([R(4, 4, 3)] * 3))
    snap = rec.snapshot()
    with pytest.raises(ValueError):
        snap.rounds.tok_s[0] = 0.0
    with pytest.raises(AttributeError):
        snap.rounds.tok_s = np.zeros(3)  # frozen
    assert rec.snapshot() is snap  # nothing happened: the cached snapshot, no copying at 15 Hz
    feed_all(rec, 2, None, answer_events([R(4, 4, 4)] * 2), t0=t + 1)
    later = rec.snapshot()
    assert later is not snap and later.version > snap.version
    assert len(snap.rounds) == 3 and len(later.rounds) == 5


def test_the_plots_keep_only_the_last_seconds_but_export_keeps_everything():
    rec = TelemetryRecorder(keep_seconds=60.0)
    for i in range(200):
        rec.feed(1, "c", RoundStats(i, "model", 4, 4, 3, 4, 0.01, 0.03, 0.0), now=1000.0 + i)
    s = rec.snapshot().rounds
    assert s.t.min() >= 1199.0 - 60.0 and s.t.max() == 1199.0
    assert len(s) == 61
    assert len(rec.rounds()) == 200


def test_the_ring_capacity_bounds_the_plots_too():
    rec = TelemetryRecorder(capacity=50)
    for i in range(120):
        rec.feed(1, "c", RoundStats(i, "model", 2, 2, 2, 3, 0.0, 0.01, 0.0), now=1000.0 + i / 100)
    np.testing.assert_array_equal(rec.snapshot().rounds.seq, np.arange(70, 120))


def test_late_duplicates_and_foreign_objects_are_ignored():
    rec = TelemetryRecorder()
    events = answer_events([R(4, 4, 3)] * 2)
    feed_all(rec, 1, "c", events)
    v = rec.snapshot().version
    rec.feed(1, "c", events[-3])  # a RoundStats of an answer that is already done
    rec.feed(2, "c", object())  # e.g. the worker's own Started notice
    assert rec.snapshot().version == v  # nothing changed, not even the cached snapshot
    assert len(rec.rounds()) == 2 and rec.totals().tokens == 9 and rec.totals().answers == 1


def test_totals_per_chat_and_since_start():
    rec = TelemetryRecorder()
    t = feed_all(rec, 1, "a", answer_events([R(4, 4, 4)] * 4))
    t = feed_all(rec, 2, "b", answer_events([R(4, 4, 0)] * 4), t0=t + 1)
    feed_all(rec, 3, "a", answer_events([R(2, 2, 2)] * 2)[:-1], t0=t + 1)  # still streaming
    assert rec.totals("a").token_acceptance == 1.0 and rec.totals("a").answers == 2
    assert rec.totals("b").token_acceptance == 0.0
    assert rec.totals().token_acceptance == 20 / 36
    assert [r.chat_id for r in rec.rounds("b")] == ["b"] * 4
    assert [a.request_id for a in rec.answers("a")] == [1]  # the streaming one is not finished
    rec.abandon(3)
    assert [a.stop_reason for a in rec.answers("a")] == ["max_tokens", "abandoned"]
    assert rec.totals("a").tokens == 21 + 7  # the abandoned answer keeps its live counts


def test_event_times_never_go_backwards():
    rec = TelemetryRecorder()
    rec.feed(1, None, RoundStats(0, "model", 1, 1, 1, 2, 0.0, 0.01, 0.0), now=100.0)
    rec.feed(1, None, RoundStats(1, "model", 1, 1, 1, 2, 0.0, 0.01, 0.0), now=99.0)  # clock stepped back
    assert list(rec.snapshot().rounds.t) == [100.0, 100.0]


def test_a_round_without_time_has_no_rate():
    rec = TelemetryRecorder()
    rec.feed(1, None, TokensEmitted((1,), (), ""), now=1.0)
    rec.feed(1, None, RoundStats(0, "none", 0, 0, 0, 1, 0.0, 0.0, 0.0), now=1.0)
    s = rec.snapshot()
    assert math.isnan(s.rounds.tok_s[0]) and math.isnan(s.rounds.token_acceptance[0])
    assert rec.rounds()[0].tok_s is None and s.answer.tok_s is None


def test_memory_samples_become_series():
    rec = TelemetryRecorder(keep_seconds=10.0)
    gib = 1024**3
    for i in range(15):
        gpus = (GpuMemory(0, "GPU A", (2 + i) * gib, 24 * gib, None if i < 5 else gib),
                GpuMemory(1, "GPU B", gib, 16 * gib, None))
        rec.record_memory(MemorySample(500.0 + i, 300 * 1024**2, 8 * gib, 16 * gib, gpus))
    m = rec.snapshot().memory
    assert len(m) == 11 and m.t[0] == 504.0
    assert m.vram_used.shape == (11, 2) and m.vram_used[-1, 0] == 16 * gib
    assert math.isnan(m.process_vram[0]) and m.process_vram[-1] == gib
    assert m.gpu_names == ("GPU A", "GPU B") and m.vram_total == (24 * gib, 16 * gib)
    assert rec.snapshot().latest_memory.gpus[0].used == 16 * gib


def test_no_memory_yet_is_an_empty_series():
    m = TelemetryRecorder().snapshot().memory
    assert len(m) == 0 and m.vram_used.shape == (0, 0)


def test_done_without_rounds():
    rec = TelemetryRecorder()
    events = answer_events([])
    feed_all(rec, 1, None, events)
    assert isinstance(events[-1], Done)
    snap = rec.snapshot()
    assert snap.answer.tokens == 1 and snap.answer.tok_s is None and len(snap.rounds) == 0


def test_totals_over_answers_are_the_pooled_counts_of_the_engine():
    rec = TelemetryRecorder()
    short = answer_events([R(4, 4, 4)])  # its one round fully accepted: 100%
    long = answer_events([R(4, 4, 1)] * 9)  # none of its nine: 0%
    t = feed_all(rec, 1, "c", short)
    feed_all(rec, 2, "c", long, t0=t + 1)
    total = rec.totals()
    assert total.sequence_acceptance == 1 / 10  # not the mean of 100% and 0%
    assert total.counts == short[-1].stats.counts + long[-1].stats.counts
    assert total.tok_s == pytest.approx((short[-1].stats.counts + long[-1].stats.counts).decode_tok_s)


def test_prefill_rate_leaves_out_the_reused_prompt():
    rec = TelemetryRecorder()
    events = answer_events([R(4, 4, 3)] * 2)
    events = [Prefilled(1000, 900, 0.5) if isinstance(e, Prefilled) else e for e in events]
    for t, e in timed(events[:-1]):  # streaming: the recorder's own count of the Prefilled event
        rec.feed(1, None, e, now=t)
    assert rec.snapshot().answer.prefill_tok_s == pytest.approx(100 / 0.5)
    assert rec.totals().as_dict()["prefill_tokens"] == 100


def test_the_reasoning_block_and_the_answer_are_counted_apart_live_and_when_done():
    from specchat.engine.phases import PhaseTagger

    events = answer_events([R(4, 4, 1)] * 4 + [R(4, 4, 4)] * 2)
    # the first token opens a think block; the fourth round's target token closes it
    texts, rounds_seen = [], 0
    for ev in events:
        if isinstance(ev, TokensEmitted):
            texts.append(ev)
        if isinstance(ev, RoundStats):
            rounds_seen += 1
    tagger = PhaseTagger()
    script = []
    n_round = 0
    for ev in events:
        if isinstance(ev, TokensEmitted) and ev is texts[0]:
            ev = TokensEmitted(ev.token_ids, ev.origins, "<think>")
        elif isinstance(ev, TokensEmitted) and n_round == 4 and ev.text == "t":
            ev = TokensEmitted(ev.token_ids, ev.origins, "</think>The answer is")
        if isinstance(ev, RoundStats):
            n_round += 1
        script.append(tagger.tag(ev))
    rec = TelemetryRecorder()
    feed_all(rec, 1, "chat", script[:-1])  # streaming: the rounds' own phases
    live = rec.snapshot().answer.phases
    assert live.reasoning.rounds == 4 and live.answer.rounds == 2
    assert live.reasoning.token_acceptance == pytest.approx(0.25) and live.answer.token_acceptance == 1.0
    feed_all(rec, 1, "chat", script[-1:])
    done = rec.snapshot()
    assert done.answer.phases == script[-1].stats.phases == live
    assert done.total.phases.reasoning.drafted == 16
    assert [r.phase for r in rec.rounds()] == ["reasoning"] * 4 + ["answer"] * 2
