"""The OpenAI wire format, both ways: a request body checked into an :class:`Call`, and an answer's events
turned into the objects a client reads.  No HTTP here (:mod:`.http` moves the bytes).

Every check of a body raises :class:`ApiError`: an HTTP status and an OpenAI-style error object whose
message names the field (``"temperature must be a finite number in [0, 2], not nan"``).  What SpecChat
adds goes where OpenAI clients pass it through untouched:

- asked: ``"specchat": {"mode": "auto" | "baseline" | "draft" | "lookup", "task": "code"}`` in the body (the
  ``openai`` package sends it with ``extra_body``; the task tag, "chat" when absent, is what ``auto`` on a
  managed llama-server keeps its rates by); the reasoning switch as vLLM and llama-server take it,
  ``"chat_template_kwargs": {"enable_thinking": bool}``;
- answered: a ``"specchat"`` object beside ``usage`` (mode, drafters, drafted and accepted tokens, why a
  drafter did not run, tok/s and the plain rate the load measured), and the same counts in OpenAI's own
  ``usage.completion_tokens_details.accepted_prediction_tokens`` / ``rejected_prediction_tokens``.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.answer import AnswerRequest
from specchat.engine.events import Done, GenerationStats, StopReason
from specchat.engine.settings import Mode, SamplingSettings, Structured, StructuredOutput
from specchat.errors import UserError, one_line
from specchat.store.records import normalize_task_tag

MAX_TOKENS_DEFAULT = 2048  # a request without max_tokens: at most this many (the context may stop it sooner)
MAX_TOKENS_CAP = 32768
MAX_MESSAGES = 1024
MAX_STOPS = 16
MAX_STOP_CHARS = 256
MAX_SEED = (1 << 32) - 1
JSON_OBJECT_SCHEMA = '{"type": "object"}'  # response_format json_object: any JSON object
DEFAULT_SAMPLING = SamplingSettings()


class ApiError(UserError):
    """A request refused: its HTTP status and OpenAI's error object (``{"error": {...}}``)."""

    def __init__(self, message: str, *, status: int = 400, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True, slots=True)
class Call:
    """One checked request: what to ask the backend for and how to answer the client."""

    request: AnswerRequest
    endpoint: str  # "chat" (/v1/chat/completions) or "completion" (/v1/completions)
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    model: str = ""  # as the client named it ("" if it did not)
    mode_asked: str = ""  # the specchat.mode it asked for ("" : the server's default)


# -- checking a body ----------------------------------------------------------------


def _number(body: dict, name: str, default: float, lo: float, hi: float, *, lo_open: bool = False) -> float:
    v = body.get(name)
    if v is None:
        return default
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if ok and (lo < v if lo_open else lo <= v) and v <= hi:
        return float(v)
    where = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
    raise ApiError(f"{name} must be a finite number in {where}, not {_shown(v)}", param=name)


def _integer(body: dict, name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
        return v
    raise ApiError(f"{name} must be an integer in [{lo}, {hi}], not {_shown(v)}", param=name)


def _flag(body: dict, name: str) -> bool:
    v = body.get(name, False)
    if v is None or isinstance(v, bool):
        return bool(v)
    raise ApiError(f"{name} must be true or false, not {_shown(v)}", param=name)


def _shown(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, float) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _object(body: Any, name: str) -> dict:
    if not isinstance(body, dict):
        raise ApiError(f"{name} must be a JSON object", param=None if name == "the body" else name)
    return body


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or OpenAI's list of parts of which only text is taken."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(f"{where}: only text parts are supported, not {_shown(kind)}", param="messages")
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(f"{where} must be a string or a list of text parts", param="messages")


ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _messages(body: dict) -> tuple[dict[str, str], ...]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError("messages must be a non-empty list", param="messages")
    if len(msgs) > MAX_MESSAGES:
        raise ApiError(f"at most {MAX_MESSAGES} messages, not {len(msgs)}", param="messages")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(f"{where} must be an object", param="messages")
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(f"{where}.role must be one of system, developer, user, assistant; not {_shown(role)} "
                           "(tools are not supported)", param="messages")
        if m.get("tool_calls"):
            raise ApiError(f"{where}: tool calls are not supported", param="messages")
        out.append({"role": ROLES[role], "content": _text(m.get("content"), f"{where}.content")})
    return tuple(out)


def _stops(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    stops = [v] if isinstance(v, str) else v
    if (not isinstance(stops, list) or len(stops) > MAX_STOPS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops)):
        raise ApiError(f"stop must be a string or a list of at most {MAX_STOPS} non-empty strings of at most "
                       f"{MAX_STOP_CHARS} characters", param="stop")
    return tuple(stops)


def _structured(body: dict) -> StructuredOutput:
    fmt = body.get("response_format")
    if fmt is None:
        return StructuredOutput()
    fmt = _object(fmt, "response_format")
    kind = fmt.get("type")
    if kind == "text":
        return StructuredOutput()
    if kind == "json_object":
        return StructuredOutput(Structured.JSON_SCHEMA, JSON_OBJECT_SCHEMA)
    if kind == "json_schema":
        spec = _object(fmt.get("json_schema"), "response_format.json_schema")
        schema = spec.get("schema")
        if not isinstance(schema, dict | bool):
            raise ApiError("response_format.json_schema.schema must be a JSON schema (an object)",
                           param="response_format")
        return StructuredOutput(Structured.JSON_SCHEMA, json.dumps(schema))
    raise ApiError(f"response_format.type must be text, json_object or json_schema, not {_shown(kind)}",
                   param="response_format")


def _unsupported(body: dict) -> None:
    n = body.get("n")
    if n not in (None, 1):
        raise ApiError("n must be 1: one answer per request", param="n")
    for name in ("tools", "functions", "logit_bias"):
        if body.get(name):
            raise ApiError(f"{name} is not supported", param=name)
    for name in ("logprobs", "top_logprobs", "echo"):
        if body.get(name) not in (None, False, 0):
            raise ApiError(f"{name} is not supported", param=name)
    for name in ("presence_penalty", "frequency_penalty"):
        v = body.get(name)
        if v not in (None, 0, 0.0):
            raise ApiError(f"{name} is not supported (use repeat_penalty)", param=name)


def _mode(body: dict) -> str:
    ext = body.get("specchat")
    if ext is None:
        return ""
    ext = _object(ext, "specchat")
    v = ext.get("mode")
    if v is None:
        return ""
    if v not in {m.value for m in Mode}:
        raise ApiError(f"specchat.mode must be one of {', '.join(m.value for m in Mode)}; not {_shown(v)}",
                       param="specchat.mode")
    return str(v)


TASK_MAX = 64  # characters of a task tag


def _task(body: dict) -> str:
    ext = body.get("specchat")
    v = _object(ext, "specchat").get("task") if ext is not None else None
    if v is None:
        return "chat"
    if not isinstance(v, str) or not v.strip() or len(v) > TASK_MAX or not v.isprintable():
        raise ApiError(f"specchat.task must be a task tag (code, edit, chat, json, summary, creative or your own, "
                       f"up to {TASK_MAX} printable characters); not {_shown(v)}", param="specchat.task")
    return normalize_task_tag(v)


def _reasoning(body: dict) -> bool | None:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return None
    v = _object(kwargs, "chat_template_kwargs").get("enable_thinking")
    if v is None or isinstance(v, bool):
        return v
    raise ApiError("chat_template_kwargs.enable_thinking must be true or false", param="chat_template_kwargs")


def parse(body: Any, endpoint: str, default_mode: Mode, defaults: SamplingSettings = DEFAULT_SAMPLING) -> Call:
    """A request body (already JSON) checked into a :class:`Call`, or :class:`ApiError` naming the field;
    what it leaves out is ``default_mode`` and ``defaults`` (the chat's own settings)."""
    body = _object(body, "the body")
    _unsupported(body)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise ApiError("model must be a string", param="model")
    if endpoint == "chat":
        messages, prompt = _messages(body), ""
    else:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1:
            p = p[0]
        if not isinstance(p, str) or not p:
            raise ApiError("prompt must be a non-empty string", param="prompt")
        messages, prompt = (), p
    limit = _integer(body, "max_completion_tokens", 1, MAX_TOKENS_CAP)
    if limit is None:
        limit = _integer(body, "max_tokens", 1, MAX_TOKENS_CAP)
    seed = _integer(body, "seed", -(1 << 63), (1 << 63) - 1)
    top_k = _integer(body, "top_k", 0, 1 << 20)
    d = defaults
    sampling = SamplingSettings(
        temperature=_number(body, "temperature", d.temperature, 0.0, 2.0),
        top_p=_number(body, "top_p", d.top_p, 0.0, 1.0, lo_open=True),
        top_k=d.top_k if top_k is None else top_k,
        min_p=_number(body, "min_p", d.min_p, 0.0, 0.999),
        repeat_penalty=_number(body, "repeat_penalty", d.repeat_penalty, 0.01, 10.0),
        repeat_last_n=d.repeat_last_n,
        seed=d.seed if seed is None else seed & MAX_SEED,
        structured=_structured(body),
    )
    stream = _flag(body, "stream")
    opts = body.get("stream_options")
    include_usage = bool(opts is not None and _flag(_object(opts, "stream_options"), "include_usage"))
    mode = _mode(body)
    try:
        sampling.validate()
    except ValueError as exc:
        raise ApiError(str(exc)) from None
    cache = body.get("cache_prompt", True)  # llama-server's field: false, no KV reused from the last answer
    if not isinstance(cache, bool):
        raise ApiError("cache_prompt must be true or false", param="cache_prompt")
    request = AnswerRequest(messages, mode=Mode(mode) if mode else default_mode, sampling=sampling,
                            max_tokens=limit or MAX_TOKENS_DEFAULT, reasoning=_reasoning(body), stop=_stops(body),
                            prompt=prompt, fresh_prompt=not cache, task=_task(body))
    return Call(request, endpoint, stream, include_usage, model, mode)


# -- answering ----------------------------------------------------------------------


def new_id(endpoint: str) -> str:
    return ("chatcmpl-" if endpoint == "chat" else "cmpl-") + secrets.token_hex(12)


FINISH = {StopReason.EOG: "stop", StopReason.STOP_STRING: "stop", StopReason.CANCELLED: "stop",
          StopReason.MAX_TOKENS: "length", StopReason.CONTEXT_FULL: "length"}


def finish_reason(done: Done) -> str:
    return FINISH.get(done.stop_reason, "stop")


@dataclass(slots=True)
class Answer:
    """One answer as it streams: its id, what has been said, and the final figures."""

    endpoint: str
    model: str
    plain_tok_s: float | None = None  # what the load measured one target token at (None: not measured)
    id: str = ""
    created: int = 0
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    done: Done | None = None

    def __post_init__(self) -> None:
        self.id = self.id or new_id(self.endpoint)
        self.created = self.created or int(time.time())

    @property
    def object(self) -> str:
        return "chat.completion" if self.endpoint == "chat" else "text_completion"

    def chunk(self, *, content: str = "", reasoning: str = "", role: bool = False,
              finish: str | None = None) -> dict[str, Any]:
        """One streamed chunk (``chat.completion.chunk`` or a ``text_completion`` piece)."""
        if self.endpoint == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if content:
                delta["content"] = content
            if reasoning:
                delta["reasoning_content"] = reasoning
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}

    def usage_chunk(self) -> dict[str, Any]:
        """The last chunk of a stream asked with ``include_usage``: no choices, the usage and SpecChat's figures."""
        out: dict[str, Any] = {
               "id": self.id, "object": "chat.completion.chunk" if self.endpoint == "chat" else "text_completion",
               "created": self.created, "model": self.model, "choices": [], "usage": self.usage()}
        out["specchat"] = self.speculation()
        return out

    def final_chunk(self) -> dict[str, Any]:
        """The chunk with the finish reason; it carries SpecChat's figures too (clients ignore the field)."""
        out = self.chunk(finish=finish_reason(self.done) if self.done else "stop")
        out["specchat"] = self.speculation()
        return out

    def whole(self) -> dict[str, Any]:
        """The answer in one object (a request without ``stream``)."""
        text = "".join(self.content)
        finish = finish_reason(self.done) if self.done else "stop"
        if self.endpoint == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.reasoning:
                message["reasoning_content"] = "".join(self.reasoning)
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": [choice], "usage": self.usage(), "specchat": self.speculation()}

    @property
    def stats(self) -> GenerationStats:
        return self.done.stats if self.done is not None else GenerationStats.empty()

    def usage(self) -> dict[str, Any]:
        s = self.stats
        tokens = s.counts.tokens
        drafted, accepted = s.counts.drafted, s.counts.accepted
        details: dict[str, Any] = {"accepted_prediction_tokens": accepted,
                                   "rejected_prediction_tokens": drafted - accepted}
        if s.phases.reasoning.tokens:
            details["reasoning_tokens"] = s.phases.reasoning.tokens
        prompt = self.prompt_tokens or s.counts.prompt_tokens
        return {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens,
                "prompt_tokens_details": {"cached_tokens": s.counts.reused_tokens},
                "completion_tokens_details": details}

    def speculation(self) -> dict[str, Any]:
        """What speculation did for this answer, in SpecChat's own words and numbers."""
        s = self.stats
        tok_s = s.decode_tok_s or 0.0
        out: dict[str, Any] = {
            "mode": s.mode,
            "drafted": s.counts.drafted,
            "accepted": s.counts.accepted,
            "acceptance": round(s.token_acceptance, 4) if s.token_acceptance is not None else None,
            "rounds": s.counts.rounds,
            "drafters": [{"drafter": name, "drafted": d, "accepted": a} for name, d, a in s.drafters],
            "why": list(s.notes) + [f for f in s.fallbacks if f not in s.notes],
            "tok_s": round(tok_s, 2),
            "plain_tok_s": round(self.plain_tok_s, 2) if self.plain_tok_s else None,
            "speedup_vs_plain": round(tok_s / self.plain_tok_s, 3) if self.plain_tok_s and tok_s else None,
            "stop_reason": self.done.stop_reason.value if self.done else "",
        }
        if self.done is not None and self.done.message:
            out["message"] = one_line(self.done.message)
        return out
