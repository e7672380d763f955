"""Download model files from the Hugging Face hub into the user's hub cache, as one job.

A model pair (target + draft, maybe more files) is one job: one progress bar over all
bytes, one free-space check up front, one cancel.  Files go into the ordinary
huggingface_hub cache (``~/.cache/huggingface/hub`` unless told otherwise), so a file
the user already has, from this app or any other, is reused and not fetched again.

Why not just ``hf_hub_download``: since huggingface_hub 1.x it writes each download to a
process-unique temporary file and deletes it on any failure (huggingface_hub PR #4228),
so a download that is cancelled, killed or loses the network starts from zero next
time.  It does retry a dropped connection with a Range request inside one call, but a
1 GB model on a flaky link, or one the user pauses, must resume across calls and
processes.  So this module fetches the blob itself, still with huggingface_hub's
machinery (``get_hf_file_metadata`` for the HEAD, ``http_get`` for the GET with its
retries and Range handling, ``WeakFileLock`` against a second writer), into the stable
name ``blobs/<etag>.incomplete`` (the name huggingface_hub used before 1.0, so either
resumes the other's partial file).  Once the bytes are complete and their sha256 checks
out, the file is renamed to ``blobs/<etag>`` and ``hf_hub_download`` is called to create
the snapshot link exactly as it always does; it finds the blob and transfers nothing.

Every failure the user can cause or fix (gated repo, missing file, no network, full
disk, corrupt bytes) becomes a :class:`DownloadError` whose message is one line.
:func:`hub_error` does that mapping; :mod:`specchat.models.remote` shares it.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import (
    constants,
    get_hf_file_metadata,
    hf_hub_download,
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
from huggingface_hub.file_download import http_get, repo_folder_name
from huggingface_hub.utils import WeakFileLock, build_hf_headers

from specchat.errors import UserError

PROGRESS_INTERVAL_S = 0.1  # at most ~10 progress callbacks a second
RATE_WINDOW_S = 5.0  # the rate is measured over the last few seconds, so a stall shows
_SHA256 = re.compile(r"[0-9a-f]{64}")

# What the hub client raises for problems of the network, the hub or the disk.  HfHubHTTPError,
# OfflineModeIsEnabled and FileMetadataError are OSErrors too; transport errors are httpx2's.
HUB_ERRORS: tuple[type[BaseException], ...] = (OSError, httpx2.HTTPError)


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file in a hub repo, with what the catalog knows about it in advance."""

    repo_id: str
    filename: str
    revision: str = "main"
    sha256: str | None = None  # expected, if known
    size: int | None = None  # expected, if known


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


class DownloadError(UserError):
    """A download failed for a reason the user can act on; the message is one line for the user."""


class DownloadCancelled(DownloadError):
    """The user cancelled; the partial file stays in the cache and the next call resumes it."""


def download_files(
    files: Sequence[HubFile],
    *,
    progress: Callable[[DownloadProgress], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    cache_dir: Path | None = None,
    token: str | None = None,
) -> list[Path]:
    """Download ``files`` as one job into the hub cache; return their local paths, in order.

    Files already in the cache are reused without transferring a byte; partial files left
    by an earlier cancelled or interrupted call are resumed.  Before any byte moves, every
    file's size and etag are asked from the hub and the job is refused if the cache's disk
    lacks the bytes still missing.  ``should_cancel`` is polled as data arrives (every
    10 MiB chunk that huggingface_hub reads); ``progress`` gets at most ~10 calls a second
    plus one at the start and end of each file.  ``token`` None means huggingface_hub's
    own (``hf auth login`` or HF_TOKEN).  Raises DownloadError (DownloadCancelled on
    cancel) with a one-line message.
    """
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    current: HubFile | None = files[0] if files else None
    try:
        plans = []
        for file in files:
            current = file
            plans.append(_plan(file, cache, token))
        _check_free_space(plans, cache)
        job = _Job(plans, progress, should_cancel)
        paths = []
        for index, plan in enumerate(plans):
            current = plan.file
            job.start_file(index)
            if plan.local_path is None:
                if not plan.blob.exists():
                    _fetch_blob(plan, cache, job)
                plan.local_path = _link_snapshot(plan, cache, job, token)
            job.end_file()
            paths.append(plan.local_path)
        return paths
    except DownloadError:
        raise
    except HUB_ERRORS as exc:
        assert current is not None  # an error needs a file to have been worked on
        raise hub_error(exc, current) from None


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
    blob: Path = Path()
    pointer: Path = Path()

    @property
    def partial(self) -> Path:
        return self.blob.with_name(self.blob.name + ".incomplete")


def _plan(file: HubFile, cache: Path, token: str | None) -> _Plan:
    url = hf_hub_url(file.repo_id, file.filename, revision=file.revision)
    try:
        meta = get_hf_file_metadata(url, token=token)
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
    if meta.size is None:
        raise FileMetadataError(f"{url}: no file size in the answer")
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


def _open_partial(path: Path) -> BinaryIO:
    """Open the partial file for appending (a seam for the tests' full-disk simulation)."""
    return path.open("ab")


def _fetch_blob(plan: _Plan, cache: Path, job: _Job) -> None:
    """Download into ``blobs/<etag>.incomplete``, resuming what is there, verify, rename to the blob."""
    # huggingface_hub's own lock file for this blob: two downloads of it (two app windows, or this
    # app and the hf CLI) never write at once, and a killed process's lock dies with it.
    lock = cache / ".locks" / repo_folder_name(repo_id=plan.file.repo_id, repo_type="model") / f"{plan.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    plan.blob.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):
        if plan.blob.exists():  # another process finished it while we waited
            return
        with _open_partial(plan.partial) as f:
            job.resume_at(f.tell())
            # http_get sends Range: bytes=<resume_size>- and appends; on a dropped connection it
            # retries from where it got to, on its own, up to five times in a row without progress.
            http_get(
                plan.url,
                f,
                resume_size=f.tell(),
                headers=plan.headers,
                expected_size=plan.size,
                displayed_filename=plan.file.filename,
                # typed as a tqdm subclass, used duck-typed: called with tqdm's keywords, then update(n)
                tqdm_class=job.progress_sink,  # type: ignore[arg-type]
            )
        _verify(plan)
        os.replace(plan.partial, plan.blob)


def _verify(plan: _Plan) -> None:
    """Check the finished partial file's sha256; delete it on a mismatch so nothing bad is cached.

    The expected hash is the catalog's, else the etag when it is a sha256 (the hub's etag
    of an LFS file, which every GGUF is, is the sha256 of its content).  Small git files
    have a git sha1 etag and are only checked for size (by http_get).
    """
    expected = (plan.file.sha256 or (plan.etag if _SHA256.fullmatch(plan.etag) else "")).lower()
    if not expected:
        return
    with plan.partial.open("rb") as f:
        actual = hashlib.file_digest(f, "sha256").hexdigest()
    if actual != expected:
        plan.partial.unlink()
        raise DownloadError(
            f"{plan.file.filename}: sha256 mismatch ({actual[:12]}…, expected {expected[:12]}…), "
            "the file was removed; download again"
        )


def _link_snapshot(plan: _Plan, cache: Path, job: _Job, token: str | None) -> Path:
    """Let huggingface_hub create ``snapshots/<commit>/<filename>`` for the blob now in place.

    Asked for the exact commit the HEAD answered, hf_hub_download finds the blob and only
    links it (no second download even if the branch moved meanwhile).  The branch ref
    (``refs/main``) is written here, as hf_hub_download would for a branch name, so other
    tools and offline lookups find the file by revision name too.
    """
    # tqdm_class is typed as a tqdm subclass, used duck-typed (see _Job.progress_sink); the
    # mismatch shows as no overload matching
    path = hf_hub_download(  # type: ignore[call-overload]
        plan.file.repo_id,
        plan.file.filename,
        revision=plan.commit,
        cache_dir=cache,
        token=token,
        tqdm_class=job.progress_sink,
    )
    if plan.file.revision != plan.commit:
        ref = plan.blob.parent.parent / "refs" / plan.file.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        if not ref.exists() or ref.read_text() != plan.commit:
            ref.write_text(plan.commit)
    return Path(path)


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
        should_cancel: Callable[[], bool] | None,
    ) -> None:
        self.plans, self.progress, self.should_cancel = plans, progress, should_cancel
        self.total = sum(p.size for p in plans)
        self.done = sum(p.have for p in plans)
        self.index = 0
        self.meter = _RateMeter()
        self._last_emit = 0.0
        # what http_get takes as its tqdm_class: it calls it with tqdm's keyword arguments
        self.progress_sink = functools.partial(_ProgressSink, self)

    def start_file(self, index: int) -> None:
        self.index = index
        self._check_cancel()
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
        self._check_cancel()
        self._emit()

    def end_file(self) -> None:
        plan = self.plans[self.index]
        self.done += plan.size - plan.have
        plan.have = plan.size
        self._emit(force=True)

    def _check_cancel(self) -> None:
        if self.should_cancel is not None and self.should_cancel():
            plan = self.plans[self.index]
            kept = f", {human_bytes(plan.have)} of {plan.file.filename} kept" if 0 < plan.have < plan.size else ""
            raise DownloadCancelled(f"download cancelled{kept}; it resumes where it stopped")

    def _emit(self, force: bool = False) -> None:
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
            )
        )


class _ProgressSink:
    """Stands in for tqdm inside huggingface_hub's http_get: counts bytes, draws nothing.

    http_get creates it with tqdm's keyword arguments (total, initial, desc, unit, ...) and
    calls ``update(n)`` after each chunk it reads, before writing the chunk; raising
    DownloadCancelled there stops the GET and leaves the partial file consistent.
    """

    def __init__(self, job: _Job, **_tqdm_kwargs: Any) -> None:
        self.job = job

    def update(self, n: int | float = 1) -> None:
        self.job.add_bytes(int(n))

    def close(self) -> None:
        pass

    def __enter__(self) -> _ProgressSink:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


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
        msg = f"{name} is not in the cache and HF_HUB_OFFLINE is set"
    elif isinstance(exc, FileMetadataError):
        msg = f"{endpoint} did not answer like a Hugging Face hub for {name} (check HF_ENDPOINT and proxies)"
    elif isinstance(exc, httpx2.HTTPError | ConnectionError):
        msg = f"cannot reach {endpoint} for {name} ({type(exc).__name__}); check the connection and try again"
    elif isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        msg = f"disk full while writing {name}; free some space and try again (the download resumes)"
    elif isinstance(exc, OSError) and exc.errno is not None:
        where = f" ({exc.filename})" if exc.filename else ""
        msg = f"cannot write {name} to the cache{where}: {exc.strerror or exc}"
    elif "Consistency check failed" in str(exc):  # http_get: the body ended short after its retries
        msg = f"{name}: the connection kept breaking before the end of the file; try again (it resumes)"
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
