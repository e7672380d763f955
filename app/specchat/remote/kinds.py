"""The kinds of server SpecChat knows, one class each, and the one list the probe tries in order.

What differs between servers lives in its class, nowhere else: how the probe recognises it
(from what it answers, never a version number), what it says about its speculation, the
request body's extras and structured-output fields, how its answers report speculation
(rounds rebuilt live, or a summary), and what it cannot report (its ``notes``).

A new kind is one class here and one line in :data:`KINDS`: the probe tries the kinds in
that order and takes the first that recognises the server; :class:`OpenAICompatible`, which
recognises anything that lists ``/v1/models``, stays last.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import httpx2

from specchat.bounded_json import loads
from specchat.engine.settings import SamplingSettings, Structured, StructuredOutput

from .counters import RequestSpec, ServerMetrics, sglang_request_spec, vllm_chunk_spec
from .errors import ServerError


class AnswerRequest(Protocol):
    """What of :class:`specchat.engine.answer.AnswerRequest` a request body reads (a protocol: that module
    reads :class:`~.client.Capabilities`, which reads this one)."""

    @property
    def sampling(self) -> SamplingSettings: ...
    @property
    def reasoning(self) -> bool | None: ...
    @property
    def fresh_prompt(self) -> bool: ...
    @property
    def mode(self) -> Any: ...  # the chat's speculation mode (a Mode)


class Prober(Protocol):
    """What a kind may ask the server while it is probed (:class:`~.client.ServerClient`)."""

    where: str

    def get(self, path: str, *, timeout: float = 10.0) -> httpx2.Response: ...


@dataclass(frozen=True, slots=True)
class Probe:
    """What every probe reads first: ``/health`` and the owners in ``/v1/models``."""

    server: Prober
    health: httpx2.Response
    owners: frozenset[str]

    def json(self, path: str) -> Any:
        """``path``'s JSON when it answers 200 with JSON, else None."""
        return self.parse(self.server.get(path))

    @staticmethod
    def parse(r: httpx2.Response) -> Any:
        if r.status_code != 200:
            return None
        with contextlib.suppress(ValueError):  # not JSON, bad UTF-8, nested too deep (bounded_json)
            return loads(r.content.decode("utf-8"))
        return None


@dataclass(frozen=True, slots=True)
class Recognised:
    """A kind's yes, with the document it read about the server on the way (None if none)."""

    props: Any = None


@dataclass(slots=True)
class Said:
    """What a server said about itself, for :class:`~.client.Capabilities`."""

    ctx: int | None
    speculative: bool | None = None
    speculation: str = ""
    n_max: int | None = None
    build: str = ""
    notes: list[str] = field(default_factory=list)


class ServerKind:
    """One kind of server.  The defaults are an OpenAI-compatible server's."""

    name: ClassVar[str]  # Capabilities.engine: what the panel and the answer's footer say
    metrics: ClassVar[bool] = False  # the probe reads its /metrics
    per_round: ClassVar[bool] = False  # rounds, origins and the token count rebuilt live from the stream
    per_request_mode: ClassVar[bool] = False  # a request chooses its own speculation mode (baseline included)

    def recognise(self, probe: Probe) -> Recognised | None:
        raise NotImplementedError

    def describe(self, said: Said, props: Any, counters: ServerMetrics | None, probe: Probe) -> None:
        """Fill ``said`` from what the probe read (``props``, the server's counters)."""

    def body_extras(self, body: dict[str, Any], req: AnswerRequest) -> None:
        """Add this kind's own fields to the ``/v1/chat/completions`` body."""

    def structured_fields(self, structured: StructuredOutput) -> dict[str, Any]:
        """The fields that hold an answer to a JSON schema (OpenAI's ``response_format``) or a grammar."""
        if structured.kind == Structured.JSON_SCHEMA:
            return {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "answer", "schema": _schema(structured),
                                                        "strict": True}}}
        return self.grammar_fields(structured.text)

    def grammar_fields(self, grammar: str) -> dict[str, Any]:
        raise ServerError("this server takes a JSON schema but no GBNF grammar: use a schema, or answer locally")

    def summary(self, chunk: dict, where: str) -> RequestSpec | None:
        """The answer's own speculation summary, if this chunk carries it."""
        return None

    def live_server_counters(self, metrics: bool) -> bool:
        """Whether live rounds come from polling the server-wide counters while an answer streams."""
        return False


def _schema(structured: StructuredOutput) -> Any:
    try:
        return json.loads(structured.text)
    except ValueError as exc:
        raise ServerError(f"the JSON schema is not valid JSON: {exc}") from None


class _OpenSampling(ServerKind):
    """The servers that take top_k, min_p and the template's reasoning switch."""

    metrics = True

    def body_extras(self, body: dict[str, Any], req: AnswerRequest) -> None:
        s = req.sampling
        body["top_k"] = s.top_k if s.top_k > 0 else -1
        body["min_p"] = s.min_p
        if req.reasoning is not None:
            body["chat_template_kwargs"] = {"enable_thinking": req.reasoning}


class LlamaServer(_OpenSampling):
    """llama-server: ``/health`` answers ``{"status": "ok"}``, ``/props`` has
    ``default_generation_settings``/``build_info``, ``/slots`` says which slots draft, ``/metrics``
    (only with ``--metrics``) has the ``llamacpp:spec_decode_*`` counters.  ``timings_per_token``
    makes every chunk carry the running totals, from which each round is rebuilt exactly."""

    name = "llama.cpp"
    per_round = True

    def recognise(self, probe: Probe) -> Recognised | None:
        props = probe.json("/props")
        said_so = "llamacpp" in probe.owners or _is_llama_health(probe.health)
        if said_so or (isinstance(props, dict) and ("default_generation_settings" in props or "build_info" in props)):
            return Recognised(props)
        return None

    def describe(self, said: Said, props: Any, counters: ServerMetrics | None, probe: Probe) -> None:
        if isinstance(props, dict):
            gen = props.get("default_generation_settings")
            if isinstance(gen, dict):
                said.ctx = as_int(gen.get("n_ctx")) or said.ctx
                params = gen.get("params")
                said.n_max = as_int(params.get("speculative.n_max")) if isinstance(params, dict) else None
            info = props.get("build_info")
            said.build = str(info)[:80] if isinstance(info, str | int) else ""
            doc = probe.json("/slots")
            if isinstance(doc, list) and doc and all(isinstance(s, dict) for s in doc):
                flags = [s.get("speculative") for s in doc if isinstance(s.get("speculative"), bool)]
                said.speculative = any(flags) if flags else None
                first = doc[0].get("params")
                if isinstance(first, dict):
                    said.n_max = as_int(first.get("speculative.n_max")) or said.n_max
                    types = first.get("speculative.types") or first.get("speculative.type")
                    if isinstance(types, str | list):
                        said.speculation = ",".join(types) if isinstance(types, list) else types
            if said.speculative:
                said.speculation = (said.speculation or "draft") + (f", up to {said.n_max} tokens" if said.n_max else "")
            if not counters:
                said.notes.append("server-wide counters: none (start llama-server with --metrics to cross-check)")

    def body_extras(self, body: dict[str, Any], req: AnswerRequest) -> None:
        super().body_extras(body, req)
        body["repeat_penalty"] = req.sampling.repeat_penalty
        body["timings_per_token"] = True  # the running totals on every chunk: rounds rebuilt live
        if req.fresh_prompt:
            body["cache_prompt"] = False

    def structured_fields(self, structured: StructuredOutput) -> dict[str, Any]:
        if structured.kind == Structured.JSON_SCHEMA:
            return {"json_schema": _schema(structured)}
        return {"grammar": structured.text}


class VLLM(_OpenSampling):
    """vLLM: ``/v1/models`` entries are ``owned_by: "vllm"``; ``/metrics`` has the ``vllm:spec_decode_*``
    counters once a speculative config exists, polled while an answer streams (they cover the whole
    server); the answer's own summary (``--per-request-spec-decode-metrics``) replaces them at the end."""

    name = "vllm"

    def recognise(self, probe: Probe) -> Recognised | None:
        return Recognised() if "vllm" in probe.owners else None

    def describe(self, said: Said, props: Any, counters: ServerMetrics | None, probe: Probe) -> None:
        said.speculative = bool(counters and counters.spec is not None) or None
        said.speculation = "speculative config on (vLLM)" if said.speculative else ""
        said.notes.append("live acceptance: vLLM's /metrics counters, which cover the whole server, not this chat")

    def body_extras(self, body: dict[str, Any], req: AnswerRequest) -> None:
        super().body_extras(body, req)
        body["repetition_penalty"] = req.sampling.repeat_penalty

    def grammar_fields(self, grammar: str) -> dict[str, Any]:
        return {"structured_outputs": {"grammar": grammar}}  # vLLM >= 0.12 (it replaced guided_grammar)

    def summary(self, chunk: dict, where: str) -> RequestSpec | None:
        return vllm_chunk_spec(chunk, where)

    def live_server_counters(self, metrics: bool) -> bool:
        return metrics


class SGLang(_OpenSampling):
    """SGLang: ``/get_server_info`` answers, with its speculative settings; each answer's
    ``sglext``/``meta_info`` summary comes at its end."""

    name = "sglang"

    def recognise(self, probe: Probe) -> Recognised | None:
        r = probe.server.get("/get_server_info")
        return Recognised(probe.parse(r)) if r.status_code == 200 else None

    def describe(self, said: Said, props: Any, counters: ServerMetrics | None, probe: Probe) -> None:
        if not isinstance(props, dict):
            return
        algo = props.get("speculative_algorithm")
        said.speculative = bool(algo) if algo is not None else None
        n = as_int(props.get("speculative_num_draft_tokens"))
        said.n_max = n - 1 if n else None
        said.speculation = f"{algo}, {said.n_max} draft tokens" if algo and said.n_max else str(algo or "")
        said.notes.append("acceptance: SGLang reports it per answer, at the end")

    def body_extras(self, body: dict[str, Any], req: AnswerRequest) -> None:
        super().body_extras(body, req)
        body["repetition_penalty"] = req.sampling.repeat_penalty
        body["return_spec_tokens_details"] = True

    def grammar_fields(self, grammar: str) -> dict[str, Any]:
        return {"ebnf": grammar}

    def summary(self, chunk: dict, where: str) -> RequestSpec | None:
        if "sglext" in chunk or "meta_info" in chunk:
            return sglang_request_spec(chunk if "sglext" in chunk else chunk.get("meta_info"), where)
        return None


class SpecChatServer(_OpenSampling):
    """Another SpecChat (``specchat serve``, or a window serving its API): ``/v1/models`` entries are
    ``owned_by: "specchat"`` with the pair in ``meta``; a chat's speculation mode travels with each
    request (``"specchat": {"mode": ...}``), and each answer's own drafted and accepted tokens come in
    the ``specchat`` object of its last chunk."""

    name = "specchat"
    metrics = False
    per_request_mode = True

    def recognise(self, probe: Probe) -> Recognised | None:
        if "specchat" not in probe.owners:
            return None
        doc = probe.json("/v1/models")
        data = doc.get("data") if isinstance(doc, dict) else None
        meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], dict) else None
        return Recognised(meta if isinstance(meta, dict) else {})

    def describe(self, said: Said, props: Any, counters: ServerMetrics | None, probe: Probe) -> None:
        if not isinstance(props, dict):
            return
        said.ctx = as_int(props.get("n_ctx")) or said.ctx
        draft = props.get("draft")
        said.speculative = True  # lookup needs no draft model; a request chooses its mode
        said.speculation = "per request: " + ("draft model " + str(draft)[:80] if isinstance(draft, str)
                                              else "prompt lookup (no draft model)")

    def body_extras(self, body: dict[str, Any], req: AnswerRequest) -> None:
        super().body_extras(body, req)
        body["repeat_penalty"] = req.sampling.repeat_penalty
        body["specchat"] = {"mode": req.mode.value}
        if req.fresh_prompt:
            body["cache_prompt"] = False

    def summary(self, chunk: dict, where: str) -> RequestSpec | None:
        spec = chunk.get("specchat")
        if not isinstance(spec, dict):
            return None
        drafted, accepted = as_int(spec.get("drafted")), as_int(spec.get("accepted"))
        if drafted is None or accepted is None or accepted > drafted:
            return None
        return RequestSpec("specchat", drafted, accepted, None, None, None)


class OpenAICompatible(ServerKind):
    """Anything else that lists ``/v1/models``: the OpenAI fields only, tok/s only."""

    name = "openai"

    def recognise(self, probe: Probe) -> Recognised | None:
        return Recognised()

    def describe(self, said: Said, props: Any, counters: ServerMetrics | None, probe: Probe) -> None:
        said.notes.append("acceptance, draft length: this server does not report speculation (tok/s only)")


# The probe tries these in order; the first that recognises the server is its kind.  A new kind: one line.
KINDS: tuple[ServerKind, ...] = (
    VLLM(),
    SpecChatServer(),
    LlamaServer(),
    SGLang(),
    OpenAICompatible(),  # recognises anything: last
)


def kind_named(name: str) -> ServerKind:
    """The kind whose :attr:`~ServerKind.name` a :class:`~.client.Capabilities` carries (an unknown
    name: an OpenAI-compatible server)."""
    return next((k for k in KINDS if k.name == name), OpenAICompatible())


def recognise(probe: Probe) -> tuple[ServerKind, Any]:
    """The first of :data:`KINDS` that recognises the server, with what it read about it."""
    for kind in KINDS:
        found = kind.recognise(probe)
        if found is not None:
            return kind, found.props
    raise ServerError(f"{probe.server.where}: no kind of server recognised it")


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31 else None


def _is_llama_health(r: httpx2.Response) -> bool:
    try:
        doc = loads(r.content.decode("utf-8"))
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("status") == "ok"
