"""Download model files from the Hugging Face hub into the user's hub cache, as one job.

A model pair (target + draft, maybe more files) is one job: one progress bar over all
bytes, one free-space check up front, one cancel.  Files go into the ordinary
huggingface_hub cache (``~/.cache/huggingface/hub`` unless told otherwise), so a file
the user already has, from this app or any other, is reused and not fetched again.

Why not just ``hf_hub_download``: since huggingface_hub 1.x it writes each download to a
process-unique temporary file and deletes it on any failure (huggingface_hub PR #4228),
so a download that is cancelled, killed or loses the network starts from zero next
time.  And its ``http_get`` reads the body in 10 MiB chunks with one blocking socket
read after another: a server that sends the headers and then nothing holds the caller
for the whole read timeout per retry, and a cancel is only seen between chunks.  So
this module fetches the blob itself, still with huggingface_hub's machinery
(``get_hf_file_metadata`` for the HEAD, its HTTP client and headers, ``WeakFileLock``
against a second writer, its cache layout), into the stable name
``blobs/<etag>.incomplete`` (the name huggingface_hub used before 1.0, so either resumes
the other's partial file).  Once the bytes are complete and their sha256 checks out, the
file is renamed to ``blobs/<etag>`` and linked as ``snapshots/<commit>/<filename>``, the
way ``hf_hub_download`` links it.

Cancel and stalls.  ``cancel`` is the app's one :class:`~specchat.cancel.CancelToken`.  The
blocking network calls (the HEAD through :func:`specchat.cancel.call_cancellable`, the GET and
its body reads) run in a short-lived daemon thread that hands the body over in small pieces through a
bounded queue; the job's own thread waits on that queue at most :data:`POLL_S` at a
time, so a cancel is seen within about a quarter of a second in every state (planning,
waiting for another process's lock, a server that sends nothing, hashing), and a server
that sends nothing for ``stall_timeout_s`` is given up on (retried from where it got
to, then refused with one line).  A cancelled or stalled thread is simply left to end on
its own read timeout; it owns no file.  Hashing reads 8 MiB at a time and checks the
cancel between reads (8 MiB hash in ~10 ms, so a multi-GB file never holds a shutdown).

Hostile answers.  Every name that becomes part of a path (repo id, file name, revision,
the ETag and commit the hub answers) is checked by :mod:`specchat.models.hub_names`
first; a body longer than the size the hub announced is refused; an error body is read
at most :data:`ERROR_BODY_MAX` bytes.

Every failure the user can cause or fix (gated repo, missing file, no network, full
disk, corrupt bytes) becomes a :class:`DownloadError` whose message is one line.
:func:`hub_error` does that mapping; :mod:`specchat.models.remote` shares it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import queue
import re
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar
from urllib.parse import urlsplit

import filelock
import httpx2
from huggingface_hub import (
    constants,
    get_hf_file_metadata,
    hf_hub_url,
    try_to_load_from_cache,
)
from huggingface_hub.errors import (
    FileMetadataError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

# the cache layout's own writers (a relative symlink, or a copy where links are not supported;
# the refs/<branch> file written atomically), so the snapshot looks exactly as hf_hub_download's
from huggingface_hub.file_download import (
    _cache_commit_hash_for_specific_revision,
    _create_symlink,
    repo_folder_name,
)
from huggingface_hub.utils import WeakFileLock, build_hf_headers, get_session, hf_raise_for_status

from specchat.bounded_json import TooDeep, loads
from specchat.cancel import Cancelled, CancelToken, DeadlinePassed, call_cancellable, start_daemon
from specchat.errors import UserError, one_line

from .hub_names import HubNameError, check_commit, check_etag, check_filename, check_repo_id, check_revision

PROGRESS_INTERVAL_S = 0.1  # at most ~10 progress callbacks a second
RATE_WINDOW_S = 5.0  # the rate is measured over the last few seconds, so a stall shows
POLL_S = 0.25  # the longest the job's thread waits without looking at the cancel flag
HASH_CHUNK = 8 << 20  # read and hashed at a time; ~10 ms of sha256, then the cancel is checked
ERROR_BODY_MAX = 64 << 10  # of an error answer's body, enough for any hub message
HEAD_DEADLINE_S = 60.0  # a HEAD (file size, etag, commit) that takes longer is refused
RETRIES = 5  # a GET that fails this many times in a row without a new byte is given up
_QUEUED_PIECES = 16  # body pieces (<= 64 KiB each, httpcore's read size) between the threads
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_T = TypeVar("_T")

# What the hub client raises for problems of the network, the hub or the disk.  HfHubHTTPError,
# OfflineModeIsEnabled and FileMetadataError are OSErrors too; transport errors are httpx2's.
HUB_ERRORS: tuple[type[BaseException], ...] = (OSError, httpx2.HTTPError)


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file in a hub repo, with what the catalog knows about it in advance.

    Checked when made (:mod:`specchat.models.hub_names`): a repo id, file name or revision
    that could leave the cache directory, or a sha256 that is not one, raises HubNameError.
    """

    repo_id: str
    filename: str
    revision: str = "main"
    sha256: str | None = None  # expected, if known
    size: int | None = None  # expected, if known

    def __post_init__(self) -> None:
        check_repo_id(self.repo_id)
        check_filename(self.filename)
        check_revision(self.revision)
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise HubNameError(f"{self.ref}: {self.sha256[:80]!r} is not a sha256 (64 hex digits)")
        if self.size is not None and (isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0):
            raise HubNameError(f"{self.ref}: size {self.size!r:.40} is not a number of bytes")

    @property
    def ref(self) -> str:
        """The file as the user names it: owner/repo/filename."""
        return f"{self.repo_id}/{self.filename}"


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """A snapshot of a download job; byte counts cover the whole job (all files)."""

    filename: str  # the file being worked on
    file_index: int  # its index in the list given to download_files (0-based)
    file_count: int
    done_bytes: int  # includes files and partial files that were already on disk
    total_bytes: int
    rate_bytes_s: float  # over the last few seconds, 0.0 before anything arrived
    eta_s: float | None  # None while the rate is unknown
    stage: str = "downloading"  # or "verifying": the file's sha256 is being checked
    verified_bytes: int = 0  # of the current file, while verifying


class DownloadError(UserError):
    """A download failed for a reason the user can act on; the message is one line for the user."""


class HubUnreachableError(DownloadError):
    """The hub could not be reached at all (no network, a refused connection, HF_HUB_OFFLINE): asking
    it again in the same search is pointless, and what was found without it is all there is."""


class DownloadCancelled(DownloadError, Cancelled):
    """The user cancelled; the partial file stays in the cache and the next call resumes it."""


def download_files(
    files: Sequence[HubFile],
    *,
    progress: Callable[[DownloadProgress], None] | None = None,
    cancel: CancelToken | None = None,
    cache_dir: Path | None = None,
    token: str | None = None,
    stall_timeout_s: float | None = None,
) -> list[Path]:
    """Download ``files`` as one job into the hub cache; return their local paths, in order.

    Files already in the cache are reused without transferring a byte; partial files left
    by an earlier cancelled or interrupted call are resumed.  Before any byte moves, every
    file's size and etag are asked from the hub and the job is refused if the cache's disk
    lacks the bytes still missing.  ``cancel`` is looked at least every
    :data:`POLL_S` seconds in every state (and on every piece of body received);
    ``progress`` gets at most ~10 calls a second plus one at the start and end of each
    file.  A server that sends nothing for ``stall_timeout_s`` (default
    ``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s) is asked again from where it stopped, up to
    :data:`RETRIES` times.  ``token`` None means huggingface_hub's own (``hf auth login``
    or HF_TOKEN).  Raises DownloadError (DownloadCancelled on cancel) with a one-line message.
    """
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    stall = float(stall_timeout_s if stall_timeout_s is not None else constants.HF_HUB_DOWNLOAD_TIMEOUT)
    job_cancel = _Cancel(cancel)
    current: HubFile | None = files[0] if files else None
    try:
        plans = []
        for file in files:
            current = file
            plans.append(_plan(file, cache, token, job_cancel))
        _check_free_space(plans, cache)
        job = _Job(plans, progress, job_cancel)
        paths = []
        for index, plan in enumerate(plans):
            current = plan.file
            job.start_file(index)
            if plan.local_path is None:
                with _blob_lock(plan, cache, job):
                    if not plan.blob.exists():  # (another process may have finished it while we waited)
                        _fetch_blob(plan, job, stall)
                    plan.local_path = _link_snapshot(plan)
            job.end_file()
            paths.append(plan.local_path)
        return paths
    except DownloadError:
        raise
    except HubNameError as exc:
        assert current is not None
        raise DownloadError(f"{current.ref}: {exc}") from None
    except HUB_ERRORS as exc:
        assert current is not None  # an error needs a file to have been worked on
        raise hub_error(exc, current) from None


# --- cancel, and blocking calls that do not block it ----------------------------------------------


class _Cancel:
    """The job's cancel token, checked with one message; ``kept`` says what stays for a resume."""

    def __init__(self, token: CancelToken | None) -> None:
        self.token = token

    def check(self, kept: str = "") -> None:
        if self.token is not None and self.token.cancelled:
            raise DownloadCancelled(f"download cancelled{kept}; it resumes where it stopped")

    def sleep(self, seconds: float) -> None:
        if self.token is None:
            time.sleep(seconds)
        elif self.token.wait(seconds):
            self.check()


def in_background(call: Callable[[], _T], cancel: CancelToken | None, deadline_s: float, what: str) -> _T:
    """``call()`` (a blocking hub request) on a helper thread (:func:`specchat.cancel.call_cancellable`)
    while the caller polls ``cancel`` (DownloadCancelled) and the deadline (DownloadError naming
    ``what``) every POLL_S.  What ``call`` raises is raised here.  On cancel or deadline the helper
    is left to end on its own timeouts (it must hold no file).
    """
    return _in_background(call, _Cancel(cancel), deadline_s, what)


def _in_background(call: Callable[[], _T], cancel: _Cancel, deadline_s: float, what: str) -> _T:
    try:
        return call_cancellable(call, cancel.token, deadline_s=deadline_s, poll_s=POLL_S,
                                name="specchat-hub-request", on_cancel=cancel.check)
    except DeadlinePassed:
        raise DownloadError(f"{what}: the hub did not answer within {deadline_s:g} s; try again") from None


# --- planning: what is there, what is missing --------------------------------------------------


@dataclass(slots=True)
class _Plan:
    """One file of the job, after asking the hub about it."""

    file: HubFile
    size: int
    have: int  # bytes already on disk (the whole size for a cached file)
    local_path: Path | None = None  # set once the file is usable from the cache
    url: str = ""  # where the bytes are (the hub may redirect to a CDN)
    headers: dict[str, str] = field(default_factory=dict)  # for GETs of url
    etag: str = ""
    commit: str = ""
    storage: Path = Path()  # models--owner--name
    blob: Path = Path()
    pointer: Path = Path()

    @property
    def partial(self) -> Path:
        return self.blob.with_name(self.blob.name + ".incomplete")


def _plan(file: HubFile, cache: Path, token: str | None, cancel: _Cancel) -> _Plan:
    url = hf_hub_url(file.repo_id, file.filename, revision=file.revision)
    try:
        meta = _in_background(lambda: get_hf_file_metadata(url, token=token), cancel, HEAD_DEADLINE_S, file.ref)
    except (RevisionNotFoundError, RemoteEntryNotFoundError):
        raise  # the hub says it does not exist: a cached copy of another revision is no answer
    except HUB_ERRORS:
        # No network, hub down, token expired: a file already in the cache is still usable.
        cached = try_to_load_from_cache(file.repo_id, file.filename, cache_dir=cache, revision=file.revision)
        if isinstance(cached, str):
            size = os.path.getsize(cached)
            return _Plan(file, size=size, have=size, local_path=Path(cached))
        raise
    if not meta.commit_hash or not meta.etag:
        raise FileMetadataError(f"{url}: no commit or etag in the answer")
    if meta.size is None or meta.size < 0:
        raise FileMetadataError(f"{url}: no file size in the answer")
    # both become path components below: blobs/<etag>, snapshots/<commit>/<filename>
    check_etag(meta.etag)
    check_commit(meta.commit_hash)
    _check_expected(file, meta.etag, meta.size)

    storage = cache / repo_folder_name(repo_id=file.repo_id, repo_type="model")
    plan = _Plan(
        file,
        size=meta.size,
        have=0,
        url=meta.location,
        headers=download_headers(url, meta.location, token),
        etag=meta.etag,
        commit=meta.commit_hash,
        storage=storage,
        blob=storage / "blobs" / meta.etag,
        pointer=storage / "snapshots" / meta.commit_hash / file.filename,
    )
    if plan.pointer.exists():
        plan.have, plan.local_path = plan.size, plan.pointer
    elif plan.blob.exists():
        if plan.blob.stat().st_size == plan.size:
            plan.have = plan.size
        else:  # a truncated blob (disk trouble, another tool): fetch it again
            plan.blob.unlink()
    if not plan.have and plan.partial.exists():
        plan.have = plan.partial.stat().st_size
        if plan.have > plan.size:  # cannot be a prefix of this file
            plan.partial.unlink()
            plan.have = 0
    return plan


def _check_expected(file: HubFile, etag: str, size: int) -> None:
    """Refuse before downloading when the hub's file is not the one the catalog pinned."""
    if file.size is not None and file.size != size:
        raise DownloadError(
            f"{file.filename} in {file.repo_id} has changed on the hub: {size:,} bytes, expected {file.size:,}"
        )
    if file.sha256 and _SHA256.fullmatch(etag) and etag != file.sha256.lower():
        raise DownloadError(
            f"{file.filename} in {file.repo_id} has changed on the hub: "
            f"sha256 {etag[:12]}…, expected {file.sha256[:12]}…"
        )


def download_headers(url: str, location: str, token: str | None) -> dict[str, str]:
    """Headers for fetching bytes from ``location``, where the hub sent us for ``url``.

    The token (and huggingface_hub's user agent) go only to the hub's own origin, never to
    the CDN host the hub redirects large files to (a signed URL that needs no token).
    Identity encoding: byte offsets and sizes must be those of the file.
    """
    a, b = urlsplit(url), urlsplit(location)
    same_origin = (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)
    headers = build_hf_headers(token=token) if same_origin else {}
    headers["Accept-Encoding"] = "identity"
    return headers


def _check_free_space(plans: Sequence[_Plan], cache: Path) -> None:
    need = sum(p.size - p.have for p in plans if p.local_path is None)
    if need <= 0:
        return
    probe = cache
    while not probe.exists() and probe.parent != probe:  # the cache dir may not exist yet
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise DownloadError(
            f"not enough disk space in {cache}: the download needs {human_bytes(need)}, {human_bytes(free)} free"
        )


# --- fetching one blob -------------------------------------------------------------------------


def raise_for_error_status(response: httpx2.Response) -> None:
    """For an answer of 400 or more: read at most ERROR_BODY_MAX bytes of its body, then raise
    huggingface_hub's error for it (which quotes the body).  A 200 MB error page costs 64 KiB."""
    if response.status_code < 400:
        return
    body = bytearray()
    for piece in response.iter_raw():
        body += piece
        if len(body) >= ERROR_BODY_MAX:
            break
    raise_hub_error(response, bytes(body[:ERROR_BODY_MAX]))


def raise_hub_error(response: httpx2.Response, body: bytes) -> None:
    """huggingface_hub's error for an answer of 400 or more whose body (at most ERROR_BODY_MAX bytes) is
    ``body``: the hub's ``X-Error-Code`` decides the kind, and what the body says is quoted.

    huggingface_hub reads the body itself with ``json.loads`` and walks it unchecked: a body nested a
    thousand levels deep is a RecursionError, bytes that are not UTF-8 a UnicodeDecodeError, a JSON array
    or number an AttributeError.  So it is given a body of SpecChat's making: ``{"error": "<one line>"}``
    from the hub's ``error`` text (read through :mod:`specchat.bounded_json`), or the text of a page
    that is not JSON."""
    text = body.decode("utf-8", "replace")
    try:
        doc = loads(text)
    except TooDeep:
        said = ""
    except ValueError:  # not JSON: a proxy's page, quoted unless it is HTML (as huggingface_hub does)
        said = "" if "html" in response.headers.get("Content-Type", "").lower() else text
    else:
        error = doc.get("error") if isinstance(doc, dict) else None
        said = error if isinstance(error, str) else ""
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in ("content-encoding", "content-length", "content-type")}
    hf_raise_for_status(httpx2.Response(response.status_code, headers=headers, json={"error": one_line(said, 300)},
                                        request=response.request))


class _Transient(Exception):
    """A GET that broke off (dropped connection, stall, short body): asked again from where it got to."""


class _Body:
    """One GET, read in a daemon thread; its status and body pieces arrive through a small queue.

    The job's thread waits at most POLL_S at a time (checking the cancel) and gives up
    after ``stall_s`` without a piece.  ``close()`` tells the reader to stop at its next
    piece; a reader blocked in a socket read ends on its own read timeout.
    """

    def __init__(self, url: str, headers: dict[str, str], stall_s: float) -> None:
        self._queue: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=_QUEUED_PIECES)
        self._stop = CancelToken()  # the reader's: set by close()
        self.stall_s = stall_s
        timeout = httpx2.Timeout(stall_s + 1.0)  # the job's own stall check comes first
        args = (url, headers, timeout)
        start_daemon(self._read, *args, name="specchat-download-body")

    def _read(self, url: str, headers: dict[str, str], timeout: httpx2.Timeout) -> None:
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                                      timeout=timeout) as response:
                raise_for_error_status(response)
                self._put("head", response)
                for piece in response.iter_raw():  # as sent: identity was asked, the hash checks it
                    if self._stop.cancelled:
                        return
                    if piece:
                        self._put("data", piece)
            self._put("end", None)
        except BaseException as exc:  # handed to the job's thread
            self._put("error", exc)

    def _put(self, kind: str, value: object) -> None:
        while not self._stop.cancelled:
            try:
                self._queue.put((kind, value), timeout=POLL_S)
                return
            except queue.Full:
                continue

    def next(self, cancel: Callable[[], None], what: str) -> tuple[str, object]:
        """The next item, or _Transient after stall_s without one."""
        last = time.monotonic()
        while True:
            cancel()
            try:
                kind, value = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if time.monotonic() - last > self.stall_s:
                    raise _Transient(f"{what}: the server sent nothing for {self.stall_s:g} s") from None
                continue
            if kind == "error":
                assert isinstance(value, BaseException)
                if isinstance(value, httpx2.TransportError):  # dropped, reset, timed out: ask again
                    raise _Transient(f"{what}: the connection broke ({type(value).__name__})")
                raise value
            return kind, value

    def close(self) -> None:
        self._stop.cancel()


def _open_partial(path: Path) -> BinaryIO:
    """Open the partial file for appending (a seam for the tests' full-disk simulation)."""
    return path.open("ab")


@contextlib.contextmanager
def _blob_lock(plan: _Plan, cache: Path, job: _Job) -> Iterator[None]:
    """huggingface_hub's own lock file for this blob: two downloads of it (two app windows, or this
    app and the hf CLI) never write at once, and a killed process's lock dies with it.  Waited for
    POLL_S at a time, so a cancel is seen while another process holds it."""
    lock = cache / ".locks" / plan.storage.name / f"{plan.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    plan.blob.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        while True:
            try:
                stack.enter_context(WeakFileLock(lock, timeout=POLL_S))
                break
            except filelock.Timeout:
                job.check_cancel()
        yield


def _fetch_blob(plan: _Plan, job: _Job, stall_s: float) -> None:
    """Download into ``blobs/<etag>.incomplete``, resuming what is there, verify, rename to the blob."""
    with _open_partial(plan.partial) as f:
        job.resume_at(f.tell())
        failures = 0
        while plan.have < plan.size:
            before = plan.have
            try:
                _one_get(plan, f, job, stall_s)
            except _Transient as exc:
                failures = 0 if plan.have > before else failures + 1
                if failures >= RETRIES:
                    raise DownloadError(f"{exc}; try again (the download resumes)") from None
                job.sleep(min(0.5 * 2 ** failures, 8.0))  # cancellable back-off
    _verify(plan, job)
    os.replace(plan.partial, plan.blob)


def _one_get(plan: _Plan, f: BinaryIO, job: _Job, stall_s: float) -> None:
    """One GET from ``plan.have`` on, appending to ``f``; _Transient when it breaks off early."""
    headers = dict(plan.headers)
    if plan.have:
        headers["Range"] = f"bytes={plan.have}-"
    body = _Body(plan.url, headers, stall_s)
    what = plan.file.ref
    try:
        _kind, head = body.next(job.check_cancel, what)
        assert isinstance(head, httpx2.Response)
        _check_resume(plan, f, job, head)
        while True:
            kind, piece = body.next(job.check_cancel, what)
            if kind == "end":
                break
            assert isinstance(piece, bytes)
            if len(piece) > plan.size - plan.have:
                raise DownloadError(f"{what}: the server sent more than the {plan.size:,} bytes it announced; "
                                    "refusing the file")
            f.write(piece)
            job.add_bytes(len(piece))
    finally:
        body.close()
        f.flush()  # what arrived is on disk before anything else happens (a cancel, a kill)
    if plan.have < plan.size:
        raise _Transient(f"{what}: the connection kept breaking before the end of the file")


def _check_resume(plan: _Plan, f: BinaryIO, job: _Job, response: httpx2.Response) -> None:
    """A 206 must start where we asked; a 200 to a Range request means start again from byte 0."""
    status = response.status_code
    if plan.have and status == 200:  # the server ignored the Range header: its body starts at byte 0
        f.seek(0)
        f.truncate()
        job.resume_at(0)
    elif status == 206:
        m = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
        if m is None or int(m[1]) != plan.have:
            raise DownloadError(f"{plan.file.ref}: the server answered another byte range than asked "
                                f"({response.headers.get('Content-Range', 'none')!r:.60}); refusing the file")
    elif status != 200:
        raise DownloadError(f"{plan.file.ref}: unexpected answer HTTP {status} to a download; try again later")


def _verify(plan: _Plan, job: _Job) -> None:
    """Check the finished partial file's sha256; delete it on a mismatch so nothing bad is cached.

    The expected hash is the catalog's, else the etag when it is a sha256 (the hub's etag
    of an LFS file, which every GGUF is, is the sha256 of its content).  Small git files
    have a git sha1 etag and are only checked for size.  Read HASH_CHUNK at a time,
    checking the cancel in between: a cancelled check leaves the complete partial file,
    which the next call verifies again without a transfer.
    """
    expected = (plan.file.sha256 or (plan.etag if _SHA256.fullmatch(plan.etag) else "")).lower()
    if not expected:
        return
    digest = hashlib.sha256()
    done = 0
    with plan.partial.open("rb") as f:
        while block := f.read(HASH_CHUNK):
            digest.update(block)  # releases the GIL: the window stays responsive
            done += len(block)
            job.verifying(done)
    actual = digest.hexdigest()
    if actual != expected:
        plan.partial.unlink()
        raise DownloadError(
            f"{plan.file.filename}: sha256 mismatch ({actual[:12]}…, expected {expected[:12]}…), "
            "the file was removed; download again"
        )


def _link_snapshot(plan: _Plan) -> Path:
    """Create ``snapshots/<commit>/<filename>`` -> ``blobs/<etag>``, as hf_hub_download does.

    Done here rather than by a second hf_hub_download call: that call asks the hub again
    and would download whatever a second, different answer names, outside these checks.
    The branch ref (``refs/main``) is written too, so other tools and offline lookups
    find the file by revision name.
    """
    plan.pointer.parent.mkdir(parents=True, exist_ok=True)
    if not plan.pointer.exists():
        _create_symlink(str(plan.blob), str(plan.pointer), new_blob=False)
    _cache_commit_hash_for_specific_revision(str(plan.storage), plan.file.revision, plan.commit)
    return plan.pointer


# --- progress ----------------------------------------------------------------------------------


class _RateMeter:
    """Bytes per second over the last RATE_WINDOW_S seconds (a whole-job average hides a stall)."""

    def __init__(self) -> None:
        self.transferred = 0
        self._samples: deque[tuple[float, int]] = deque([(time.monotonic(), 0)])

    def add(self, n: int) -> None:
        self.transferred += n
        now = time.monotonic()
        self._samples.append((now, self.transferred))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
            self._samples.popleft()

    def rate(self) -> float:
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


class _Job:
    """Progress and cancellation of one download_files call, over all its files."""

    def __init__(
        self,
        plans: Sequence[_Plan],
        progress: Callable[[DownloadProgress], None] | None,
        cancel: _Cancel,
    ) -> None:
        self.plans, self.progress, self.cancel = plans, progress, cancel
        self.total = sum(p.size for p in plans)
        self.done = sum(p.have for p in plans)
        self.index = 0
        self.meter = _RateMeter()
        self._last_emit = 0.0

    def start_file(self, index: int) -> None:
        self.index = index
        self.check_cancel()
        self._emit(force=True)

    def resume_at(self, offset: int) -> None:
        """The partial file holds ``offset`` bytes now (another process may have added some)."""
        plan = self.plans[self.index]
        self.done += offset - plan.have
        plan.have = offset

    def add_bytes(self, n: int) -> None:
        self.done += n
        self.plans[self.index].have += n
        self.meter.add(n)
        self.check_cancel()
        self._emit()

    def verifying(self, verified: int) -> None:
        self.check_cancel()
        self._emit(stage="verifying", verified=verified)

    def end_file(self) -> None:
        plan = self.plans[self.index]
        self.done += plan.size - plan.have
        plan.have = plan.size
        self._emit(force=True)

    def check_cancel(self) -> None:
        plan = self.plans[self.index]
        kept = f", {human_bytes(plan.have)} of {plan.file.filename} kept" if 0 < plan.have < plan.size else ""
        self.cancel.check(kept)

    def sleep(self, seconds: float) -> None:
        try:
            self.cancel.sleep(seconds)
        except DownloadCancelled:
            self.check_cancel()  # the same message, with what is kept
            raise

    def _emit(self, force: bool = False, stage: str = "downloading", verified: int = 0) -> None:
        now = time.monotonic()
        if self.progress is None or (not force and now - self._last_emit < PROGRESS_INTERVAL_S):
            return
        self._last_emit = now
        rate = self.meter.rate()
        left = self.total - self.done
        self.progress(
            DownloadProgress(
                filename=self.plans[self.index].file.filename,
                file_index=self.index,
                file_count=len(self.plans),
                done_bytes=self.done,
                total_bytes=self.total,
                rate_bytes_s=rate,
                eta_s=left / rate if rate > 0 else (0.0 if left <= 0 else None),
                stage=stage,
                verified_bytes=verified,
            )
        )


# --- errors ------------------------------------------------------------------------------------


def hub_error(exc: BaseException, file: HubFile) -> DownloadError:
    """Turn what huggingface_hub, httpx2 or the disk raised into a one-line DownloadError.

    The hub answers a gated repo with 401 when no token was sent and 403 when the token's
    account has not accepted the licence (``X-Error-Code: GatedRepo`` either way).
    """
    repo, name, endpoint = file.repo_id, file.filename, constants.ENDPOINT
    login = "log in with `hf auth login` (or set HF_TOKEN)"
    page = f"{endpoint}/{repo}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError):
        if status == 403:
            msg = f"{repo} is a gated repo and your token has no access yet: accept its licence on {page}"
        else:
            msg = f"{repo} is a gated repo: accept its licence on {page} and {login}"
    elif isinstance(exc, RepositoryNotFoundError):
        msg = f"repository {repo} not found on {endpoint} (if it is private or gated, {login})"
    elif isinstance(exc, RevisionNotFoundError):
        msg = f"revision '{file.revision}' not found in {repo}"
    elif isinstance(exc, RemoteEntryNotFoundError):
        msg = f"{name} not found in {repo} (revision {file.revision})"
    elif isinstance(exc, HfHubHTTPError) and status in (401, 403):
        msg = f"{repo} refused access (HTTP {status}): {login} and accept its licence on {page}"
    elif isinstance(exc, HfHubHTTPError):
        msg = f"the hub answered HTTP {status} for {name} in {repo}; try again later"
    elif isinstance(exc, OfflineModeIsEnabled):
        return HubUnreachableError(f"{name} is not in the cache and HF_HUB_OFFLINE is set")
    elif isinstance(exc, FileMetadataError):
        msg = f"{endpoint} did not answer like a Hugging Face hub for {name} (check HF_ENDPOINT and proxies)"
    elif isinstance(exc, httpx2.HTTPError | ConnectionError):
        return HubUnreachableError(f"cannot reach {endpoint} for {name} ({type(exc).__name__}); "
                                   "check the connection and try again")
    elif isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        msg = f"disk full while writing {name}; free some space and try again (the download resumes)"
    elif isinstance(exc, OSError) and exc.errno is not None:
        where = f" ({exc.filename})" if exc.filename else ""
        msg = f"cannot write {name} to the cache{where}: {exc.strerror or exc}"
    else:
        msg = f"{name}: {exc}"
    return DownloadError(_one_line(msg))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def human_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
