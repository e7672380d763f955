"""The download thread ends within 2 s of shutdown in every state: idle, a stalled server, hashing.

Closing the app calls ``DownloadService.shutdown()``, which must not wait on a thread
blocked in a socket read or in hashing a multi-GB file (it used to, for up to the read
timeout times the retries, or the whole hash).  Served by the local hub with small
generated files (tests/helpers/hub_server.py), so this is the fast tier.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.hub_server import FAKE_SHA, REPO, HubServer, serve_small_files
from specchat.models.hub import DownloadProgress, HubFile
from specchat.services.download import DownloadService

SHUTDOWN_BOUND_S = 2.0  # the brief's bound: the app exits within 2 s of close


@pytest.fixture
def small_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with serve_small_files(tmp_path, monkeypatch) as server:
        yield server


@pytest.fixture
def service(qtbot) -> Iterator[DownloadService]:  # noqa: ANN001 (pytest-qt's qtbot)
    downloads = DownloadService()
    yield downloads
    downloads.shutdown()  # again, for a test that failed before its own: ending twice is harmless


def _timed_shutdown(service: DownloadService) -> float:
    start = time.monotonic()
    service.shutdown()
    return time.monotonic() - start


def test_shutdown_when_idle_is_immediate(service):
    assert _timed_shutdown(service) < SHUTDOWN_BOUND_S


def test_shutdown_during_a_stalled_download_returns_within_2_s(qtbot, small_hub, service, tmp_path):
    small_hub.hold_next_get_after(0)  # headers sent, then no byte (until the test ends)
    service.start([HubFile(REPO, "two-mib.gguf")])
    qtbot.waitUntil(lambda: bool(small_hub.gets(REPO, "two-mib.gguf")), timeout=10_000)
    time.sleep(0.5)  # well into the silence

    assert _timed_shutdown(service) < SHUTDOWN_BOUND_S


def test_cancel_during_a_stalled_download_reports_cancelled_and_keeps_the_partial_file(qtbot, small_hub, service):
    small_hub.hold_next_get_after(1 << 20)  # the first MiB, then silence
    job = service.start([HubFile(REPO, "two-mib.gguf")])
    qtbot.waitUntil(lambda: small_hub.sent(REPO, "two-mib.gguf") >= 1 << 20, timeout=10_000)
    time.sleep(0.3)  # the client has written what arrived

    with qtbot.waitSignal(job.failed, timeout=int(SHUTDOWN_BOUND_S * 1000)) as failed:
        service.cancel()

    message, cancelled = failed.args
    assert cancelled and "cancelled" in message and "kept" in message
    (partial,) = _partials()
    assert partial.stat().st_size == 1 << 20  # the resume starts here


def _partials() -> list[Path]:
    from huggingface_hub import constants

    return list(Path(constants.HF_HUB_CACHE).rglob("*.incomplete"))


def test_shutdown_while_hashing_a_large_file_returns_within_2_s(qtbot, small_hub, service):
    from huggingface_hub import constants

    size = small_hub.files[(REPO, "sparse.gguf")].size
    blobs = Path(constants.HF_HUB_CACHE) / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    with (blobs / f"{FAKE_SHA}.incomplete").open("wb") as f:
        f.truncate(size)  # a complete 4 GiB partial file (sparse): the job goes straight to hashing it
    seen: list[DownloadProgress] = []
    service.start([HubFile(REPO, "sparse.gguf")]).yielded.connect(seen.append)
    qtbot.waitUntil(lambda: any(p.stage == "verifying" for p in seen), timeout=10_000)

    assert _timed_shutdown(service) < SHUTDOWN_BOUND_S
    assert (blobs / f"{FAKE_SHA}.incomplete").stat().st_size == size  # kept for the next try
