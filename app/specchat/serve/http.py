"""The HTTP side of SpecChat's OpenAI-compatible server: Starlette routes served by uvicorn on a thread.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions``
(streamed as server-sent events when the body says ``"stream": true``).  No request is answered here:
each goes to the :class:`~.lane.Lane`, whose thread owns the models, and its events come back through
an asyncio queue.  A client that goes away cancels its answer (Starlette tells a stream; a plain
request races its answer against the disconnect), within one round of the loop, or before its turn
if it was still waiting.

Bounds: a body of at most :attr:`Limits.max_body` bytes, read within :attr:`Limits.body_seconds`;
headers within uvicorn's h11 cap; at most :attr:`Limits.max_connections` connections (uvicorn answers
503 beyond); the lane's line (429 with ``Retry-After`` beyond).  Every refusal is an OpenAI error object.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from specchat import bounded_json
from specchat.engine.answer import Started
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done, Error, TokensEmitted
from specchat.errors import UserError

from . import wire
from .lane import Delivered, Failed, Lane
from .wire import ApiError

DEFAULT_PORT = 8177  # not LM Studio's 1234, Jan's 1337, GPT4All's 4891, Ollama's 11434, koboldcpp's 5001,
# text-generation-webui's 5000, llama-server's 8080, vLLM's 8000 or SGLang's 30000
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
RECENT = 200  # request records kept for the window's API view
FORWARDED = (Started, TokensEmitted, Done, Failed, Error)  # what the HTTP side reads of an answer's events


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int = 4 << 20  # bytes of a request body (a long chat with pasted files fits)
    body_seconds: float = 30.0  # to send the whole body
    max_header_bytes: int = 32 << 10
    max_connections: int = 256  # beyond the line (429) by far: the line, not uvicorn, refuses a flood


@dataclass(frozen=True, slots=True)
class ApiRecord:
    """One request as the window's API view lists it: never its text."""

    number: int
    client: str  # the peer address, and the User-Agent's first word
    endpoint: str
    model: str
    status: int  # HTTP status (200 for an answer, streamed or not)
    started: float  # time.time()
    seconds: float = 0.0
    prompt_tokens: int = 0
    tokens: int = 0
    tok_s: float = 0.0
    mode: str = ""
    drafted: int = 0
    accepted: int = 0
    stop: str = ""  # stop reason, "disconnected", or the error's message
    speedup: float | None = None


@dataclass
class Traffic:
    """What the server has seen: the last :data:`RECENT` records, told to ``listeners`` as they end."""

    recent: deque[ApiRecord] = field(default_factory=lambda: deque(maxlen=RECENT))
    listeners: list[Callable[[ApiRecord], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _numbers: itertools.count = field(default_factory=lambda: itertools.count(1))

    def next_number(self) -> int:
        with self._lock:
            return next(self._numbers)

    def add(self, record: ApiRecord) -> None:
        with self._lock:
            self.recent.append(record)
            listeners = list(self.listeners)
        for listen in listeners:
            listen(record)


def _client(request: Request) -> str:
    peer = request.client.host if request.client else "?"
    agent = request.headers.get("user-agent", "").split(" ", 1)[0][:40]
    return f"{peer} {agent}".strip()


async def _read_body(request: Request, limits: Limits) -> object:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limits.max_body):
        raise ApiError(f"the body is over {limits.max_body >> 20} MiB", status=413)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body:
                    raise ApiError(f"the body is over {limits.max_body >> 20} MiB", status=413)
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(f"the body did not arrive within {limits.body_seconds:.0f} s", status=408) from None
    try:
        return bounded_json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(f"the body is not JSON: {exc}") from None


def _error(exc: ApiError) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


class Api:
    """The routes over one lane; :meth:`app` is the ASGI application."""

    def __init__(self, lane: Lane, *, api_key: str = "", limits: Limits = Limits(),
                 traffic: Traffic | None = None) -> None:
        self.lane = lane
        self.api_key = api_key
        self.limits = limits
        self.traffic = traffic or Traffic()

    def app(self) -> Starlette:
        routes = [Route("/health", self.health), Route("/v1/models", self.models),
                  Route("/v1/chat/completions", self.chat, methods=["POST"]),
                  Route("/v1/completions", self.completion, methods=["POST"])]

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            what = {404: "no such route", 405: "method not allowed here"}.get(exc.status_code, str(exc.detail))
            return _error(ApiError(f"{what}: {request.method} {request.url.path}", status=exc.status_code))

        async def api_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, ApiError)
            return _error(exc)

        return Starlette(routes=routes, exception_handlers={HTTPException: http_error, ApiError: api_error})

    def _check_key(self, request: Request) -> None:
        if not self.api_key:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            raise ApiError("a missing or wrong API key (send 'Authorization: Bearer KEY')", status=401,
                           code="invalid_api_key")

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok" if self.lane.card() is not None else "no model loaded"})

    async def models(self, request: Request) -> Response:
        self._check_key(request)
        card = self.lane.card()
        data = [] if card is None else [{
            "id": card.id, "object": "model", "created": 0, "owned_by": "specchat",
            "meta": {"n_ctx": card.n_ctx, "draft": card.draft, "backend": card.backend, "mode": card.mode.value,
                     "plain_tok_s": round(card.plain_tok_s, 2) if card.plain_tok_s else None}}]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request) -> Response:
        return await self._answer(request, "chat")

    async def completion(self, request: Request) -> Response:
        return await self._answer(request, "completion")

    async def _answer(self, request: Request, endpoint: str) -> Response:
        number, started, client = self.traffic.next_number(), time.time(), _client(request)
        record = ApiRecord(number, client, endpoint, "", 0, started)
        try:
            self._check_key(request)
            card = self.lane.card()
            if card is None:
                raise ApiError("no model is loaded: load a pair in SpecChat first", status=503, kind="server_error")
            body = await _read_body(request, self.limits)
            call = wire.parse(body, endpoint, card.mode, card.sampling)
            loop = asyncio.get_running_loop()
            events: asyncio.Queue[Delivered] = asyncio.Queue()
            cancel = CancelToken()

            def deliver(ev: Delivered) -> None:  # on the lane's thread
                if not isinstance(ev, FORWARDED):  # a round's figures: the answer's totals come with Done
                    return
                try:
                    loop.call_soon_threadsafe(events.put_nowait, ev)
                except RuntimeError:  # the server's loop has closed: nobody will read the answer
                    cancel.cancel()

            answer = wire.Answer(endpoint, card.id, card.plain_tok_s)
            self.lane.submit(call.request, deliver, cancel, client)
        except ApiError as exc:
            self._log(record, exc.status, stop=str(exc))
            return _error(exc)
        except ClientDisconnect:
            self._log(record, 499, stop="disconnected")
            return Response(status_code=499)
        if call.stream:
            return StreamingResponse(self._stream(call, answer, events, cancel, record), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await self._whole(request, answer, events, cancel, record)

    async def _stream(self, call: wire.Call, answer: wire.Answer, events: asyncio.Queue[Delivered],
                      cancel: CancelToken, record: ApiRecord) -> AsyncIterator[bytes]:
        status, stop = 200, "disconnected"
        pending: deque[Delivered] = deque()  # taken from the queue while joining texts, not handled yet
        try:
            while True:
                ev = pending.popleft() if pending else await events.get()
                if isinstance(ev, Started):
                    answer.prompt_tokens = ev.prompt_tokens
                    if answer.endpoint == "chat":
                        yield _sse(answer.chunk(role=True))
                elif isinstance(ev, TokensEmitted):
                    # the texts that queued up while the client read (one chunk a round when it keeps up)
                    content, thought = [ev.answer], [ev.reasoning]
                    while not events.empty():
                        more = events.get_nowait()
                        if not isinstance(more, TokensEmitted):
                            pending.append(more)
                            break
                        content.append(more.answer)
                        thought.append(more.reasoning)
                    if any(content) or any(thought):
                        yield _sse(answer.chunk(content="".join(content), reasoning="".join(thought)))
                elif isinstance(ev, Done):
                    answer.done = ev
                    if ev.stop_reason.value == "error":
                        status, stop = 500, ev.message or "the model failed"
                        yield _sse(ApiError(stop, status=500, kind="server_error").body())
                    else:
                        stop = ev.stop_reason.value
                        yield _sse(answer.final_chunk())
                        if call.include_usage:
                            yield _sse(answer.usage_chunk())
                    yield b"data: [DONE]\n\n"
                    return
                elif isinstance(ev, Failed):
                    status, stop = ev.status, ev.message
                    yield _sse(ApiError(ev.message, status=ev.status).body())
                    yield b"data: [DONE]\n\n"
                    return
                elif isinstance(ev, Error):
                    stop = ev.message
        finally:
            cancel.cancel()  # the client went away (or the answer ended: then it changes nothing)
            self._log(record, status, answer=answer, stop=stop, model=call.model or answer.model)

    async def _whole(self, request: Request, answer: wire.Answer, events: asyncio.Queue[Delivered],
                     cancel: CancelToken, record: ApiRecord) -> Response:
        async def collect() -> Done | Failed:
            while True:
                ev = await events.get()
                if isinstance(ev, Started):
                    answer.prompt_tokens = ev.prompt_tokens
                elif isinstance(ev, TokensEmitted):
                    answer.content.append(ev.answer)
                    if ev.reasoning:
                        answer.reasoning.append(ev.reasoning)
                elif isinstance(ev, Done | Failed):
                    return ev

        async def gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        answering, watching = asyncio.ensure_future(collect()), asyncio.ensure_future(gone())
        try:
            finished, _ = await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not answering.done():
                answering.cancel()
                cancel.cancel()
        if answering not in finished:
            self._log(record, 499, answer=answer, stop="disconnected")
            return Response(status_code=499)
        last = answering.result()
        if isinstance(last, Failed):
            self._log(record, last.status, answer=answer, stop=last.message)
            return _error(ApiError(last.message, status=last.status,
                                   kind="server_error" if last.status >= 500 else "invalid_request_error"))
        answer.done = last
        if last.stop_reason.value == "error":
            self._log(record, 500, answer=answer, stop=last.message)
            return _error(ApiError(last.message or "the model failed", status=500, kind="server_error"))
        self._log(record, 200, answer=answer, stop=last.stop_reason.value)
        return JSONResponse(answer.whole())

    def _log(self, record: ApiRecord, status: int, *, answer: wire.Answer | None = None, stop: str = "",
             model: str = "") -> None:
        fields: dict = {"status": status, "seconds": time.time() - record.started, "stop": stop[:200]}
        if answer is not None:
            s = answer.stats
            spec = answer.speculation()
            fields.update(model=model or answer.model, prompt_tokens=answer.prompt_tokens or s.counts.prompt_tokens,
                          tokens=s.counts.tokens, tok_s=s.decode_tok_s, mode=s.mode, drafted=s.counts.drafted,
                          accepted=s.counts.accepted, speedup=spec["speedup_vs_plain"])
        self.traffic.add(replace(record, **fields))


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: any free port), or :class:`UserError` in one line (a port in use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # held from now on: a second server on this port is refused, even while models load
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class ApiServer:
    """uvicorn serving an :class:`Api` on a thread of its own, on a socket bound before it starts (so a port
    in use is one line here, not a log line there).  :meth:`stop` ends it; streams still open are cut."""

    def __init__(self, api: Api, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 sock: socket.socket | None = None) -> None:
        """``sock``: one :func:`listen` bound already (``host`` and ``port`` then only name it)."""
        self.api = api
        self.host = host
        self._sock = sock or listen(host, port)
        self.port = self._sock.getsockname()[1]
        limits = api.limits
        config = uvicorn.Config(api.app(), log_level="warning", lifespan="off", access_log=False,
                                limit_concurrency=limits.max_connections, timeout_keep_alive=5,
                                h11_max_incomplete_event_size=limits.max_header_bytes, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="specchat-api", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self, patience: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + patience
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise UserError(f"the API server on {self.host}:{self.port} did not start")
            time.sleep(0.01)

    def stop(self, patience: float = 5.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(patience)
        self._sock.close()
