"""HTTP to one server: requests with one error type, Server-Sent Events, and what the server can tell.

Capabilities are read from what the server answers, never from a version number (field
names moved during 2026): the probe reads ``/health`` and ``/v1/models``, then tries the
kinds of server of :data:`specchat.remote.kinds.KINDS` in order (llama-server, vLLM,
SGLang, any OpenAI-compatible one); the kind that recognises the server says the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

from specchat.bounded_json import loads
from specchat.cancel import Cancelled, CancelToken, DeadlinePassed

from .counters import ServerMetrics, parse_dcgm, parse_metrics
from .errors import ServerError
from .kinds import Probe, Said, ServerKind, as_int, kind_named, recognise
from .reader import (
    CONNECT_S,
    DCGM_CAP,
    ERROR_CAP,
    GET_S,
    HEADERS_S,
    JSON_CAP,
    LINE_CAP,
    METRICS_CAP,
    PROBE_S,
    STALL_S,
    Guard,
    error_line,
    read_body,
)
from .servers import ServerConfig

MAX_EVENT_BYTES = LINE_CAP  # one streamed chunk; real ones are a few hundred bytes
READ_S = STALL_S  # the longest a server may think before its next chunk (a long prefill on a big prompt)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one server said about itself when SpecChat connected."""

    engine: str  # its kind's name (remote.kinds): "llama.cpp", "vllm", "sglang", "openai"
    models: tuple[str, ...]
    model: str  # the model chats ask for
    n_ctx: int | None = None
    speculative: bool | None = None  # None: the server does not say (known after an answer)
    speculation: str = ""  # how it drafts, in its own words ("draft-simple, up to 16 tokens")
    n_max: int | None = None  # its largest draft, where it says
    metrics: bool = False  # /metrics answered with speculative counters
    vram: bool = False  # a GPU exporter answered
    build: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)  # what it cannot report, one line each

    @property
    def model_name(self) -> str:
        """The model id as people say it (llama-server's id is the file path it was started with)."""
        return self.model.replace("\\", "/").rsplit("/", 1)[-1] if self.model.endswith(".gguf") else self.model

    @property
    def kind(self) -> ServerKind:
        """The kind of server (:mod:`.kinds`): what differs in its requests and answers."""
        return kind_named(self.engine)

    @property
    def per_round(self) -> bool:
        """Rounds rebuilt live from the stream (llama-server's running timings)."""
        return self.kind.per_round

    def describe(self) -> str:
        spec = self.speculation or ("drafting" if self.speculative else
                                    "no drafting" if self.speculative is False else "drafting unknown")
        ctx = f", ctx {self.n_ctx}" if self.n_ctx else ""
        return f"{self.engine} serving {self.model_name}{ctx}; {spec}" + (f"; build {self.build}" if self.build else "")


def _explain_http(server: ServerConfig, exc: Exception) -> ServerError:
    where = f"server {server.name} ({server.url})"
    if isinstance(exc, httpx2.ConnectTimeout):
        return ServerError(f"{where} did not accept a connection within {CONNECT_S:g} s: is it up and reachable?")
    if isinstance(exc, httpx2.ReadTimeout):
        return ServerError(f"{where} stopped answering for {READ_S:g} s")
    if isinstance(exc, httpx2.ConnectError):
        text = str(exc)
        if "CERTIFICATE" in text.upper() or "SSL" in text.upper():
            return ServerError(f"{where}: its TLS certificate is not trusted ({text[:120]}); give its CA file "
                               "in the server's settings, or turn off verification for this server")
        return ServerError(f"{where} is unreachable ({text[:120] or 'connection refused'}): is it running?")
    if isinstance(exc, httpx2.RemoteProtocolError):
        return ServerError(f"{where} closed the connection mid-answer (did it stop or crash?)")
    if isinstance(exc, httpx2.TransportError):
        return ServerError(f"{where}: the connection failed: {type(exc).__name__}: {str(exc)[:120]}")
    return ServerError(f"{where}: {type(exc).__name__}: {str(exc)[:160]}")


class ServerClient:
    """One server's HTTP client (owns its connection pool; ``close()`` or use ``with``).

    Every request runs under a :class:`~.reader.Guard` (:mod:`.reader`: byte caps, deadlines,
    cancel): ``close()`` from any thread ends whatever is in flight at once."""

    def __init__(self, server: ServerConfig, api_key: str = "", *, read_s: float = READ_S) -> None:
        self.server = server
        self.where = f"server {server.name} ({server.url})"
        self.read_s = read_s
        self._closed = CancelToken()
        self._probe_end: float | None = None  # the probe's overall deadline and cancel, while it runs
        self._probe_cancel: CancelToken | None = None
        headers = {"Accept-Encoding": "identity"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        verify: Any = server.ca_file if server.verify_tls and server.ca_file else server.verify_tls
        if isinstance(verify, str):
            import ssl

            try:
                verify = ssl.create_default_context(cafile=verify)
            except (OSError, ssl.SSLError) as exc:
                raise ServerError(f"{self.where}: cannot use the CA file {server.ca_file}: {exc}") from None
        # no keep-alive: every request connects, so its guard knows its socket before a byte is sent
        limits = httpx2.Limits(max_keepalive_connections=0)
        self._http = httpx2.Client(base_url=server.url, headers=headers, verify=verify, follow_redirects=False,
                                   timeout=httpx2.Timeout(read_s, connect=CONNECT_S), limits=limits)
        self._dcgm = httpx2.Client(headers={"Accept-Encoding": "identity"}, verify=server.verify_tls,
                                   follow_redirects=False, timeout=httpx2.Timeout(GET_S, connect=CONNECT_S),
                                   limits=limits) if server.dcgm_url else None

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client; a request in flight in another thread ends at once."""
        self._closed.cancel()
        self._http.close()
        if self._dcgm is not None:
            self._dcgm.close()

    def guard(self, cancel: CancelToken | None, deadline_s: float) -> Guard:
        """A guard for one request: cancelled by ``cancel`` and by ``close()``, within the probe's deadline."""
        return Guard((self._closed, cancel or self._probe_cancel), deadline_s, self._probe_end)

    def _ended(self, guard: Guard, what: str, exc: Exception | None = None) -> ServerError:
        """Why a guarded request ended early, as one line."""
        if guard.expired:
            return ServerError(f"{self.where}: {what} did not answer within {guard.deadline_s:g} s")
        if self._closed.cancelled:
            return ServerError(f"{self.where}: closed")
        if guard.token.cancelled:
            return ServerError(f"{self.where}: stopped")
        assert exc is not None
        return _explain_http(self.server, exc)

    # -- plain requests ----------------------------------------------------------------

    def get(self, path: str, *, timeout: float = GET_S, cap: int = JSON_CAP, cancel: CancelToken | None = None,
            http: httpx2.Client | None = None) -> httpx2.Response:
        """GET ``path`` (any status; an error body cut to 64 KiB), headers and body within ``timeout`` s;
        ServerError when the server cannot be reached, answers more than ``cap`` bytes, or is too slow."""
        guard = self.guard(cancel, timeout)
        client = http or self._http
        read_timeout = httpx2.Timeout(min(self.read_s, timeout), connect=min(CONNECT_S, timeout))

        def call() -> httpx2.Response:
            with client.stream("GET", path, timeout=read_timeout, extensions={"trace": guard.trace}) as r:
                error = r.status_code >= 400
                body = read_body(r, guard, cap=ERROR_CAP if error else cap, what=f"{self.where}: {path}", cut=error)
                return httpx2.Response(r.status_code, headers=r.headers, content=body, request=r.request)

        try:
            return guard.run(call)
        except (DeadlinePassed, Cancelled):
            raise self._ended(guard, path) from None
        except httpx2.HTTPError as exc:
            raise self._ended(guard, path, exc) from None
        finally:
            guard.release()

    def get_json(self, path: str, *, timeout: float = GET_S) -> Any:
        r = self.get(path, timeout=timeout)
        self.raise_for_status(r, path)
        return self.parse_json(r.content, path)

    def parse_json(self, data: bytes | str, what: str) -> Any:
        """A JSON document from this server (nesting bounded); ServerError, one line, for anything else."""
        try:
            return loads(data)
        except ValueError as exc:  # not JSON, bad UTF-8, nested too deep
            why = f" ({exc})" if "nested" in str(exc) else ""
            raise ServerError(f"{self.where}: {what} did not answer JSON{why}") from None

    def raise_for_status(self, r: httpx2.Response, path: str) -> None:
        if r.status_code < 400:
            return
        detail = error_line(r.content)
        if r.status_code in (401, 403):
            raise ServerError(f"{self.where} refused the API key (HTTP {r.status_code}"
                              + (f": {detail}" if detail else "") + "): set the right key in Settings → Servers "
                              f"or with 'specchat servers add {self.server.name} URL --api-key-stdin'")
        if r.status_code == 503:
            raise ServerError(f"{self.where} is not ready (HTTP 503{': ' + detail if detail else ''}): "
                              "it may still be loading its model; try again shortly")
        raise ServerError(f"{self.where}: {path} failed with HTTP {r.status_code}" + (f": {detail}" if detail else ""))

    def metrics(self, cancel: CancelToken | None = None) -> ServerMetrics | None:
        """The server's Prometheus counters; None when it serves none (llama-server without --metrics)."""
        r = self.get("/metrics", timeout=5.0, cap=METRICS_CAP, cancel=cancel)
        if r.status_code in (404, 501) or r.status_code >= 500:
            return None
        self.raise_for_status(r, "/metrics")
        return parse_metrics(r.content.decode("utf-8", "replace"), self.where)

    def gpu_memory(self) -> tuple:
        """The server box's GPU memory from its dcgm-exporter (``dcgm_url``); () when none is set."""
        if not self.server.dcgm_url or self._dcgm is None:
            return ()
        try:
            r = self.get(self.server.dcgm_url, timeout=5.0, cap=DCGM_CAP, http=self._dcgm)
        except ServerError as exc:
            raise ServerError(f"GPU exporter {self.server.dcgm_url}: {str(exc).removeprefix(self.where + ': ')}"
                              ) from None
        if r.status_code != 200:
            detail = error_line(r.content)
            raise ServerError(f"GPU exporter {self.server.dcgm_url} answered HTTP {r.status_code}"
                              + (f": {detail}" if detail else ""))
        return parse_dcgm(r.content.decode("utf-8", "replace"), self.server.dcgm_url)

    # -- capabilities --------------------------------------------------------------------

    def probe(self, *, deadline_s: float = PROBE_S, cancel: CancelToken | None = None) -> Capabilities:
        """Connect and read what the server is and can report (a few small GETs, no generation), all of it
        within ``deadline_s`` whatever the server does; ``cancel`` ends it at once."""
        self._probe_end, self._probe_cancel = time.monotonic() + deadline_s, cancel
        try:
            return self._probe()
        finally:
            self._probe_end, self._probe_cancel = None, None

    def _probe(self) -> Capabilities:
        health = self.get("/health", timeout=10.0)
        if health.status_code == 503:
            self.raise_for_status(health, "/health")
        models_doc = self.get_json("/v1/models")
        models, owners, ctx = _models(models_doc, self.where)
        if not models:
            raise ServerError(f"{self.where} serves no model (/v1/models is empty)")
        model = self.server.model or models[0]
        if model not in models:
            raise ServerError(f"{self.where} does not serve model {model!r} (it serves: {', '.join(models[:8])})")
        probe = Probe(self, health, frozenset(owners))
        kind, props = recognise(probe)
        counters = None
        if kind.metrics:
            try:
                counters = self.metrics()
            except ServerError:
                counters = None
        caps = _describe(kind, probe, models, model, ctx.get(model), props, counters)
        if self.server.dcgm_url:
            try:
                caps = _with(caps, vram=bool(self.gpu_memory()))
            except ServerError as exc:
                caps = _with(caps, notes=caps.notes + (f"GPU memory: {exc}",))
        return caps

    # -- streaming ---------------------------------------------------------------------

    @contextlib.contextmanager
    def stream_events(self, path: str, body: dict, cancel: CancelToken | None = None) -> Iterator[StreamedEvents]:
        """POST ``body`` and iterate its Server-Sent Events' data.  ``cancel`` (or ``stop()``, or ``close()``)
        ends it from any thread at once, while connecting, waiting for headers or reading events."""
        guard = self.guard(cancel, self.read_s)

        def call() -> httpx2.Response:
            request = self._http.build_request("POST", path, json=body, extensions={"trace": guard.trace})
            r = self._http.send(request, stream=True)
            if r.status_code >= 400:
                try:
                    content = read_body(r, guard, cap=ERROR_CAP, what=f"{self.where}: {path}", cut=True)
                finally:
                    r.close()
                return httpx2.Response(r.status_code, content=content)
            return r

        try:
            try:
                r = guard.run(call, name="specchat-stream-open", within=HEADERS_S)
            except (DeadlinePassed, Cancelled):
                raise self._ended(guard, path) from None
            except httpx2.HTTPError as exc:
                raise self._ended(guard, path, exc) from None
            if r.status_code >= 400:
                self.raise_for_status(r, path)
            try:
                yield StreamedEvents(r, self, guard)
            finally:
                r.close()
        finally:
            guard.release()


class StreamedEvents:
    """The ``data`` of each Server-Sent Event of one response (comments and pings skipped).

    Written here rather than taken from httpx-sse, which imports httpx, not httpx2.  Bounded:
    the line being assembled is capped at :data:`~.reader.LINE_CAP` (checked on every piece
    read, not once a line is whole), an event's data too, and :data:`~.reader.STALL_S` (the
    client's ``read_s``) without a complete event ends it.  ``stop()`` cancels the request's
    guard, which shuts the socket down: a read blocked in another thread returns at once
    (closing it would not); the server sees the client go and stops generating.
    """

    def __init__(self, response: httpx2.Response, client: ServerClient, guard: Guard) -> None:
        self._r = response
        self._client = client
        self._guard = guard
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self._guard.token.cancel()

    def __iter__(self) -> Iterator[str]:
        where = self._client.where
        stall_s = self._client.read_s
        data: list[str] = []
        size = 0
        buf = bytearray()
        last = time.monotonic()
        try:
            for piece in self._r.iter_bytes():
                if self.stopped or self._guard.token.cancelled:
                    return
                buf += piece
                start = 0
                while (end := buf.find(b"\n", start)) >= 0:
                    line = bytes(buf[start:end]).removesuffix(b"\r").decode("utf-8", "replace")
                    start = end + 1
                    if not line:  # an event ends
                        if data:
                            last = time.monotonic()
                            yield "\n".join(data)
                            if self.stopped:
                                return
                        data, size = [], 0
                        continue
                    if line.startswith(":"):
                        continue
                    name, _, value = line.partition(":")
                    if name == "data":
                        value = value[1:] if value.startswith(" ") else value
                        size += len(value)
                        if size > LINE_CAP:
                            raise ServerError(f"{where} sent a chunk larger than {LINE_CAP >> 20} MiB")
                        data.append(value)
                del buf[:start]
                if len(buf) > LINE_CAP:
                    raise ServerError(f"{where} sent a line longer than {LINE_CAP >> 20} MiB")
                if time.monotonic() - last > stall_s:
                    raise ServerError(f"{where} sent no complete chunk for {stall_s:g} s")
            if buf.strip() and not self.stopped:  # the last line, without its newline
                line = bytes(buf).decode("utf-8", "replace")
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
            if data and not self.stopped:
                yield "\n".join(data)
        except httpx2.HTTPError as exc:
            if self.stopped or self._guard.token.cancelled:
                return
            raise _explain_http(self._client.server, exc) from None


# -- reading what a server says about itself ------------------------------------------------


def _models(doc: Any, where: str) -> tuple[tuple[str, ...], set[str], dict[str, int]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise ServerError(f"{where}: /v1/models is not an OpenAI model list")
    ids: list[str] = []
    owners: set[str] = set()
    ctx: dict[str, int] = {}
    for m in doc["data"][:1000]:
        if not isinstance(m, dict) or not isinstance(m.get("id"), str) or not m["id"] or len(m["id"]) > 512:
            continue
        ids.append(m["id"])
        if isinstance(m.get("owned_by"), str):
            owners.add(m["owned_by"].lower())
        for key in ("max_model_len", "context_length"):
            v = m.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 31:
                ctx[m["id"]] = v
        meta = m.get("meta")  # llama-server: the served context (n_ctx), not only the trained one
        if isinstance(meta, dict) and as_int(meta.get("n_ctx")) and m["id"] not in ctx:
            ctx[m["id"]] = meta["n_ctx"]
    return tuple(ids), owners, ctx


def _describe(kind: ServerKind, probe: Probe, models: tuple[str, ...], model: str, ctx: int | None, props: Any,
              counters: ServerMetrics | None) -> Capabilities:
    said = Said(ctx)
    kind.describe(said, props, counters, probe)
    said.notes.append("GPU memory: servers do not report it; give the box's dcgm-exporter URL to see it")
    return Capabilities(engine=kind.name, models=models, model=model, n_ctx=said.ctx, speculative=said.speculative,
                        speculation=said.speculation, n_max=said.n_max,
                        metrics=bool(counters and counters.spec is not None), build=said.build,
                        notes=tuple(said.notes))


def _with(caps: Capabilities, **changes: Any) -> Capabilities:
    from dataclasses import replace

    if changes.get("vram"):
        changes.setdefault("notes", tuple(n for n in caps.notes if not n.startswith("GPU memory")))
    return replace(caps, **changes)
