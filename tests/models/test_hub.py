"""The hub download job, against a local hub (tests/helpers/hub_server.py) serving the real test models."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

import test_models
from helpers.hub_server import COMMIT
from specchat.cancel import CancelToken
from specchat.models import hub as hub_module
from specchat.models.compatibility import check_pair
from specchat.models.hub import DownloadCancelled, DownloadError, HubFile, download_files

MiB = 1 << 20
CHUNK = constants.DOWNLOAD_CHUNK_SIZE  # http_get reads (and writes) the body in chunks of this size


def size_of(name: str) -> int:
    return test_models.MODELS[name].size


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def storage(cache: Path, file: HubFile) -> Path:
    return cache / ("models--" + file.repo_id.replace("/", "--"))


def partial_of(cache: Path, name: str, file: HubFile) -> Path:
    return storage(cache, file) / "blobs" / f"{test_models.MODELS[name].sha256}.incomplete"


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


# --- the paths a user takes ----------------------------------------------------------------------


def test_a_pair_downloads_as_one_job_into_the_standard_hub_cache(hub, hub_files, hf_cache):
    names = ["qwen-0.5b", "smollm2-135m"]
    files = [hub_files[n] for n in names]

    paths = download_files(files, cache_dir=hf_cache)

    for name, file, path in zip(names, files, paths, strict=True):
        model = test_models.MODELS[name]
        # the layout huggingface_hub and every tool built on it use: snapshot link -> blob named by sha256
        assert path == storage(hf_cache, file) / "snapshots" / COMMIT / model.filename
        assert path.resolve() == storage(hf_cache, file) / "blobs" / model.sha256
        assert (storage(hf_cache, file) / "refs" / "main").read_text() == COMMIT
        assert try_to_load_from_cache(file.repo_id, file.filename, cache_dir=hf_cache) == str(path)
        assert path.stat().st_size == model.size and sha256_of(path) == model.sha256
        assert hub.sent(file.repo_id, file.filename) == model.size  # fetched exactly once
    assert not list(hf_cache.rglob("*.incomplete"))


def test_progress_covers_the_whole_job_monotonic_and_throttled(hub, hub_files, hf_cache):
    names = ["qwen-0.5b", "smollm2-135m"]
    files = [hub_files[n] for n in names]
    events = []
    start = time.monotonic()

    download_files(files, progress=events.append, cache_dir=hf_cache)

    elapsed = time.monotonic() - start
    total = sum(size_of(n) for n in names)
    done = [e.done_bytes for e in events]
    assert all(e.total_bytes == total and e.file_count == 2 for e in events)
    assert done[0] == 0 and done == sorted(done) and done[-1] == total
    assert [e.file_index for e in events] == sorted(e.file_index for e in events)  # file 0, then file 1
    assert {(e.file_index, e.filename) for e in events} == {(i, f.filename) for i, f in enumerate(files)}
    # ~10 a second at most, plus one at the start and the end of each file
    assert len(events) <= elapsed * 10 + 2 * len(files) + 1
    moving = [e for e in events if 0 < e.done_bytes < total and e.rate_bytes_s > 0]
    assert moving, "no progress reported while bytes were moving"
    for e in moving:
        assert e.eta_s == pytest.approx((total - e.done_bytes) / e.rate_bytes_s)
    assert events[-1].eta_s == 0


def test_a_pair_already_in_the_cache_is_reused_without_transfer(hub, hub_files, hf_cache):
    files = [hub_files["qwen-0.5b"], hub_files["smollm2-135m"]]
    first = download_files(files)  # default cache_dir: huggingface_hub's (HF_HUB_CACHE, set by the fixture)
    assert all(p.is_relative_to(hf_cache) for p in first)
    hub.reset()
    events = []

    second = download_files(files, progress=events.append)

    assert second == first
    assert hub.total_sent() == 0 and not any(r.method == "GET" for r in hub.requests)
    total = sum(size_of(n) for n in ("qwen-0.5b", "smollm2-135m"))
    assert [e.done_bytes for e in events] == [total] * len(events)  # done from the first report


@pytest.mark.slow
def test_the_real_qwen_pair_downloads_and_is_a_compatible_pair(hub, hub_files, hf_cache):
    """The full 1.6 GB target + draft, as a user pulls it; slow but part of every run."""
    target, draft = hub_files["qwen-1.5b"], hub_files["qwen-0.5b"]

    target_path, draft_path = download_files([target, draft], cache_dir=hf_cache)

    assert sha256_of(target_path) == test_models.MODELS["qwen-1.5b"].sha256
    assert sha256_of(draft_path) == test_models.MODELS["qwen-0.5b"].sha256
    assert hub.total_sent() == size_of("qwen-1.5b") + size_of("qwen-0.5b")
    assert check_pair(target_path, draft_path).compatible


# --- interruptions -----------------------------------------------------------------------------


def test_a_download_killed_halfway_resumes_from_the_partial_file(hub, hub_files, hf_cache, tmp_path):
    """A real process is killed mid-download; the next call continues at the byte it reached."""
    name, file = "qwen-0.5b", hub_files["qwen-0.5b"]
    size = size_of(name)
    release = hub.hold_next_get_after(size // 2)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from specchat.models.hub import HubFile, download_files
        download_files([HubFile({file.repo_id!r}, {file.filename!r})], cache_dir=Path({str(hf_cache)!r}))
    """)
    log = (tmp_path / "child.log").open("w")
    env = {**os.environ, "HF_HUB_DOWNLOAD_TIMEOUT": "60"}  # the held GET must not time out and retry
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=log, stderr=log)
    partial = partial_of(hf_cache, name, file)
    try:
        deadline = time.monotonic() + 60
        while hub.sent(file.repo_id, file.filename) < size // 2:  # the server holds here
            assert child.poll() is None, (tmp_path / "child.log").read_text()
            assert time.monotonic() < deadline, "the child never got half the file"
            time.sleep(0.02)
        # wait for the child to write what it has (it writes whole chunks), well inside its 10 s read timeout
        while not partial.exists() or partial.stat().st_size < size // 2 - CHUNK:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        child.kill()
        child.wait()
        release.set()
    have = partial.stat().st_size
    assert size // 2 - CHUNK <= have <= size // 2

    (path,) = download_files([file], cache_dir=hf_cache)

    first, resumed = hub.gets(file.repo_id, file.filename)
    assert first.range is None and resumed.range == f"bytes={have}-" and resumed.status == 206
    assert resumed.sent == size - have
    assert hub.sent(file.repo_id, file.filename) <= size + CHUNK  # not fetched twice: what was lost is < a chunk
    assert sha256_of(path) == test_models.MODELS[name].sha256
    assert not partial.exists()


def test_a_dropped_connection_is_resumed_within_the_same_call(hub, hub_files, hf_cache):
    name, file = "smollm2-135m", hub_files["smollm2-135m"]
    size = size_of(name)
    hub.drop_next_get_after(size // 2)

    (path,) = download_files([file], cache_dir=hf_cache)

    cut, resumed = hub.gets(file.repo_id, file.filename)
    assert cut.sent == size // 2
    offset = int(resumed.range.removeprefix("bytes=").removesuffix("-"))
    assert size // 2 - CHUNK <= offset <= size // 2 and resumed.sent == size - offset
    assert sha256_of(path) == test_models.MODELS[name].sha256


def test_cancel_raises_keeps_the_partial_file_and_a_later_call_resumes(hub, hub_files, hf_cache):
    name, file = "smollm2-135m", hub_files["smollm2-135m"]
    size = size_of(name)
    partial = partial_of(hf_cache, name, file)
    # The hub holds the body after 4 chunks until the test ends, so the cancel always lands
    # mid-file whatever the machine's load: no race between the cancel and the last byte.
    release = hub.hold_next_get_after(4 * CHUNK)
    received = []

    cancel = CancelToken()

    def cancel_at_three_chunks() -> None:  # the hub holds at four, so this always comes first
        while not (partial.exists() and partial.stat().st_size >= 3 * CHUNK) and not release.is_set():
            time.sleep(0.01)
        cancel.cancel()

    watcher = threading.Thread(target=cancel_at_three_chunks, daemon=True)
    watcher.start()
    try:
        with pytest.raises(DownloadCancelled) as cancelled:
            download_files([file], cancel=cancel, progress=received.append, cache_dir=hf_cache)
    finally:
        release.set()
        watcher.join(5)

    assert "cancelled" in one_line(cancelled) and "kept" in one_line(cancelled)
    assert received, "progress was reported before the cancel"
    have = partial.stat().st_size
    # what arrived before the cancel was seen is kept, and the next call asks only for the rest
    assert 3 * CHUNK <= have <= 4 * CHUNK < size
    assert not (storage(hf_cache, file) / "snapshots").exists()

    (path,) = download_files([file], cache_dir=hf_cache)

    assert hub.gets(file.repo_id, file.filename)[-1].range == f"bytes={have}-"
    assert sha256_of(path) == test_models.MODELS[name].sha256 and not partial.exists()


def test_hf_hub_download_alone_restarts_from_zero_after_an_interruption(hub, hub_files, hf_cache):
    """Why hub.py fetches blobs itself: huggingface_hub 2.x deletes its partial file on failure.

    If this starts failing, huggingface_hub resumes across calls again and hub.py could
    hand the whole download back to hf_hub_download.
    """
    file = hub_files["smollm2-135m"]

    class StopAfterThreeChunks:
        def __init__(self, **kwargs: object) -> None:
            self.n = 0

        def update(self, n: int) -> None:
            self.n += n
            if self.n > 3 * CHUNK:
                raise KeyboardInterrupt  # what a user's Ctrl+C looks like to the library

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    with pytest.raises(KeyboardInterrupt):
        hf_hub_download(file.repo_id, file.filename, cache_dir=hf_cache, tqdm_class=StopAfterThreeChunks)
    assert not list(hf_cache.rglob("*.incomplete"))  # the 30 MiB it had are gone
    hf_hub_download(file.repo_id, file.filename, cache_dir=hf_cache)

    first, second = hub.gets(file.repo_id, file.filename)
    assert first.sent > 3 * CHUNK and second.range is None and second.sent == size_of("smollm2-135m")


# --- what must not end up in the cache, and the one-line refusals ---------------------------------


def test_a_corrupted_download_is_caught_by_its_hash_and_removed(hub, hub_files, hf_cache):
    name, file = "smollm2-135m", hub_files["smollm2-135m"]
    hub.corrupt(file.repo_id, file.filename)  # one byte flipped; same size, same etag

    with pytest.raises(DownloadError) as bad:
        download_files([file], cache_dir=hf_cache)

    message = one_line(bad)
    assert "sha256 mismatch" in message and "removed" in message and "download again" in message
    assert not [p for p in storage(hf_cache, file).rglob("*") if p.is_file() or p.is_symlink()]
    assert try_to_load_from_cache(file.repo_id, file.filename, cache_dir=hf_cache) is None

    hub.corrupt(file.repo_id, file.filename, on=False)
    (path,) = download_files([file], cache_dir=hf_cache)
    assert sha256_of(path) == test_models.MODELS[name].sha256


def test_a_file_that_changed_on_the_hub_is_refused_before_download(hub, hub_files, hf_cache):
    pinned = HubFile(hub_files["qwen-0.5b"].repo_id, hub_files["qwen-0.5b"].filename, sha256="ab" * 32)

    with pytest.raises(DownloadError) as changed:
        download_files([pinned], cache_dir=hf_cache)

    assert "has changed on the hub" in one_line(changed)
    assert hub.total_sent() == 0


def test_a_gated_repo_says_how_to_log_in_and_a_granted_token_gets_through(hub, hub_files, hf_cache):
    file = hub_files["smollm2-135m"]
    hub.gate(file.repo_id, allowed_tokens=("hf_granted",))

    with pytest.raises(DownloadError) as anonymous:
        download_files([file], cache_dir=hf_cache)
    with pytest.raises(DownloadError) as not_granted:
        download_files([file], cache_dir=hf_cache, token="hf_other")

    message = one_line(anonymous)
    assert "gated" in message and "hf auth login" in message and "HF_TOKEN" in message
    assert f"accept its licence on {hub.url}/{file.repo_id}" in message
    assert "no access" in one_line(not_granted)
    assert hub.total_sent() == 0
    (path,) = download_files([file], cache_dir=hf_cache, token="hf_granted")
    assert path.stat().st_size == size_of("smollm2-135m")


def test_missing_repo_file_or_revision_are_named(hub, hub_files, hf_cache):
    real = hub_files["smollm2-135m"]
    cases = {
        HubFile("nobody/nothing-GGUF", "x.gguf"): "repository nobody/nothing-GGUF not found",
        HubFile(real.repo_id, "missing.gguf"): f"missing.gguf not found in {real.repo_id}",
        HubFile(real.repo_id, real.filename, revision="v9"): f"revision 'v9' not found in {real.repo_id}",
    }
    for file, expected in cases.items():
        with pytest.raises(DownloadError) as missing:
            download_files([file], cache_dir=hf_cache)
        assert expected in one_line(missing)


def test_not_enough_disk_space_is_refused_before_any_transfer(hub, hub_files, hf_cache, monkeypatch):
    files = [hub_files["qwen-0.5b"], hub_files["smollm2-135m"]]
    real_disk_usage = shutil.disk_usage
    free = 100_000_000
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real_disk_usage(p)._replace(free=free))

    with pytest.raises(DownloadError) as short:
        download_files(files, cache_dir=hf_cache)

    assert one_line(short) == (
        f"not enough disk space in {hf_cache}: the download needs 589.8 MB, 100.0 MB free"
    )
    assert hub.total_sent() == 0
    # only what is missing counts: a cached file needs no space at all
    monkeypatch.setattr(shutil, "disk_usage", real_disk_usage)
    download_files(files[1:], cache_dir=hf_cache)
    free = 0
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real_disk_usage(p)._replace(free=free))
    assert download_files(files[1:], cache_dir=hf_cache)[0].exists()


def test_a_full_disk_during_the_write_gives_one_line_and_keeps_what_was_written(hub, hub_files, hf_cache, monkeypatch):
    name, file = "smollm2-135m", hub_files["smollm2-135m"]
    room = 2 * CHUNK

    class FullDisk:
        """The partial file, on a disk that fills up after ``room`` bytes."""

        def __init__(self, path: Path) -> None:
            self.f = path.open("ab")

        def write(self, data: bytes) -> int:
            fits = room - self.f.tell()
            if len(data) > fits:  # like a real disk: what fits is written, then ENOSPC
                self.f.write(data[:fits])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)

        def __getattr__(self, attr: str):
            return getattr(self.f, attr)

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

    monkeypatch.setattr(hub_module, "_open_partial", FullDisk)

    with pytest.raises(DownloadError) as full:
        download_files([file], cache_dir=hf_cache)

    assert one_line(full).startswith(f"disk full while writing {file.filename}")
    assert partial_of(hf_cache, name, file).stat().st_size == room


def test_without_the_hub_a_cached_file_is_still_served(hub, hub_files, hf_cache, monkeypatch):
    cached, missing = hub_files["smollm2-135m"], hub_files["qwen-0.5b"]
    (path,) = download_files([cached], cache_dir=hf_cache)
    # nothing listens on port 9 (discard) of 127.0.0.1 here: the hub is unreachable
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}")

    assert download_files([cached], cache_dir=hf_cache) == [path]
    with pytest.raises(DownloadError) as offline:
        download_files([missing], cache_dir=hf_cache)
    assert "cannot reach" in one_line(offline)
