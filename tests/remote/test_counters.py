"""What servers report about speculation, parsed: the documented fixtures, and hostile input.

Every parser is total: a value, or one ServerError (one line, naming the server), never
another exception.  The fuzz tests feed random JSON, mutated summaries and random or mutated
Prometheus text; hypothesis runs derandomized (reproducible), without a database.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat.remote.counters import (
    GpuMemory,
    RequestSpec,
    RequestTiming,
    ServerMetrics,
    SpecCounters,
    delta,
    parse_dcgm,
    parse_json,
    parse_metrics,
    sglang_request_spec,
    vllm_chunk_spec,
    vllm_request_spec,
    vllm_request_timing,
)
from specchat.remote.errors import ServerError

FIXTURES = Path(__file__).parents[1] / "helpers" / "fixtures"
WHERE = "vllm at http://gpu-box:8000"
FUZZ = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# the one request every per-request fixture describes: K = 3, 8 steps (drafted, accepted)
STEPS = ((3, 3), (3, 1), (3, 0), (3, 3), (3, 2), (3, 3), (3, 0), (3, 2))


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def sse_events(name: str) -> list[dict]:
    """The JSON payloads of an SSE fixture, in order (comments and [DONE] skipped)."""
    return [json.loads(line[6:]) for line in fixture(name).splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def assert_refused(call, *args) -> None:
    with pytest.raises(ServerError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message and len(message) <= 400
    assert WHERE in message


# -- /metrics -----------------------------------------------------------------------------------


def test_llamacpp_counters_from_the_vendored_build():
    found = parse_metrics(fixture("llamacpp_metrics_spec.txt"), WHERE)
    assert found.engine == "llama.cpp"
    # totals past 1e6 arrive rounded to 6 digits ("1.234e+06"); per-position counts are exact
    assert found.spec == SpecCounters(drafts=600123, draft_tokens=2345680, accepted=1234000,
                                      per_position=(500123, 380456, 250987, 102435))
    assert found.tokens_generated == 1234570.0
    assert found.requests_running == 1.0
    assert found.kv_cache_usage is None  # that build has no KV-usage gauge
    assert found.spec.token_acceptance == pytest.approx(1234000 / 2345680)
    assert found.spec.mean_accepted_length == pytest.approx(1 + 1234000 / 600123)
    assert found.spec.per_position_acceptance[0] == pytest.approx(500123 / 600123)


def test_llamacpp_without_a_draft_model_reports_zero_counters_not_none():
    found = parse_metrics(fixture("llamacpp_metrics_nodraft.txt"), WHERE)
    assert found.spec == SpecCounters()
    assert found.spec.token_acceptance is None and found.spec.mean_accepted_length is None
    assert found.spec.per_position_acceptance == ()


def test_an_older_llamacpp_build_has_no_speculative_counters():
    found = parse_metrics(fixture("llamacpp_metrics_plain.txt"), WHERE)
    assert found == ServerMetrics(engine="llama.cpp", spec=None, tokens_generated=2048.0, requests_running=0.0,
                                  kv_cache_usage=0.125)


def test_vllm_counters_are_summed_over_engines_and_created_samples_ignored():
    before = parse_metrics(fixture("vllm_metrics_before.txt"), WHERE)
    after = parse_metrics(fixture("vllm_metrics_after.txt"), WHERE)
    assert before.engine == "vllm"
    # engine 0 + engine 1; a _created timestamp (1.7592e9) added in would dwarf these
    assert before.spec == SpecCounters(1500, 4500, 2500, (1150, 820, 530))
    assert before.tokens_generated == 41877 + 16002
    assert after.requests_running == 1.0
    assert after.kv_cache_usage == pytest.approx(0.0123 / 2)  # a ratio: averaged over engines
    # the request's first 5 steps: (3,3) (3,1) (3,0) (3,3) (3,2)
    assert delta(before.spec, after.spec) == SpecCounters(5, 15, 9, (4, 3, 2))
    assert after.tokens_generated - before.tokens_generated == 15


def test_a_restarted_server_gives_no_delta():
    before = parse_metrics(fixture("vllm_metrics_after.txt"), WHERE).spec
    after = parse_metrics(fixture("vllm_metrics_before.txt"), WHERE).spec
    assert delta(before, after) is None
    assert delta(SpecCounters(5, 15, 9, (4, 3, 2)), SpecCounters(6, 18, 9, (4, 3, 1))) is None


def test_counters_add_and_subtract_with_per_position_padded():
    a, b = SpecCounters(2, 6, 3, (2, 1)), SpecCounters(1, 4, 4, (1, 1, 1, 1))
    assert a + b == SpecCounters(3, 10, 7, (3, 2, 1, 1))
    assert delta(a, a + b) == b
    assert delta(b, a + b) == SpecCounters(2, 6, 3, (2, 1, 0, 0))


def test_sglang_gauges_are_read_as_gauges():
    text = ('# TYPE sglang:spec_accept_rate gauge\n'
            'sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.5\n'
            'sglang:spec_accept_rate{model_name="m",tp_rank="1"} 0.7\n'
            '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 2.5\n'
            '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="m"} 2\n')
    found = parse_metrics(text, WHERE)
    assert found.engine == "sglang" and found.spec is None
    assert found.sglang_accept_rate == pytest.approx(0.6)
    assert found.sglang_accept_length == 2.5 and found.requests_running == 2.0


def test_a_page_from_something_else_is_no_engine():
    assert parse_metrics("# nothing here\nprocess_cpu_seconds_total 1.5\n", WHERE) == ServerMetrics(
        "", None, None, None, None)


@pytest.mark.parametrize("text", [
    "llamacpp:spec_decode_num_drafts_total NaN\n",
    "llamacpp:spec_decode_num_drafts_total -3\n",
    "llamacpp:spec_decode_num_drafts_total +Inf\n",
    "vllm:spec_decode_num_drafts_total{engine=\"0\"} 1e300\n",
    'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n',
    'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="64"} 1\n',
    'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="-1"} 1\n',
    'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="١"} 1\n',  # a non-ASCII digit
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0"} 1\n',  # no position at all
    "llamacpp:requests_processing{oops 1\n",
    "<html><body>502 Bad Gateway</body></html>\n",
    "x" * ((8 << 20) + 1),
])
def test_hostile_metrics_pages_are_one_server_error(text):
    assert_refused(parse_metrics, text, WHERE)


def test_dcgm_memory_per_gpu():
    gpus = parse_dcgm(fixture("dcgm_metrics.txt"), WHERE)
    mib = 1 << 20
    assert gpus == (
        GpuMemory("0", 61234 * mib, (61234 + 19378 + 481) * mib, "NVIDIA H100 80GB HBM3"),
        GpuMemory("1", 0, (81078 + 481) * mib, "NVIDIA H100 80GB HBM3"),
    )


def test_dcgm_from_two_hosts_names_the_host():
    text = ('DCGM_FI_DEV_FB_USED{gpu="0",Hostname="a"} 1\nDCGM_FI_DEV_FB_FREE{gpu="0",Hostname="a"} 1\n'
            'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="b"} 2\n')
    assert [g.gpu for g in parse_dcgm(text, WHERE)] == ["a/0", "b/0"]
    assert_refused(parse_dcgm, 'DCGM_FI_DEV_FB_USED{gpu="0"} NaN\n', WHERE)


# -- one request: vLLM ------------------------------------------------------------------------------


def test_vllm_summary_from_the_final_usage_chunk():
    chunks = sse_events("vllm_chat_stream_summary.sse")
    assert [i for i, c in enumerate(chunks) if c.get("metrics")] == [len(chunks) - 1]  # only the last
    assert chunks[-1]["choices"] == []
    spec = vllm_request_spec(chunks[-1]["metrics"], WHERE)
    assert spec == RequestSpec("vllm metrics.speculative_decoding", drafted=24, accepted=14, steps=8,
                               per_step=None, fully_accepted_steps=3, histogram=(2, 1, 2, 3), max_draft=3)
    assert spec.token_acceptance == pytest.approx(14 / 24)
    assert spec.sequence_acceptance == pytest.approx(3 / 8)
    assert spec.counters.mean_accepted_length == pytest.approx(2.75)  # vLLM's mean_acceptance_length
    assert vllm_request_timing(chunks[-1]["metrics"], WHERE) is None  # no timing fields in summary mode
    assert all(vllm_chunk_spec(c, WHERE) is None for c in chunks[:-1])


def test_vllm_detailed_gives_exact_rounds_and_timing():
    last = sse_events("vllm_chat_stream_detailed.sse")[-1]
    spec = vllm_chunk_spec(last, WHERE)
    assert spec is not None and spec.per_step == STEPS
    assert spec.fully_accepted_steps == sum(1 for d, a in STEPS if a == d)
    assert vllm_request_timing(last["metrics"], WHERE) == RequestTiming(41.7, 118.3, 0.4, 14.8, 144.1)


def test_vllm_reasoning_deltas_use_the_current_field_name():
    deltas = [c["choices"][0]["delta"] for c in sse_events("vllm_chat_stream_summary.sse") if c["choices"]]
    assert any("reasoning" in d for d in deltas) and not any("reasoning_content" in d for d in deltas)


def test_vllm_absent_or_null_summary_is_none():
    assert vllm_request_spec(None, WHERE) is None
    assert vllm_request_spec({"speculative_decoding": None}, WHERE) is None
    assert vllm_request_spec({"time_to_first_token_ms": 3.0}, WHERE) is None
    assert vllm_chunk_spec({"choices": [{"index": 0}, {"index": 1}]}, WHERE) is None  # n > 1


def test_vllm_older_per_choice_stats_with_a_sparse_histogram():
    # the example of acceptance_metrics.md at vllm commit cd199986 (stats per choice)
    stats = {"mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
             "acceptance_histogram": {"0": 39, "1": 1, "3": 3}, "num_spec_steps": 43,
             "num_accepted_draft_tokens": 10, "num_draft_tokens": 129, "num_spec_tokens": 3}
    spec = vllm_chunk_spec({"choices": [{"index": 0, "finish_reason": "stop", "speculative_decoding_stats": stats}]},
                           WHERE)
    assert spec == RequestSpec("vllm choices[0].speculative_decoding_stats", 129, 10, 43, None, 3, (39, 1, 0, 3), 3)


def test_vllm_variable_draft_lengths_leave_sequence_acceptance_unknown():
    summary = sse_events("vllm_chat_stream_summary.sse")[-1]["metrics"]
    summary["speculative_decoding"]["num_draft_tokens"] = 20  # some steps drafted fewer than K
    spec = vllm_request_spec(summary, WHERE)
    assert spec is not None and spec.fully_accepted_steps is None and spec.sequence_acceptance is None


def valid_summary() -> dict:
    return sse_events("vllm_chat_stream_detailed.sse")[-1]["metrics"]


@pytest.mark.parametrize("field,value", [
    ("num_draft_tokens", True), ("num_draft_tokens", -1), ("num_draft_tokens", 1.5), ("num_draft_tokens", "24"),
    ("num_draft_tokens", float("nan")), ("num_draft_tokens", 10**30), ("num_accepted_draft_tokens", None),
    ("num_spec_steps", 9), ("num_spec_tokens", 1000), ("acceptance_histogram", [2, 1, 2, 4]),
    ("acceptance_histogram", list(range(100))), ("acceptance_histogram", {"a": 1}), ("acceptance_histogram", "x"),
    ("per_step_accepted", [3, 1, 0, 3, 2, 3, 0]), ("per_step_accepted", [4, 0, 0, 3, 2, 3, 0, 2]),
    ("per_step_drafted", None), ("per_step_drafted", [[3]] * 8), ("per_step_accepted", [0] * 1_000_001),
])
def test_vllm_broken_summaries_are_one_server_error(field, value):
    metrics_obj = valid_summary()
    metrics_obj["speculative_decoding"][field] = value
    assert_refused(vllm_request_spec, metrics_obj, WHERE)


@pytest.mark.parametrize("metrics_obj", [[], "x", 3, {"speculative_decoding": [1]},
                                         {"speculative_decoding": {"num_draft_tokens": 3}}])
def test_vllm_broken_metrics_objects_are_one_server_error(metrics_obj):
    assert_refused(vllm_request_spec, metrics_obj, WHERE)


@pytest.mark.parametrize("metrics_obj", [[], {"tokens_per_second": -1.0}, {"mean_itl_ms": "fast"},
                                         {"generation_time_ms": float("inf")}, {"queue_time_ms": False}])
def test_vllm_broken_timing_is_one_server_error(metrics_obj):
    assert_refused(vllm_request_timing, metrics_obj, WHERE)


# -- one request: SGLang --------------------------------------------------------------------------------


def test_sglang_meta_info_new_and_old_names():
    meta = json.loads(fixture("sglang_meta_info.json"))["meta_info"]
    expected = RequestSpec("sglang meta_info", drafted=24, accepted=14, steps=8, per_step=None,
                           fully_accepted_steps=3, histogram=(2, 1, 2, 3), max_draft=3)
    assert sglang_request_spec(meta, WHERE) == expected
    old = {k: v for k, v in meta.items()
           if k not in ("spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram")}
    assert sglang_request_spec(old, WHERE) == expected  # only the aliases due for removal
    assert sglang_request_spec({"id": "x", "completion_tokens": 3}, WHERE) is None  # not drafting


def test_sglang_stream_carries_sglext_before_the_usage_chunk():
    chunks = sse_events("sglang_chat_stream.sse")
    carriers = [i for i, c in enumerate(chunks) if c.get("sglext")]
    assert carriers == [len(chunks) - 2] and "usage" in chunks[-1] and chunks[-1]["usage"]
    spec = sglang_request_spec(chunks[carriers[0]], WHERE)
    assert spec == RequestSpec("sglext.spec_tokens_details", 24, 14, 8, None, 3, (2, 1, 2, 3), 3)
    assert all(sglang_request_spec(c, WHERE) is None for c in chunks if not c.get("sglext"))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert any(d.get("reasoning_content") for d in deltas)


@pytest.mark.parametrize("meta", [
    {"spec_verify_ct": 8, "spec_num_proposed_drafts": 24, "spec_num_correct_drafts": 25},
    {"spec_verify_ct": -8}, {"spec_verify_ct": True}, {"spec_num_correct_drafts": "14"},
    {"spec_correct_drafts_histogram": [1] * 70}, {"sglext": []}, {"sglext": {"spec_tokens_details": 3}},
])
def test_sglang_broken_details_are_one_server_error(meta):
    assert_refused(sglang_request_spec, meta, WHERE)


# -- fuzz ---------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=40,
)
SUMMARY_KEYS = list(valid_summary()["speculative_decoding"])
SGLANG_KEYS = list(json.loads(fixture("sglang_meta_info.json"))["meta_info"])


def total(call, *args) -> None:
    try:
        call(*args)
    except ServerError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(json_values)
def test_fuzz_json_parsers_on_random_json(value):
    for call in (vllm_request_spec, vllm_chunk_spec, vllm_request_timing, sglang_request_spec):
        total(call, value, WHERE)
        total(call, {"metrics": value, "sglext": value, "choices": [value]}, WHERE)
    total(vllm_request_spec, {"speculative_decoding": value}, WHERE)


@FUZZ
@given(st.sampled_from(SUMMARY_KEYS), json_values, st.sampled_from(SGLANG_KEYS))
def test_fuzz_json_parsers_on_mutated_summaries(key, value, sglang_key):
    metrics_obj = valid_summary()
    metrics_obj["speculative_decoding"][key] = value
    total(vllm_request_spec, metrics_obj, WHERE)
    meta = copy.deepcopy(json.loads(fixture("sglang_meta_info.json"))["meta_info"])
    meta[sglang_key] = value
    total(sglang_request_spec, meta, WHERE)
    total(sglang_request_spec, {"sglext": {"spec_tokens_details": meta}}, WHERE)


PAGES = [fixture(n) for n in ("vllm_metrics_after.txt", "llamacpp_metrics_spec.txt", "dcgm_metrics.txt")]


@FUZZ
@given(st.sampled_from(PAGES), st.integers(0, 10_000), st.integers(0, 40), st.text(max_size=30))
def test_fuzz_metrics_parsers_on_mutated_pages(page, at, cut, insert):
    at %= len(page)
    text = page[:at] + insert + page[at + cut:]
    total(parse_metrics, text, WHERE)
    total(parse_dcgm, text, WHERE)


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_metrics_parsers_on_random_text(text):
    total(parse_metrics, text, WHERE)
    total(parse_dcgm, text, WHERE)
    total(parse_json, text, WHERE)


def test_parse_json_refuses_deep_nesting_and_garbage():
    for text in ("[" * 100_000 + "]" * 100_000, "{not json", b"\xff\xfe", "x" * ((32 << 20) + 1)):
        assert_refused(parse_json, text, WHERE)
    assert parse_json('{"a": [1, 2.5, null]}', WHERE) == {"a": [1, 2.5, None]}
    assert math.isnan(parse_json("NaN", WHERE))  # Python's json accepts it; the field parsers refuse it
