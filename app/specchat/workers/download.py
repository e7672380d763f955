"""The download thread: one job (a model pair) at a time, progress as signals, cancel any time.

A cancel is seen by the job within about a quarter of a second in every state: asking the
hub, waiting for another process's lock, a server that sends nothing, hashing a multi-GB
file (:mod:`specchat.models.hub` polls it; its blocking network reads run in daemon
threads of their own).  So :meth:`DownloadService.shutdown` returns within a second or
two, and the app exits, whatever the download is doing; the partial file stays for a
resume.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.models.hub import DownloadCancelled, DownloadError, DownloadProgress, HubFile, download_files

from .threads import end_thread, start_thread


class _DownloadWorker(QObject):
    progress = Signal(int, object)  # job id, DownloadProgress
    finished = Signal(int, object)  # job id, list[Path]
    failed = Signal(int, str, bool)  # job id, one-line message, cancelled?

    def __init__(self) -> None:
        super().__init__()
        self.cancel_flag = threading.Event()  # the current job's; cleared when the next one starts
        self.closing = threading.Event()  # the service's: set once, no job runs after it

    def should_cancel(self) -> bool:
        return self.cancel_flag.is_set() or self.closing.is_set()

    @Slot(int, object)
    def run(self, job: int, files: Sequence[HubFile]) -> None:
        self.cancel_flag.clear()
        try:
            paths = download_files(list(files), progress=lambda p: self.progress.emit(job, p),
                                   should_cancel=self.should_cancel)
        except DownloadCancelled as exc:
            self.failed.emit(job, str(exc), True)
        except DownloadError as exc:
            self.failed.emit(job, str(exc), False)
        except Exception as exc:  # never kill the app
            self.failed.emit(job, f"download failed: {exc}", False)
        else:
            self.finished.emit(job, [Path(p) for p in paths])


class DownloadService(QObject):
    """GUI-side handle of the download thread (not a widget; dialogs receive it)."""

    progress = Signal(int, object)
    finished = Signal(int, object)
    failed = Signal(int, str, bool)
    _run = Signal(int, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("specchat-download")
        self._worker = _DownloadWorker()
        self._worker.moveToThread(self._thread)
        self._thread.finished.connect(self._worker.deleteLater)  # deleted in its own thread
        self._run.connect(self._worker.run)
        self._worker.progress.connect(self.progress)
        self._worker.finished.connect(self._done)
        self._worker.failed.connect(self._fail)
        start_thread(self._thread)
        self._next = 0
        self.active: int | None = None

    def start(self, files: Sequence[HubFile]) -> int:
        """Queue a job; jobs run one after another.  Returns the job id."""
        self._next += 1
        self.active = self._next
        self._run.emit(self._next, tuple(files))
        return self._next

    def cancel(self) -> None:
        self._worker.cancel_flag.set()

    def _done(self, job: int, paths: object) -> None:
        self.active = None
        self.finished.emit(job, paths)

    def _fail(self, job: int, message: str, cancelled: bool) -> None:
        self.active = None
        self.failed.emit(job, message, cancelled)

    def shutdown(self, patience_ms: int = 2_000) -> None:
        """Cancel the running job and any queued ones, and end the thread (within ~0.5 s)."""
        self._worker.closing.set()
        self.cancel()
        end_thread(self._thread, patience_ms)


__all__ = ["DownloadProgress", "DownloadService"]
