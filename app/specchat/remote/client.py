"""HTTP to one server: requests with one error type, Server-Sent Events, and what the server can tell.

Capabilities are read from what the server answers, never from a version number (field
names moved during 2026):

- llama-server: ``/health`` answers ``{"status": "ok"}``, ``/props`` has
  ``default_generation_settings``/``build_info``, ``/slots`` says which slots draft,
  ``/metrics`` (only with ``--metrics``) has the ``llamacpp:spec_decode_*`` counters;
- vLLM: ``/v1/models`` entries are ``owned_by: "vllm"``, ``/metrics`` has the
  ``vllm:spec_decode_*`` counters once a speculative config exists;
- SGLang: ``/get_server_info`` answers, with its speculative settings;
- anything else that lists ``/v1/models`` is an OpenAI-compatible server: tok/s only.
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
from .servers import ServerConfig

MAX_JSON_BYTES = 8 << 20  # /props of a big model with its chat template is ~100 KB
MAX_EVENT_BYTES = 1 << 20  # one streamed chunk; real ones are a few hundred bytes
CONNECT_S = 5.0
READ_S = 120.0  # the longest a server may think before its next chunk (a long prefill on a big prompt)


class Engine:
    LLAMA = "llama.cpp"
    VLLM = "vllm"
    SGLANG = "sglang"
    OPENAI = "openai"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one server said about itself when SpecChat connected."""

    engine: str
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
    def per_round(self) -> bool:
        """Rounds rebuilt live from the stream (llama-server's running timings)."""
        return self.engine == Engine.LLAMA

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
        engine = Engine.OPENAI
        props: Any = None
        if "vllm" in owners:
            engine = Engine.VLLM
        elif "llamacpp" in owners or _is_llama_health(health):
            engine = Engine.LLAMA
        if engine in (Engine.OPENAI, Engine.LLAMA):
            r = self.get("/props")
            if r.status_code == 200:
                with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                    props = json.loads(r.content.decode("utf-8"))
                if isinstance(props, dict) and ("default_generation_settings" in props or "build_info" in props):
                    engine = Engine.LLAMA
        if engine == Engine.OPENAI:
            r = self.get("/get_server_info")
            if r.status_code == 200:
                engine = Engine.SGLANG
                with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                    props = json.loads(r.content.decode("utf-8"))
        counters = None
        if engine != Engine.OPENAI:
            try:
                counters = self.metrics()
            except ServerError:
                counters = None
        caps = _describe(engine, models, model, ctx.get(model), props, counters, self)
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


def _is_llama_health(r: httpx2.Response) -> bool:
    try:
        doc = json.loads(r.content.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("status") == "ok"


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
        if isinstance(meta, dict) and _int(meta.get("n_ctx")) and m["id"] not in ctx:
            ctx[m["id"]] = meta["n_ctx"]
    return tuple(ids), owners, ctx


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31 else None


def _describe(engine: str, models: tuple[str, ...], model: str, ctx: int | None, props: Any,
              counters: ServerMetrics | None, client: ServerClient) -> Capabilities:
    notes: list[str] = []
    speculative: bool | None = None
    speculation = ""
    n_max: int | None = None
    build = ""
    if engine == Engine.LLAMA and isinstance(props, dict):
        gen = props.get("default_generation_settings")
        if isinstance(gen, dict):
            ctx = _int(gen.get("n_ctx")) or ctx
            params = gen.get("params")
            n_max = _int(params.get("speculative.n_max")) if isinstance(params, dict) else None
        info = props.get("build_info")
        build = str(info)[:80] if isinstance(info, str | int) else ""
        slots = client.get("/slots")
        if slots.status_code == 200:
            with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                doc = json.loads(slots.content.decode("utf-8"))
                if isinstance(doc, list) and doc and all(isinstance(s, dict) for s in doc):
                    flags = [s.get("speculative") for s in doc if isinstance(s.get("speculative"), bool)]
                    speculative = any(flags) if flags else None
                    first = doc[0].get("params")
                    if isinstance(first, dict):
                        n_max = _int(first.get("speculative.n_max")) or n_max
                        types = first.get("speculative.types") or first.get("speculative.type")
                        if isinstance(types, str | list):
                            speculation = ",".join(types) if isinstance(types, list) else types
        if speculative:
            speculation = (speculation or "draft") + (f", up to {n_max} tokens" if n_max else "")
        if not counters:
            notes.append("server-wide counters: none (start llama-server with --metrics to cross-check)")
    elif engine == Engine.VLLM:
        speculative = bool(counters and counters.spec is not None) or None
        speculation = "speculative config on (vLLM)" if speculative else ""
        notes.append("live acceptance: vLLM's /metrics counters, which cover the whole server, not this chat")
    elif engine == Engine.SGLANG and isinstance(props, dict):
        algo = props.get("speculative_algorithm")
        speculative = bool(algo) if algo is not None else None
        n = _int(props.get("speculative_num_draft_tokens"))
        n_max = n - 1 if n else None
        speculation = f"{algo}, {n_max} draft tokens" if algo and n_max else str(algo or "")
        notes.append("acceptance: SGLang reports it per answer, at the end")
    elif engine == Engine.OPENAI:
        notes.append("acceptance, draft length: this server does not report speculation (tok/s only)")
    notes.append("GPU memory: servers do not report it; give the box's dcgm-exporter URL to see it")
    return Capabilities(engine=engine, models=models, model=model, n_ctx=ctx, speculative=speculative,
                        speculation=speculation, n_max=n_max, metrics=bool(counters and counters.spec is not None),
                        build=build, notes=tuple(notes))


def _with(caps: Capabilities, **changes: Any) -> Capabilities:
    from dataclasses import replace

    if changes.get("vram"):
        changes.setdefault("notes", tuple(n for n in caps.notes if not n.startswith("GPU memory")))
    return replace(caps, **changes)
