"""Hub and remote reads against a hostile or broken server: small generated files, fast tier.

The local hub (tests/helpers/hub_server.py) serves a few kB GGUF written with the gguf
package, a text file, and files built to hurt: a header that claims a string of
megabytes, a sparse multi-GB file.  Its hostile switches trickle bytes, stall, ignore
Range, send huge error pages and craft ETags and commits.  Limits are passed small
(deadlines of a fraction of a second), so every test here takes about a second.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_url

from helpers.hub_server import FAKE_SHA, REPO, HubServer, serve_small_files
from specchat.cancel import CancelToken
from specchat.models.catalog import CatalogError, CatalogModel
from specchat.models.gguf_header import GGUFError
from specchat.models.hub import DownloadCancelled, DownloadError, DownloadProgress, HubFile, download_files
from specchat.models.hub_names import HubNameError
from specchat.models.remote import MAX_CHUNK, RangeReader, header_cap, read_remote_header

MiB = 1 << 20


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@pytest.fixture
def small_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with serve_small_files(tmp_path, monkeypatch) as server:
        yield server


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-home" / "hub"


def url(filename: str) -> str:
    return hf_hub_url(REPO, filename)


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


# --- remote header reads: bounded in bytes, requests and time ----------------------------------------


def test_a_huge_read_is_fetched_in_bounded_ranges(small_hub):
    size = small_hub.files[(REPO, "huge-string.gguf")].size
    reader = RangeReader(url("huge-string.gguf"), size=size)

    got = reader.read(1 << 30)  # what a header claiming a 1 GB string asks for

    assert 0 < len(got) <= MAX_CHUNK
    assert len(small_hub.requests) == 1 and span(small_hub.requests[0].range) <= MAX_CHUNK  # one bounded GET, not 1 GB


def span(range_header: str) -> int:
    first, last = range_header.removeprefix("bytes=").split("-")
    return int(last) - int(first) + 1


def test_a_header_needing_more_than_the_cap_stops_at_the_cap(small_hub):
    with pytest.raises(DownloadError) as capped:
        read_remote_header(HubFile(REPO, "huge-string.gguf"), cap_bytes=MiB)

    assert one_line(capped) == (f"reading the header of {REPO}/huge-string.gguf stopped after 1 MiB "
                                "(the cap; a GGUF header is rarely over 10 MiB)")
    # the server counts a block once its write returns, which can be after the client has it all
    _wait_for(lambda: small_hub.total_sent() >= MiB, "the server counted what it sent", timeout=5)
    assert small_hub.total_sent() == MiB
    assert all(span(r.range) <= MAX_CHUNK for r in small_hub.gets(REPO, "huge-string.gguf"))


def test_the_cap_is_5_percent_of_the_file_with_a_16_mib_floor():
    assert header_cap(None) == 64 * MiB  # size unknown: the setting
    assert header_cap(10 * MiB) == 16 * MiB  # a small file: the floor (its whole self)
    assert header_cap(1000 * MiB) == 50 * MiB  # 5%
    assert header_cap(10_000 * MiB) == 64 * MiB  # never over the setting
    assert header_cap(10_000 * MiB, cap=8 * MiB) == 8 * MiB  # a lower setting lowers the floor too


def test_a_trickling_server_is_given_up_at_the_deadline(small_hub):
    small_hub.trickle_s = 0.02  # a byte every 20 ms: never a stall, never an end
    start = time.monotonic()

    with pytest.raises(DownloadError) as slow:
        read_remote_header(HubFile(REPO, "tiny.gguf"), deadline_s=0.5, stall_s=5)

    assert one_line(slow).startswith(f"reading the header of {REPO}/tiny.gguf took over 0.5 s")
    assert time.monotonic() - start < 5  # instead of the minutes the trickle would take


def test_a_server_that_sends_nothing_is_given_up_after_the_stall_timeout(small_hub):
    small_hub.hold_next_get_after(0)  # headers, then silence

    with pytest.raises(DownloadError) as stalled:
        read_remote_header(HubFile(REPO, "tiny.gguf"), stall_s=0.5)

    assert one_line(stalled) == (f"reading the header of {REPO}/tiny.gguf: the server sent nothing for 0.5 s; "
                                 "try again later")


def test_a_hub_that_never_answers_the_head_is_given_up_at_the_deadline(small_hub):
    small_hub.hold_heads()
    start = time.monotonic()

    with pytest.raises(DownloadError) as silent:
        read_remote_header(HubFile(REPO, "tiny.gguf"), deadline_s=0.5, stall_s=30)

    assert one_line(silent) == f"{REPO}/tiny.gguf: the hub did not answer within 0.5 s; try again"
    assert time.monotonic() - start < 5  # not the 30 s read timeout


def test_a_huge_error_page_is_read_only_in_part(small_hub):
    small_hub.error_body = 512 * MiB

    with pytest.raises(DownloadError) as failed:
        read_remote_header(HubFile(REPO, "tiny.gguf"))

    assert "HTTP 500" in one_line(failed) and "tiny.gguf" in one_line(failed)
    assert small_hub.total_sent() < 64 * MiB  # 64 KiB read; the rest is what socket buffers took


def test_a_server_ignoring_range_cannot_turn_the_check_into_a_download(small_hub):
    small_hub.ignore_range = True
    size = small_hub.files[(REPO, "huge-string.gguf")].size
    reader = RangeReader(url("huge-string.gguf"), size=size, first_chunk=1024)

    assert len(reader.read(1024)) == 1024  # the first range: the start of the file either way
    with pytest.raises(DownloadError) as ignored:
        reader.read(1024)

    assert "ignores range requests" in one_line(ignored)
    assert reader.bytes_fetched == 1024


def test_a_file_that_is_not_gguf_is_named_by_its_hub_reference(small_hub):
    with pytest.raises(GGUFError) as text:
        read_remote_header(HubFile(REPO, "notes.gguf"))

    assert one_line(text) == f"{REPO}/notes.gguf: not a GGUF file (bad magic)"


# --- names from outside never become paths --------------------------------------------------------


@pytest.mark.parametrize("crafted", [{"etag": "../../../../escaped"}, {"commit": "../../../escaped"},
                                     {"etag": "a" * 64 + "/../../escaped"}])
def test_a_crafted_etag_or_commit_never_becomes_a_path(small_hub, cache, tmp_path, crafted):
    small_hub.craft(REPO, "tiny.gguf", **crafted)

    with pytest.raises(DownloadError) as refused:
        download_files([HubFile(REPO, "tiny.gguf")], cache_dir=cache)

    message = one_line(refused)
    assert message.startswith(f"{REPO}/tiny.gguf: the hub answered an unexpected") and "refusing" in message
    assert not [p for p in tmp_path.rglob("*escaped*")]
    assert not small_hub.gets(REPO, "tiny.gguf")  # refused before any byte moved


@pytest.mark.parametrize("repo, filename", [("test/repo", "../x.gguf"), ("test/repo", "/etc/x.gguf"),
                                            ("test/repo", "a/../../x.gguf"), ("../..", "x.gguf"),
                                            ("/abs", "x.gguf"), ("test/repo", "a\\..\\x.gguf"),
                                            ("test/repo", "a//x.gguf"), ("test/repo", "x\n.gguf")])
def test_a_hub_file_that_could_leave_the_cache_cannot_be_made(repo, filename):
    with pytest.raises(HubNameError):
        HubFile(repo, filename)


@pytest.mark.parametrize("ref", ["/home/me/model.gguf", "~/model.gguf", "../a/b/model.gguf", "a/../b/model.gguf",
                                 "owner/repo/../../model.gguf", "owner\\repo\\model.gguf", "owner//model.gguf",
                                 "owner/repo//model.gguf", "owner/repo/", "owner/repo:/etc/x.gguf",
                                 "owner/repo/a\tb.gguf", ""])
def test_a_reference_that_is_a_path_is_refused_in_one_line(ref):
    with pytest.raises(CatalogError) as refused:
        CatalogModel.parse(ref)

    assert "expected owner/repo/file.gguf" in one_line(refused)


def test_a_good_reference_parses():
    assert CatalogModel.parse("owner/repo/sub/model.gguf") == CatalogModel("owner/repo", "sub/model.gguf")
    assert CatalogModel.parse("owner/repo:model.gguf") == CatalogModel("owner/repo", "model.gguf")


# --- downloads: stalls, ignored ranges, cancel in every state ---------------------------------------


def test_a_stalled_download_is_asked_again_from_where_it_stopped(small_hub, cache):
    file = HubFile(REPO, "two-mib.gguf")
    small_hub.hold_next_get_after(MiB)

    (path,) = download_files([file], cache_dir=cache, stall_timeout_s=0.5)

    held, resumed = small_hub.gets(REPO, "two-mib.gguf")
    assert held.sent == MiB and resumed.range == f"bytes={MiB}-"
    assert sha256_of(path) == small_hub.files[(REPO, "two-mib.gguf")].sha256


def test_a_server_that_ignores_range_on_resume_restarts_the_file_cleanly(small_hub, cache):
    served = small_hub.files[(REPO, "two-mib.gguf")]
    blobs = cache / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{served.sha256}.incomplete").write_bytes(served.path.read_bytes()[:MiB])
    small_hub.ignore_range = True  # answers the resume's Range with 200 and the whole file

    (path,) = download_files([HubFile(REPO, "two-mib.gguf")], cache_dir=cache)

    (get,) = small_hub.gets(REPO, "two-mib.gguf")
    assert get.range == f"bytes={MiB}-" and get.status == 200
    assert sha256_of(path) == served.sha256  # not the first MiB twice


def _download_in_thread(files: list[HubFile], cache: Path, cancel: CancelToken,
                        progress=None) -> tuple[threading.Thread, list[BaseException]]:  # noqa: ANN001
    raised: list[BaseException] = []

    def run() -> None:
        try:
            download_files(files, cache_dir=cache, cancel=cancel, progress=progress)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def _wait_for(condition, what: str, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("state", ["stalled GET", "stalled HEAD"])
def test_cancel_is_seen_while_the_server_sends_nothing(small_hub, cache, state):
    if state == "stalled GET":
        small_hub.hold_next_get_after(0)
    else:
        small_hub.hold_heads()
    cancel = CancelToken()
    thread, raised = _download_in_thread([HubFile(REPO, "two-mib.gguf")], cache, cancel)
    if state == "stalled GET":
        _wait_for(lambda: small_hub.gets(REPO, "two-mib.gguf"), "the GET reached the server")
    time.sleep(0.3)  # well into the silence (a held HEAD is not logged until it is answered)

    cancel.cancel()
    thread.join(timeout=2)

    assert not thread.is_alive(), f"cancel not seen within 2 s during a {state}"
    assert len(raised) == 1 and isinstance(raised[0], DownloadCancelled), raised


def test_cancel_is_seen_while_a_large_file_is_hashed(small_hub, cache):
    served = small_hub.files[(REPO, "sparse.gguf")]
    blobs = cache / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / f"{FAKE_SHA}.incomplete"
    with partial.open("wb") as f:
        f.truncate(served.size)  # complete, so the job goes straight to the sha256 check
    seen: list[DownloadProgress] = []
    cancel = CancelToken()
    thread, raised = _download_in_thread([HubFile(REPO, "sparse.gguf")], cache, cancel, progress=seen.append)
    _wait_for(lambda: any(p.stage == "verifying" for p in seen), "verifying reported")

    cancel.cancel()
    thread.join(timeout=2)

    assert not thread.is_alive(), "cancel not seen within 2 s while hashing"
    assert isinstance(raised[0], DownloadCancelled)
    assert partial.stat().st_size == served.size  # kept: the next call verifies it again, no transfer
    assert not small_hub.gets(REPO, "sparse.gguf")


def test_cancel_is_seen_while_another_process_holds_the_blob_lock(small_hub, cache):
    import filelock

    sha = small_hub.files[(REPO, "two-mib.gguf")].sha256
    lock_path = cache / ".locks" / f"models--{REPO.replace('/', '--')}" / f"{sha}.lock"
    lock_path.parent.mkdir(parents=True)
    other = filelock.FileLock(str(lock_path))  # another download of the same blob (the hf CLI, a second window)
    other.acquire()
    try:
        cancel = CancelToken()
        thread, raised = _download_in_thread([HubFile(REPO, "two-mib.gguf")], cache, cancel)
        _wait_for(lambda: any(r.method == "HEAD" for r in small_hub.requests), "the HEAD was answered")
        time.sleep(0.5)  # waiting for the lock now

        cancel.cancel()
        thread.join(timeout=2)
    finally:
        other.release()

    assert not thread.is_alive(), "cancel not seen within 2 s while waiting for the lock"
    assert isinstance(raised[0], DownloadCancelled)
    assert not small_hub.gets(REPO, "two-mib.gguf")
