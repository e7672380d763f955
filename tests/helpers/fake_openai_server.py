"""A scriptable stand-in for vLLM, SGLang or a plain OpenAI-compatible server, for the client's tests.

A real HTTP server (``ThreadingHTTPServer`` on 127.0.0.1, an ephemeral port, a daemon thread):
``with FakeServer("vllm", script=Script(...)) as server:`` then point the client at
``server.url``.  It records what it received (``server.requests``: method, path, headers, JSON
body) and whether a client hung up mid-answer (``server.client_disconnected``, an Event).

What each flavour answers, as that server does (sources in ``fixtures/``):

* ``vllm``: ``/v1/models`` (``owned_by: "vllm"``, ``max_model_len``), ``/metrics`` (the
  fixture ``vllm_metrics_before.txt`` whose engine-0 spec counters advance as the answer's
  chunks go out), ``/health`` (200, empty body), ``/version``; the API key guards ``/v1/*`` only.
  Streamed chunks as ``vllm_chat_stream_*.sse``: reasoning in ``delta.reasoning``; with
  ``stream_options.include_usage`` a final ``choices: []`` usage chunk carrying ``metrics``
  (``speculative_decoding`` when ``Script.spec_metrics`` is summary/detailed, timing fields
  with ``Script.per_request_metrics``).  A model it does not serve is a 404 with vLLM's error JSON.
* ``sglang``: ``/v1/models``, ``/get_model_info``, ``/get_server_info``, ``/health``;
  reasoning in ``delta.reasoning_content``; with ``return_spec_tokens_details`` an ``sglext``
  chunk (``choices: []``) after the finish chunk and before the usage chunk
  (``sglang_chat_stream.sse``).  It serves whatever model name it is asked for.
* ``openai``: ``/v1/models`` and ``/v1/chat/completions`` only (404 elsewhere), no reasoning,
  no extras.

Faults (``Script`` fields): ``api_key`` (401 without ``Authorization: Bearer <key>``),
``die_after`` N chunks (the socket closes mid-body, no ``[DONE]``: an incomplete chunked
read), ``malformed_after`` (``data: {not json``), ``error_chunk`` (an SSE
``data: {"error": {...}}`` then ``[DONE]``, as vLLM's ``create_streaming_error_response``),
``hang_after`` (stops sending and keeps the socket open until the client leaves or the
server closes), ``delay_s`` before each chunk.  ``server.script`` may be replaced between
requests.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

POLL_S = 0.02  # how often serve_forever looks for shutdown(): the default 0.5 s made every stop wait (34 teardowns, 17 s)

FIXTURES = Path(__file__).parents[1] / "helpers" / "fixtures"
CREATED = 1759200000
MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Script:
    """What the fake answers to the next chat request(s)."""

    model: str = "Qwen/Qwen3-8B"
    reasoning: tuple[str, ...] = ()
    content: tuple[str, ...] = ("Hello", "!")
    delay_s: float = 0.0
    spec_steps: tuple[tuple[int, int], ...] = ()  # (drafted, accepted) per verification step
    num_spec_tokens: int = 3  # K
    spec_metrics: str = "none"  # vLLM --per-request-spec-decode-metrics: none | summary | detailed
    per_request_metrics: bool = False  # vLLM --enable-per-request-metrics
    prompt_tokens: int = 18
    api_key: str | None = None
    die_after: int | None = None
    malformed_after: int | None = None
    error_chunk: str | None = None
    error_after: int = 1
    hang_after: int | None = None

    @property
    def completion_tokens(self) -> int:
        """The prefill's token, then accepted + 1 per step (or one per piece without steps)."""
        if self.spec_steps:
            return 1 + sum(a + 1 for _, a in self.spec_steps)
        return len(self.reasoning) + len(self.content)


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or None


def vllm_spec_object(script: Script) -> dict[str, Any]:
    """``metrics.speculative_decoding`` as vLLM's RequestSpecDecodeMetrics.to_dict builds it."""
    steps, k = script.spec_steps, script.num_spec_tokens
    histogram = [sum(1 for _, a in steps if a == j) for j in range(k + 1)]
    accepted, drafted = sum(a for _, a in steps), sum(d for d, _ in steps)
    found: dict[str, Any] = {
        "mean_acceptance_length": 1.0 + accepted / len(steps) if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": histogram, "num_spec_steps": len(steps),
        "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted, "num_spec_tokens": k,
    }
    if script.spec_metrics == "detailed" and steps:
        found["per_step_accepted"] = [a for _, a in steps]
        found["per_step_drafted"] = [d for d, _ in steps]
    return found


def sglang_spec_details(script: Script) -> dict[str, Any]:
    """``sglext.spec_tokens_details`` as SGLang's spec_tokens_details_from_meta_info fills it."""
    steps, k = script.spec_steps, script.num_spec_tokens
    accepted, proposed = sum(a for _, a in steps), len(steps) * k
    return {"spec_accept_rate": accepted / proposed if proposed else 0.0,
            "spec_accept_length": script.completion_tokens / len(steps) if steps else 0.0,
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_num_correct_drafts": accepted,
            "spec_num_proposed_drafts": proposed, "spec_verify_ct": len(steps),
            "spec_correct_drafts_histogram": [sum(1 for _, a in steps if a == j) for j in range(k + 1)],
            "spec_cap_lens_histogram": []}


class _VllmCounters:
    """vLLM's /metrics: the before-fixture's values, engine 0's spec counters moved by the steps sent."""

    def __init__(self) -> None:
        self.base: dict[tuple[str, str, str], float] = {}
        text = (FIXTURES / "vllm_metrics_before.txt").read_text()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.endswith("_created"):
                    self.base[(s.name, s.labels["engine"], s.labels.get("position", ""))] = s.value
        self.lock = threading.Lock()
        self.steps: list[tuple[int, int]] = []
        self.running = 0

    def add(self, steps: list[tuple[int, int]]) -> None:
        with self.lock:
            self.steps.extend(steps)

    def render(self) -> bytes:
        with self.lock:
            steps, running = list(self.steps), self.running
        reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        gauges = {n: Gauge(n, "-", labels, registry=reg) for n in ("vllm:num_requests_running",
                                                                     "vllm:kv_cache_usage_perc")}
        counters = {n: Counter(n, "-", labels, registry=reg) for n in (
            "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:spec_decode_num_drafts",
            "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")}
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "-", [*labels, "position"], registry=reg)
        moved = {"vllm:spec_decode_num_drafts_total": len(steps),
                 "vllm:spec_decode_num_draft_tokens_total": sum(d for d, _ in steps),
                 "vllm:spec_decode_num_accepted_tokens_total": sum(a for _, a in steps),
                 "vllm:generation_tokens_total": sum(a + 1 for _, a in steps)}
        for (name, engine, position), value in self.base.items():
            lv = ("Qwen/Qwen3-8B", engine)
            extra = moved.get(name, 0) if engine == "0" else 0
            if name in gauges:
                gauges[name].labels(*lv).set(running if name == "vllm:num_requests_running" and engine == "0"
                                             else value)
            elif name.removesuffix("_total") in counters:
                counters[name.removesuffix("_total")].labels(*lv).inc(value + extra)
            elif position:
                pos = int(position)
                extra = sum(1 for _, a in steps if a > pos) if engine == "0" else 0
                per_pos.labels(*lv, position).inc(value + extra)
        return generate_latest(reg)


@dataclass
class _Answer:
    """One chat answer as the flavour sends it: its SSE chunks and where its steps fall."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    steps_after: list[list[tuple[int, int]]] = field(default_factory=list)  # steps counted once chunk i is out


class FakeServer:
    def __init__(self, flavour: str = "vllm", script: Script | None = None) -> None:
        if flavour not in ("vllm", "sglang", "openai"):
            raise ValueError(f"unknown flavour {flavour!r}")
        self.flavour = flavour
        self.script = script or Script()
        self.requests: list[Received] = []
        self.client_disconnected = threading.Event()
        self.counters = _VllmCounters()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(POLL_S,), name="fake-openai-server", daemon=True)
        self._thread.start()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def record(self, received: Received) -> None:
        with self._lock:
            self.requests.append(received)

    # -- what each flavour says ------------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        card: dict[str, Any] = {"id": self.script.model, "object": "model", "created": CREATED}
        if self.flavour == "vllm":
            card.update(owned_by="vllm", root=self.script.model, parent=None, max_model_len=32768,
                        permission=[{"id": "modelperm-0", "object": "model_permission", "created": CREATED,
                                     "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                                     "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                                     "organization": "*", "group": None, "is_blocking": False}])
        elif self.flavour == "sglang":
            card.update(owned_by="sglang", root=self.script.model, max_model_len=32768)
        else:
            card.update(owned_by="system")
        return {"object": "list", "data": [card]}

    def get_routes(self) -> dict[str, Any]:
        if self.flavour == "vllm":
            return {"/version": {"version": "0.32.0"}, "/health": b"", "/metrics": None}
        if self.flavour == "sglang":
            k = self.script.num_spec_tokens
            return {"/health": b"", "/get_model_info": {
                "model_path": self.script.model, "tokenizer_path": self.script.model, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default", "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
                "/get_server_info": {
                    "model_path": self.script.model, "speculative_algorithm": "EAGLE3" if self.script.spec_steps
                    else None, "speculative_num_steps": k, "speculative_num_draft_tokens": k + 1,
                    "version": "0.5.5", "internal_states": [{"avg_spec_accept_length": 2.75}]}}
        return {}

    def answer(self, body: dict[str, Any]) -> _Answer:
        s = self.script
        pieces = [("reasoning", r) for r in s.reasoning if self.flavour != "openai"] + [("content", c) for c in s.content]
        reasoning_key = "reasoning" if self.flavour == "vllm" else "reasoning_content"
        base = {"id": "chatcmpl-fake0001", "object": "chat.completion.chunk", "created": CREATED,
                "model": body.get("model", s.model)}
        ans = _Answer()

        def add(chunk: dict[str, Any], steps: list[tuple[int, int]] | None = None) -> None:
            ans.chunks.append(chunk)
            ans.steps_after.append(steps or [])

        sglang = self.flavour == "sglang"

        def choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            """vLLM dumps chunks with exclude_unset; SGLang dumps every field, nulls included."""
            if sglang:
                delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None, **delta}
                found = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                             "matched_stop": 151645 if finish else None}], usage=None)
                return found
            extra = {"stop_reason": None} if finish else {}
            return dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                        **extra}])

        add(choice({"role": "assistant", "content": ""}, None))
        steps = list(s.spec_steps)
        for i, (kind, text) in enumerate(pieces):  # step j is out once piece (j * pieces // steps) is
            upto = (i + 1) * len(steps) // len(pieces) if i < len(pieces) - 1 else len(steps)
            done = sum(len(x) for x in ans.steps_after)
            last = i == len(pieces) - 1 and not sglang  # SGLang sends finish_reason in a chunk of its own
            add(choice({reasoning_key if kind == "reasoning" else "content": text}, "stop" if last else None),
                steps[done:upto])
        if sglang:
            add(choice({}, "stop"))
        options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        if self.flavour == "sglang" and body.get("return_spec_tokens_details") and s.spec_steps:
            add(dict(base, choices=[], usage=None, sglext={"routed_experts": None, "cached_tokens_details": None,
                                               "spec_tokens_details": sglang_spec_details(s), "input_ids": None,
                                               "output_ids": None}))
        if options.get("include_usage"):
            usage = dict(base, choices=[], usage=self.usage())
            if self.vllm_metrics() is not None:
                usage["metrics"] = self.vllm_metrics()
            add(usage)
        return ans

    def usage(self) -> dict[str, int]:
        s = self.script
        return {"prompt_tokens": s.prompt_tokens, "total_tokens": s.prompt_tokens + s.completion_tokens,
                "completion_tokens": s.completion_tokens}

    def vllm_metrics(self) -> dict[str, Any] | None:
        s = self.script
        if self.flavour != "vllm" or (s.spec_metrics == "none" and not s.per_request_metrics):
            return None
        found: dict[str, Any] = {}
        if s.per_request_metrics:
            found.update(time_to_first_token_ms=41.7, generation_time_ms=118.3, queue_time_ms=0.4,
                         mean_itl_ms=14.8, tokens_per_second=144.1)
        found["speculative_decoding"] = vllm_spec_object(s) if s.spec_metrics != "none" and s.spec_steps else None
        return found

    def whole_answer(self, body: dict[str, Any]) -> dict[str, Any]:
        s = self.script
        message: dict[str, Any] = {"role": "assistant", "content": "".join(s.content)}
        if s.reasoning and self.flavour != "openai":
            message["reasoning" if self.flavour == "vllm" else "reasoning_content"] = "".join(s.reasoning)
        found: dict[str, Any] = {
            "id": "chatcmpl-fake0001", "object": "chat.completion", "created": CREATED,
            "model": body.get("model", s.model), "usage": self.usage(),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}]}
        if self.vllm_metrics() is not None:
            found["metrics"] = self.vllm_metrics()
        if self.flavour == "sglang" and body.get("return_spec_tokens_details") and s.spec_steps:
            found["sglext"] = {"spec_tokens_details": sglang_spec_details(s)}
        self.counters.add(list(s.spec_steps))
        return found

    def unauthorized(self, path: str, headers: dict[str, str]) -> bool:
        key = self.script.api_key
        if key is None or headers.get("authorization") == f"Bearer {key}":
            return False
        if self.flavour == "vllm":  # vLLM's AuthenticationMiddleware checks /v1 paths only
            return path.startswith("/v1")
        if self.flavour == "sglang":
            return path not in ("/health", "/metrics")
        return True

    def unauthorized_body(self) -> dict[str, Any]:
        if self.flavour == "openai":
            return {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                              "param": None, "code": "invalid_api_key"}}
        return {"error": "Unauthorized"}  # vLLM's and SGLang's API-key middleware

    def unknown_model(self, model: object) -> dict[str, Any] | None:
        if self.flavour == "sglang" or model == self.script.model:
            return None
        if self.flavour == "vllm":
            return {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                              "param": "model", "code": 404}}
        return {"error": {"message": f"The model `{model}` does not exist or you do not have access to it.",
                          "type": "invalid_request_error", "param": None, "code": "model_not_found"}}

    def wait_or_closing(self, seconds: float) -> bool:
        """Sleep; True when the server is closing meanwhile."""
        return self._closing.wait(seconds) if seconds > 0 else self._closing.is_set()


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def _headers(self) -> dict[str, str]:
            return {k.lower(): v for k, v in self.headers.items()}

        def _send(self, status: int, body: bytes | dict[str, Any], content_type: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _common(self, body: Any) -> bool:
            headers = self._headers()
            server.record(Received(self.command, self.path, headers, body))
            if server.unauthorized(self.path.split("?")[0], headers):
                self._send(401, server.unauthorized_body())
                return False
            return True

        def do_GET(self) -> None:
            if not self._common(None):
                return
            path = self.path.split("?")[0]
            routes = server.get_routes()
            if path == "/v1/models":
                self._send(200, server.models())
            elif path == "/metrics" and "/metrics" in routes:
                self._send(200, server.counters.render(), "text/plain; version=0.0.4; charset=utf-8")
            elif path in routes:
                found = routes[path]
                self._send(200, found, "application/json" if isinstance(found, dict) else "text/plain")
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(min(length, MAX_BODY)) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            if not self._common(body):
                return
            if self.path.split("?")[0] != "/v1/chat/completions":
                self._send(404, {"detail": "Not Found"})
            elif not isinstance(body, dict):
                self._send(400, {"error": {"message": "the body is not a JSON object", "type": "BadRequestError",
                                           "param": None, "code": 400}})
            elif (missing := server.unknown_model(body.get("model"))) is not None:
                self._send(404, missing)
            elif body.get("stream"):
                self._stream(server.answer(body))
            else:
                self._send(200, server.whole_answer(body))

        # -- streaming -------------------------------------------------------------------------

        def _chunk(self, payload: str) -> None:
            data = payload.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(self, answer: _Answer) -> None:
            s = server.script
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            server.counters.running = 1
            try:
                self._events(answer, s)
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                server.client_disconnected.set()
            finally:
                server.counters.running = 0

        def _events(self, answer: _Answer, s: Script) -> None:
            for i, (chunk, steps) in enumerate(zip(answer.chunks, answer.steps_after, strict=True)):
                if i == s.die_after:
                    self._die()
                    return
                if i == s.hang_after:
                    self._hang()
                    return
                if i == s.malformed_after:
                    self._chunk("data: {not json\n\n")
                if s.error_chunk is not None and i == s.error_after:
                    self._chunk("data: " + json.dumps({"error": {"message": s.error_chunk,
                                                                 "type": "InternalServerError", "param": None,
                                                                 "code": 500}}) + "\n\n")
                    break
                if server.wait_or_closing(s.delay_s):
                    return
                self._chunk("data: " + json.dumps(chunk, separators=(",", ":")) + "\n\n")
                server.counters.add(steps)
            else:
                if s.die_after == len(answer.chunks):
                    self._die()
                    return
                if s.hang_after == len(answer.chunks):
                    self._hang()
                    return
            self._chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _die(self) -> None:
            """Close mid-body: the client sees an incomplete chunked read, no [DONE]."""
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

        def _hang(self) -> None:
            """Send nothing more, keep the socket open; note when the client hangs up."""
            while not server.wait_or_closing(0.02):
                readable, _, _ = select.select([self.connection], [], [], 0)
                if readable:
                    try:
                        gone = self.connection.recv(1, socket.MSG_PEEK) == b""
                    except OSError:
                        gone = True
                    if gone:
                        server.client_disconnected.set()
                        break
            self.close_connection = True

    return Handler


@contextlib.contextmanager
def fake_server(flavour: str = "vllm", script: Script | None = None) -> Iterator[FakeServer]:
    server = FakeServer(flavour, script)
    try:
        yield server
    finally:
        server.close()


def wait_for(event: threading.Event, seconds: float = 2.0) -> bool:
    """A bounded wait for a test (``event.wait`` with a deadline, polled so ^C works)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if event.wait(0.05):
            return True
    return event.is_set()
