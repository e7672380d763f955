"""HTTP to one server: requests with one error type, Server-Sent Events, and what the server can tell.

Capabilities are read from what the server answers, never from a version number (field
names moved during 2026): the probe reads ``/health`` and ``/v1/models``, then tries the
kinds of server of :data:`specchat.remote.kinds.KINDS` in order (llama-server, vLLM,
SGLang, any OpenAI-compatible one); the kind that recognises the server says the rest.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

from specchat.cancel import shut_socket

from .counters import ServerMetrics, parse_dcgm, parse_metrics
from .errors import ServerError
from .kinds import Probe, Said, ServerKind, as_int, kind_named, recognise
from .servers import ServerConfig

MAX_JSON_BYTES = 8 << 20  # /props of a big model with its chat template is ~100 KB
MAX_EVENT_BYTES = 1 << 20  # one streamed chunk; real ones are a few hundred bytes
CONNECT_S = 5.0
READ_S = 120.0  # the longest a server may think before its next chunk (a long prefill on a big prompt)


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


def _error_text(body: bytes) -> str:
    """The message in an error body (OpenAI, vLLM and llama.cpp put it in ``error.message``)."""
    try:
        doc = json.loads(body[:65536].decode("utf-8", "replace"))
    except ValueError:
        return body[:200].decode("utf-8", "replace").strip()
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or ""
            return str(msg)[:300]
        if isinstance(err, str):
            return err[:300]
    return ""


class ServerClient:
    """One server's HTTP client (owns its connection pool; ``close()`` or use ``with``)."""

    def __init__(self, server: ServerConfig, api_key: str = "", *, read_s: float = READ_S) -> None:
        self.server = server
        self.where = f"server {server.name} ({server.url})"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        verify: Any = server.ca_file if server.verify_tls and server.ca_file else server.verify_tls
        if isinstance(verify, str):
            import ssl

            try:
                verify = ssl.create_default_context(cafile=verify)
            except (OSError, ssl.SSLError) as exc:
                raise ServerError(f"{self.where}: cannot use the CA file {server.ca_file}: {exc}") from None
        self._http = httpx2.Client(base_url=server.url, headers=headers, verify=verify, follow_redirects=False,
                                   timeout=httpx2.Timeout(read_s, connect=CONNECT_S))

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- plain requests ----------------------------------------------------------------

    def get(self, path: str, *, timeout: float = 10.0) -> httpx2.Response:
        """GET ``path`` (any status); ServerError when the server cannot be reached."""
        try:
            with self._http.stream("GET", path, timeout=timeout) as r:
                body = b""
                for piece in r.iter_bytes():
                    body += piece
                    if len(body) > MAX_JSON_BYTES:
                        raise ServerError(f"{self.where}: {path} answered more than {MAX_JSON_BYTES >> 20} MiB")
                return httpx2.Response(r.status_code, headers=r.headers, content=body, request=r.request)
        except httpx2.HTTPError as exc:
            raise _explain_http(self.server, exc) from None

    def get_json(self, path: str, *, timeout: float = 10.0) -> Any:
        r = self.get(path, timeout=timeout)
        self.raise_for_status(r, path)
        try:
            return json.loads(r.content.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ServerError(f"{self.where}: {path} did not answer JSON") from None

    def raise_for_status(self, r: httpx2.Response, path: str) -> None:
        if r.status_code < 400:
            return
        detail = _error_text(r.content)
        if r.status_code in (401, 403):
            raise ServerError(f"{self.where} refused the API key (HTTP {r.status_code}"
                              + (f": {detail}" if detail else "") + "): set the right key in Settings → Servers "
                              f"or with 'specchat servers add {self.server.name} URL --api-key-stdin'")
        if r.status_code == 503:
            raise ServerError(f"{self.where} is not ready (HTTP 503{': ' + detail if detail else ''}): "
                              "it may still be loading its model; try again shortly")
        raise ServerError(f"{self.where}: {path} failed with HTTP {r.status_code}" + (f": {detail}" if detail else ""))

    def metrics(self) -> ServerMetrics | None:
        """The server's Prometheus counters; None when it serves none (llama-server without --metrics)."""
        r = self.get("/metrics", timeout=5.0)
        if r.status_code in (404, 501) or r.status_code >= 500:
            return None
        self.raise_for_status(r, "/metrics")
        return parse_metrics(r.content.decode("utf-8", "replace"), self.where)

    def gpu_memory(self) -> tuple:
        """The server box's GPU memory from its dcgm-exporter (``dcgm_url``); () when none is set."""
        if not self.server.dcgm_url:
            return ()
        try:
            r = httpx2.get(self.server.dcgm_url, timeout=5.0, verify=self.server.verify_tls)
        except httpx2.HTTPError as exc:
            raise ServerError(f"GPU exporter {self.server.dcgm_url}: {type(exc).__name__}: {str(exc)[:120]}") from None
        if r.status_code != 200 or len(r.content) > MAX_JSON_BYTES:
            raise ServerError(f"GPU exporter {self.server.dcgm_url} answered HTTP {r.status_code}")
        return parse_dcgm(r.text, self.server.dcgm_url)

    # -- capabilities --------------------------------------------------------------------

    def probe(self) -> Capabilities:
        """Connect and read what the server is and can report (a few small GETs, no generation)."""
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
    def stream_events(self, path: str, body: dict) -> Iterator[StreamedEvents]:
        """POST ``body`` and iterate its Server-Sent Events' data; ``stop()`` ends it from any thread."""
        try:
            with self._http.stream("POST", path, json=body) as r:
                if r.status_code >= 400:
                    content = r.read()[:MAX_JSON_BYTES]
                    self.raise_for_status(httpx2.Response(r.status_code, content=content), path)
                yield StreamedEvents(r, self)
        except httpx2.HTTPError as exc:
            raise _explain_http(self.server, exc) from None


class StreamedEvents:
    """The ``data`` of each Server-Sent Event of one response (comments and pings skipped).

    Written here rather than taken from httpx-sse, which imports httpx, not httpx2 (two
    HTTP stacks for one 30-line loop).  ``stop()`` shuts the socket down, which wakes a
    read blocked in another thread at once (closing it would not); the server sees the
    client go and stops generating.
    """

    def __init__(self, response: httpx2.Response, client: ServerClient) -> None:
        self._r = response
        self._client = client
        self.stopped = False
        stream = response.extensions.get("network_stream")
        self._socket: socket.socket | None = stream.get_extra_info("socket") if stream is not None else None

    def stop(self) -> None:
        self.stopped = True
        if self._socket is not None:
            shut_socket(self._socket)

    def __iter__(self) -> Iterator[str]:
        data: list[str] = []
        size = 0
        try:
            for line in self._r.iter_lines():
                if self.stopped:
                    return
                if not line:  # an event ends
                    if data:
                        yield "\n".join(data)
                    data, size = [], 0
                    continue
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(":")
                if name == "data":
                    value = value[1:] if value.startswith(" ") else value
                    size += len(value)
                    if size > MAX_EVENT_BYTES:
                        raise ServerError(f"{self._client.where} sent a chunk larger than {MAX_EVENT_BYTES >> 20} MiB")
                    data.append(value)
            if data and not self.stopped:
                yield "\n".join(data)
        except httpx2.HTTPError as exc:
            if self.stopped:
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
