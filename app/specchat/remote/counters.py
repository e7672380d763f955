"""What inference servers report about speculative decoding, parsed (pure functions, no HTTP).

Three kinds of report, each read by a total parser: any text or JSON a broken or hostile
server sends gives either a value or one :class:`~specchat.remote.errors.ServerError` that
names the server, never another exception.

* Server-wide Prometheus counters (``/metrics``) → :func:`parse_metrics` →
  :class:`ServerMetrics` with additive :class:`SpecCounters`; :func:`delta` of two scrapes.
  Names, as the servers print them:

  - llama.cpp (``tools/server/server-task.cpp``, ``to_metrics``, as vendored by
    llama-cpp-python 0.3.36, llama.cpp commit 0c1e5709): ``llamacpp:spec_decode_num_drafts_total``
    (verification steps), ``llamacpp:spec_decode_num_draft_tokens_total``,
    ``llamacpp:spec_decode_num_accepted_tokens_total``,
    ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` (only once a
    speculative request has finished), ``llamacpp:tokens_predicted_total``,
    ``llamacpp:requests_processing``.  That build prints the three spec counters always (0
    without a draft model) and has no KV-usage gauge; older builds had
    ``llamacpp:kv_cache_usage_ratio`` and no spec counters.  Its totals are written with
    ``ostream << double`` (6 significant digits), so above 999,999 they are rounded
    (``1.23457e+06``); the per-position counts are exact integers.  They are folded in when
    a request finishes, so they do not move during an answer.
  - vLLM (``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm``; ``vllm/v1/metrics/loggers.py``
    ``PrometheusStatLogger``): ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
    ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos{position}`` (counters,
    exposed with ``_total`` and ``_created`` samples, one series per ``engine`` label, summed
    here), ``vllm:generation_tokens``, ``vllm:num_requests_running``,
    ``vllm:kv_cache_usage_perc`` (older: ``vllm:gpu_cache_usage_perc``).  They move every
    scheduler step.
  - SGLang (``python/sglang/srt/metrics/collector.py``): only the gauges
    ``sglang:spec_accept_rate`` / ``sglang:spec_accept_length`` (the most recent batch's, not
    counters), ``sglang:num_running_reqs``, ``sglang:token_usage``,
    ``sglang:generation_tokens_total``.

* GPU memory from NVIDIA dcgm-exporter (``DCGM_FI_DEV_FB_USED/_FREE/_RESERVED``, MiB) →
  :func:`parse_dcgm`.

* One request's own summary, from the response JSON → :class:`RequestSpec`:
  :func:`vllm_request_spec` (``metrics.speculative_decoding``), :func:`vllm_chunk_spec` (that,
  or the older per-choice ``speculative_decoding_stats``), :func:`vllm_request_timing`
  (``--enable-per-request-metrics``), :func:`sglang_request_spec` (``meta_info`` ``spec_*``
  or ``sglext.spec_tokens_details``).

The fixtures in ``tests/helpers/fixtures`` carry the exact sources of every name.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specchat import metrics
from specchat.bounded_json import loads
from specchat.remote.errors import ServerError

MAX_METRICS_CHARS = 8 << 20  # a /metrics page is tens of KiB; a bigger one is not a metrics page
MAX_JSON_CHARS = 32 << 20  # one SSE chunk or answer; a detailed vLLM summary of 1e6 steps is ~12 MB
MAX_POSITIONS = 64  # draft positions (K); servers allow K up to a few dozen
MAX_STEPS = 1_000_000  # verification steps of one request (a 1M-token answer at one step per token)
MAX_COUNT = 10**18  # a counter beyond this is garbage, not traffic
MIB = 1 << 20

ENGINES = {"llamacpp:": "llama.cpp", "vllm:": "vllm", "sglang:": "sglang"}


# -- counters -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Speculative-decoding counts, server-wide or per request; they add up.

    Sequence acceptance (steps whose whole draft was accepted) is NOT derivable from these
    counts: a step that drafted 3 and accepted 1 and one that drafted 1 and accepted 1 add the
    same way.  It needs per-step data (vLLM ``detailed``, llama.cpp ``timings`` deltas) or a
    histogram; see :attr:`RequestSpec.fully_accepted_steps`.
    """

    drafts: int = 0  # verification steps that had a draft (vLLM num_drafts, llama.cpp n_draft_verif_steps)
    draft_tokens: int = 0
    accepted: int = 0
    per_position: tuple[int, ...] = ()  # accepted tokens per draft position 0..n-1

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
                            self.accepted + other.accepted, _zip_pad(self.per_position, other.per_position, 1))

    @property
    def token_acceptance(self) -> float | None:
        """Accepted draft tokens / drafted tokens (None when nothing was drafted)."""
        return metrics.token_acceptance(self.accepted, self.draft_tokens)

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens emitted per verification step, the bonus token included: 1 + accepted/drafts
        (vLLM's definition, which llama.cpp's log line uses too)."""
        mean = metrics.mean_accepted(self.accepted, self.drafts)
        return None if mean is None else 1.0 + mean

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        """The share of steps whose draft position i was accepted (vLLM's per-position rate)."""
        return tuple(n / self.drafts for n in self.per_position) if self.drafts else ()


def delta(before: SpecCounters, after: SpecCounters) -> SpecCounters | None:
    """The counts between two scrapes, or None when any count went down (the server restarted,
    or a different server answers at that address)."""
    steps = _zip_pad(after.per_position, before.per_position, -1)
    diffs = (after.drafts - before.drafts, after.draft_tokens - before.draft_tokens,
             after.accepted - before.accepted)
    if min((*diffs, *steps), default=0) < 0:
        return None
    return SpecCounters(*diffs, per_position=steps)


def _zip_pad(a: tuple[int, ...], b: tuple[int, ...], sign: int) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """One ``/metrics`` scrape, reduced to what SpecChat shows."""

    engine: str  # "llama.cpp" | "vllm" | "sglang" | "" (from the metric name prefixes)
    spec: SpecCounters | None  # None when the server exposes no speculative counters
    tokens_generated: float | None  # llamacpp:tokens_predicted_total / vllm:generation_tokens_total
    requests_running: float | None
    kv_cache_usage: float | None  # 0..1
    sglang_accept_rate: float | None = None  # gauges of the most recent batch, not counters
    sglang_accept_length: float | None = None


# the sample names (less "_total") each field sums over engines; the first name present wins
_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "llama.cpp": {
        "drafts": ("llamacpp:spec_decode_num_drafts",),
        "draft_tokens": ("llamacpp:spec_decode_num_draft_tokens",),
        "accepted": ("llamacpp:spec_decode_num_accepted_tokens",),
        "per_pos": ("llamacpp:spec_decode_num_accepted_tokens_per_pos",),
        "tokens": ("llamacpp:tokens_predicted",),
        "running": ("llamacpp:requests_processing",),
        "kv": ("llamacpp:kv_cache_usage_ratio",),
    },
    "vllm": {
        "drafts": ("vllm:spec_decode_num_drafts",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
        "accepted": ("vllm:spec_decode_num_accepted_tokens",),
        "per_pos": ("vllm:spec_decode_num_accepted_tokens_per_pos",),
        "tokens": ("vllm:generation_tokens",),
        "running": ("vllm:num_requests_running",),
        "kv": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    },
    "sglang": {
        "tokens": ("sglang:generation_tokens",),
        "running": ("sglang:num_running_reqs",),
        "kv": ("sglang:token_usage",),
        "accept_rate": ("sglang:spec_accept_rate",),
        "accept_length": ("sglang:spec_accept_length",),
    },
}
_MEANS = {"kv", "accept_rate", "accept_length"}  # ratios: averaged over engines/ranks, not summed


@dataclass(frozen=True, slots=True)
class _Sample:
    name: str  # "_total" stripped
    labels: Mapping[str, str]
    value: float


def _samples(text: object, where: str) -> list[_Sample]:
    if not isinstance(text, str):
        raise ServerError(f"{where}: its metrics page is not text; check that the address is the server's")
    if len(text) > MAX_METRICS_CHARS:
        raise ServerError(f"{where}: its metrics page is over {MAX_METRICS_CHARS >> 20} MiB; "
                          "check that the address is the server's /metrics")
    try:
        found = [
            _Sample(s.name.removesuffix("_total"), dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if not s.name.endswith("_created")  # vLLM's creation timestamps, not counts
        ]
    except Exception as exc:  # the parser's own errors are ValueError, but hostile text finds others
        raise ServerError(f"{where}: its metrics page is not Prometheus text ({type(exc).__name__}); "
                          "check that the address is the server's /metrics") from None
    return found


def _engine_of(samples: Iterable[_Sample]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for s in samples:
        for prefix, engine in ENGINES.items():
            if s.name.startswith(prefix):
                counts[engine] += 1
    return max(counts, key=lambda e: counts[e]) if counts else ""


def _value(samples: Sequence[_Sample], names: tuple[str, ...], where: str, mean: bool) -> float | None:
    for name in names:
        values = [_finite(s.value, name, where) for s in samples if s.name == name]
        if values:
            return sum(values) / len(values) if mean else sum(values)
    return None


def _finite(value: float, name: str, where: str) -> float:
    if not math.isfinite(value) or value < 0 or value > MAX_COUNT:
        raise ServerError(f"{where}: its metric {name} is {value!r}, not a count; the server is misbehaving")
    return value


def _position(label: str | None, name: str, where: str) -> int:
    if label is None or not label.isascii() or not label.isdigit() or int(label) >= MAX_POSITIONS:
        raise ServerError(f"{where}: its metric {name} has position {label!r}, not 0..{MAX_POSITIONS - 1}; "
                          "the server is misbehaving")
    return int(label)


def _per_position(samples: Sequence[_Sample], names: tuple[str, ...], where: str) -> tuple[int, ...]:
    counts: dict[int, float] = defaultdict(float)
    for s in samples:
        if s.name in names:
            counts[_position(s.labels.get("position"), s.name, where)] += _finite(s.value, s.name, where)
    return tuple(round(counts.get(i, 0.0)) for i in range(max(counts) + 1)) if counts else ()


def parse_metrics(text: str, where: str) -> ServerMetrics:
    """One ``/metrics`` page → :class:`ServerMetrics` (``where`` names the server in messages)."""
    samples = _samples(text, where)
    engine = _engine_of(samples)
    names = _FIELDS.get(engine, {})

    def get(field: str) -> float | None:
        return _value(samples, names[field], where, field in _MEANS) if field in names else None

    counts = [get(f) for f in ("drafts", "draft_tokens", "accepted")]
    per_position = _per_position(samples, names.get("per_pos", ()), where)
    spec = None
    if per_position or any(c is not None for c in counts):
        drafts, draft_tokens, accepted = (round(c or 0.0) for c in counts)
        spec = SpecCounters(drafts, draft_tokens, accepted, per_position)
    return ServerMetrics(engine=engine, spec=spec, tokens_generated=get("tokens"), requests_running=get("running"),
                         kv_cache_usage=get("kv"), sglang_accept_rate=get("accept_rate"),
                         sglang_accept_length=get("accept_length"))


@dataclass(frozen=True, slots=True)
class GpuMemory:
    gpu: str  # dcgm-exporter's "gpu" label (the index), with the host when several hosts answer
    used_bytes: int
    total_bytes: int  # used + free + reserved
    name: str = ""  # "modelName"


def parse_dcgm(text: str, where: str) -> tuple[GpuMemory, ...]:
    """dcgm-exporter's page → one :class:`GpuMemory` per GPU (framebuffer MiB, as DCGM reports it)."""
    fields = {"DCGM_FI_DEV_FB_USED": 0, "DCGM_FI_DEV_FB_FREE": 1, "DCGM_FI_DEV_FB_RESERVED": 2}
    gpus: dict[tuple[str, str], list[float]] = {}
    names: dict[tuple[str, str], str] = {}
    for s in _samples(text, where):
        if s.name in fields:
            key = (s.labels.get("Hostname", ""), s.labels.get("gpu", s.labels.get("UUID", "")))
            gpus.setdefault(key, [0.0, 0.0, 0.0])[fields[s.name]] = _finite(s.value, s.name, where)
            names[key] = s.labels.get("modelName", "")
    hosts = {host for host, _ in gpus}
    return tuple(
        GpuMemory(gpu=f"{host}/{gpu}" if len(hosts) > 1 else gpu, used_bytes=round(used * MIB),
                  total_bytes=round((used + free + reserved) * MIB), name=names[(host, gpu)])
        for (host, gpu), (used, free, reserved) in sorted(gpus.items(), key=lambda kv: _gpu_order(kv[0]))
    )


def _gpu_order(key: tuple[str, str]) -> tuple[str, int, str]:
    host, gpu = key
    return (host, int(gpu) if gpu.isascii() and gpu.isdigit() and len(gpu) < 6 else 1 << 20, gpu)


# -- one request's summary ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request's speculation summary, as a server reported it."""

    source: str  # e.g. "vllm metrics.speculative_decoding", "sglang meta_info", "sglext.spec_tokens_details"
    drafted: int
    accepted: int
    steps: int | None  # verification steps, when known
    per_step: tuple[tuple[int, int], ...] | None  # (drafted, accepted) per step: exact rounds (vLLM detailed)
    fully_accepted_steps: int | None  # from per_step, or a histogram when every step drafted K; else None
    histogram: tuple[int, ...] | None = None  # [j] = steps that accepted exactly j draft tokens
    max_draft: int | None = None  # K: vLLM num_spec_tokens, SGLang speculative_num_draft_tokens - 1

    @property
    def counters(self) -> SpecCounters:
        return SpecCounters(self.steps or 0, self.drafted, self.accepted)

    @property
    def token_acceptance(self) -> float | None:
        return metrics.token_acceptance(self.accepted, self.drafted)

    @property
    def sequence_acceptance(self) -> float | None:
        if self.fully_accepted_steps is None or self.steps is None:
            return None
        return metrics.sequence_acceptance(self.fully_accepted_steps, self.steps)


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """vLLM's per-request timing (``--enable-per-request-metrics``); any field may be null."""

    time_to_first_token_ms: float | None
    generation_time_ms: float | None  # first output token to last (decode only)
    queue_time_ms: float | None
    mean_itl_ms: float | None
    tokens_per_second: float | None  # all output tokens over scheduling → last token (prefill included)


def parse_json(text: str | bytes, where: str) -> object:
    """A JSON document from a server (an SSE ``data:`` payload, an answer), bounded and total."""
    if not isinstance(text, str | bytes) or len(text) > MAX_JSON_CHARS:
        raise ServerError(f"{where}: sent an answer over {MAX_JSON_CHARS >> 20} MiB or not text; "
                          "check that the address is an OpenAI-compatible server")
    try:
        return loads(text)
    except ValueError:  # JSONDecodeError, bad UTF-8, nesting deeper than bounded_json allows
        raise ServerError(f"{where}: sent malformed JSON; check that the address is an "
                          "OpenAI-compatible server") from None


def _count(obj: Mapping[str, object], key: str, where: str, what: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    return _int(value, f"{what}.{key}", where)


def _int(value: object, name: str, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a JSON 12.0 from a server that computed it in floats
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ServerError(f"{where}: reported {name} = {_show(value)}, not a count; the server is misbehaving")
    return value


def _number(value: object, name: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ServerError(f"{where}: reported {name} = {_show(value)}, not a number; the server is misbehaving")
    return float(value)


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, int | float | str | bool) or value is None else type(value).__name__
    return text if len(text) <= 40 else text[:39] + "…"


def _object(value: object, name: str, where: str) -> Mapping[str, object] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ServerError(f"{where}: reported {name} as {_show(value)}, not an object; the server is misbehaving")
    return value


def _int_list(value: object, name: str, where: str, limit: int) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > limit:
        raise ServerError(f"{where}: reported {name} as {_show(value)}, not a list of at most {limit} counts; "
                          "the server is misbehaving")
    return [_int(v, name, where) for v in value]


def _histogram(value: object, name: str, where: str) -> list[int] | None:
    """vLLM's dense ``[j] = steps`` list, or the sparse ``{"j": steps}`` map of the per-choice form."""
    if isinstance(value, dict):
        if len(value) > MAX_POSITIONS + 1:
            raise ServerError(f"{where}: reported {name} with {len(value)} buckets; the server is misbehaving")
        sparse = {_position(k if isinstance(k, str) else None, name, where): _int(v, name, where)
                  for k, v in value.items()}
        return [sparse.get(j, 0) for j in range(max(sparse) + 1)] if sparse else []
    return _int_list(value, name, where, MAX_POSITIONS + 1)


def vllm_request_spec(metrics_obj: object, where: str = "the server") -> RequestSpec | None:
    """The response's (or final usage chunk's) ``metrics`` object → its ``speculative_decoding``
    summary; None when either is absent or null (flag ``none``, ``n > 1``, no speculation)."""
    outer = _object(metrics_obj, "metrics", where)
    if outer is None:
        return None
    return _vllm_summary(outer.get("speculative_decoding"), "vllm metrics.speculative_decoding", where)


def vllm_chunk_spec(chunk: object, where: str = "the server") -> RequestSpec | None:
    """A whole vLLM answer or SSE chunk → its summary, wherever this vLLM puts it: the top-level
    ``metrics.speculative_decoding`` (v0.32 docs; the final usage chunk when streaming), or the
    older per-choice ``choices[0].speculative_decoding_stats`` (the terminal chunk's choice)."""
    body = _object(chunk, "the answer", where)
    if body is None:
        return None
    found = vllm_request_spec(body.get("metrics"), where)
    if found is not None:
        return found
    choices = body.get("choices")
    if isinstance(choices, list) and len(choices) == 1:  # n > 1 cannot be one request's summary
        choice = _object(choices[0], "choices[0]", where) or {}
        return _vllm_summary(choice.get("speculative_decoding_stats"), "vllm choices[0].speculative_decoding_stats",
                             where)
    return None


def _vllm_summary(value: object, source: str, where: str) -> RequestSpec | None:
    """Field names from vLLM's docs/features/speculative_decoding/acceptance_metrics.md and
    ``RequestSpecDecodeMetrics.to_dict`` (vllm/v1/metrics/stats.py): num_spec_steps,
    num_draft_tokens, num_accepted_draft_tokens, num_spec_tokens, acceptance_histogram,
    per_step_accepted / per_step_drafted (``detailed``)."""
    obj = _object(value, source, where)
    if obj is None:
        return None
    what = source.rsplit(" ", 1)[-1]
    drafted = _count(obj, "num_draft_tokens", where, what)
    accepted = _count(obj, "num_accepted_draft_tokens", where, what)
    steps = _count(obj, "num_spec_steps", where, what)
    if drafted is None or accepted is None:
        raise ServerError(f"{where}: its {what} lacks num_draft_tokens or num_accepted_draft_tokens; "
                          "the server's vLLM version formats it differently")
    k = _count(obj, "num_spec_tokens", where, what)
    if k is not None and k > MAX_POSITIONS:
        raise ServerError(f"{where}: reported {what}.num_spec_tokens = {k}, over {MAX_POSITIONS}")
    histogram = _histogram(obj.get("acceptance_histogram"), f"{what}.acceptance_histogram", where)
    per_step = _per_step(obj, what, where)
    _check_vllm(drafted, accepted, steps, histogram, per_step, what, where)
    return RequestSpec(source, drafted, accepted, steps, per_step,
                       _fully_accepted(per_step, histogram, k, steps, drafted),
                       None if histogram is None else tuple(histogram), k)


def _per_step(obj: Mapping[str, object], what: str, where: str) -> tuple[tuple[int, int], ...] | None:
    acc = _int_list(obj.get("per_step_accepted"), f"{what}.per_step_accepted", where, MAX_STEPS)
    dra = _int_list(obj.get("per_step_drafted"), f"{what}.per_step_drafted", where, MAX_STEPS)
    if acc is None and dra is None:
        return None
    if acc is None or dra is None or len(acc) != len(dra) or any(a > d for a, d in zip(acc, dra, strict=True)):
        raise ServerError(f"{where}: its {what} per-step arrays disagree (lengths, or accepted over drafted); "
                          "the server is misbehaving")
    return tuple(zip(dra, acc, strict=True))


def _check_vllm(drafted: int, accepted: int, steps: int | None, histogram: list[int] | None,
                per_step: tuple[tuple[int, int], ...] | None, what: str, where: str) -> None:
    """The invariants vLLM's own e2e test asserts (tests/e2e/.../test_per_request_spec_decode_metrics):
    histogram sums to the steps and weights to the accepted; per-step arrays have one entry per
    step and sum to the accepted.  (per_step_drafted may sum above num_draft_tokens: the docs say
    the total is after drafts invalidated by structured output were removed.)"""
    bad = accepted > drafted
    if histogram is not None:
        bad |= steps is not None and sum(histogram) != steps
        bad |= sum(j * n for j, n in enumerate(histogram)) != accepted
    if per_step is not None:
        bad |= steps is not None and len(per_step) != steps
        bad |= sum(a for _, a in per_step) != accepted
    if bad:
        raise ServerError(f"{where}: its {what} does not add up (histogram, per-step arrays and totals "
                          "disagree); the server is misbehaving")


def _fully_accepted(per_step: tuple[tuple[int, int], ...] | None, histogram: list[int] | None,
                    k: int | None, steps: int | None, drafted: int) -> int | None:
    if per_step is not None:
        return sum(1 for d, a in per_step if d > 0 and a == d)
    # histogram[K] counts the steps that accepted K; they are all the fully accepted steps only
    # when every step drafted K (a step that drafted fewer and kept all is not in that bucket)
    if histogram is not None and k and steps is not None and drafted == steps * k:
        return histogram[k] if k < len(histogram) else 0
    return None


def vllm_request_timing(metrics_obj: object, where: str = "the server") -> RequestTiming | None:
    """The ``metrics`` object → its timing fields (docs/features/per_request_metrics.md); None
    when absent or when it carries none of them (only ``speculative_decoding``)."""
    obj = _object(metrics_obj, "metrics", where)
    if obj is None:
        return None
    keys = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second")
    if not any(obj.get(k) is not None for k in keys):
        return None
    return RequestTiming(*(_number(obj.get(k), f"metrics.{k}", where) for k in keys))


# SGLang field names: python/sglang/srt/managers/.../spec_decoding_meta.py fill_spec_decoding_meta
# (canonical first, then the aliases "due for removal"), and entrypoints/openai/utils.py
# spec_tokens_details_from_meta_info (the sglext.spec_tokens_details fields)
_SGLANG_DRAFTED = ("spec_num_proposed_drafts", "spec_proposed_drafts")
_SGLANG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts")
_SGLANG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")
_SGLANG_KEYS = (*_SGLANG_DRAFTED, *_SGLANG_ACCEPTED, *_SGLANG_HISTOGRAM, "spec_verify_ct",
                "spec_accept_rate", "spec_accept_length")


def sglang_request_spec(obj: object, where: str = "the server") -> RequestSpec | None:
    """An SGLang ``meta_info`` (native ``/generate``), or an OpenAI answer / SSE chunk carrying
    ``sglext.spec_tokens_details`` (request field ``return_spec_tokens_details``), or that details
    object itself → its summary; None when it carries no speculative fields (or n > 1)."""
    body = _object(obj, "the answer", where)
    if body is None:
        return None
    source = "sglang meta_info"
    if "sglext" in body:
        sglext = _object(body.get("sglext"), "sglext", where) or {}
        details = sglext.get("spec_tokens_details")
        if isinstance(details, list):  # one entry per choice when n > 1
            details = details[0] if len(details) == 1 else None
        body = _object(details, "sglext.spec_tokens_details", where) or {}
        source = "sglext.spec_tokens_details"
    if not any(body.get(k) is not None for k in _SGLANG_KEYS):
        return None
    return _sglang_summary(body, source, where)


def _first(body: Mapping[str, object], keys: tuple[str, ...], where: str) -> int | None:
    for key in keys:
        value = _count(body, key, where, "meta_info")
        if value is not None:
            return value
    return None


def _sglang_summary(body: Mapping[str, object], source: str, where: str) -> RequestSpec:
    steps = _count(body, "spec_verify_ct", where, "meta_info")
    drafted = _first(body, _SGLANG_DRAFTED, where) or 0
    accepted = _first(body, _SGLANG_ACCEPTED, where) or 0
    histogram = next((_int_list(body[k], k, where, MAX_POSITIONS + 1) for k in _SGLANG_HISTOGRAM
                      if body.get(k) is not None), None)
    if accepted > drafted:
        raise ServerError(f"{where}: reported {accepted} accepted of {drafted} drafted tokens; "
                          "the server is misbehaving")
    # SGLang proposes verify_ct × (speculative_num_draft_tokens − 1), a fixed K, so K is exact here
    k = drafted // steps if steps and drafted % steps == 0 else None
    fully = None
    if histogram and k is not None and sum(histogram) == steps:  # a histogram that adds up, read at K
        fully = histogram[k] if k < len(histogram) else 0
    return RequestSpec(source, drafted, accepted, steps, None, fully,
                       None if histogram is None else tuple(histogram), k)
