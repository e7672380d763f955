"""Downloads off the GUI thread: one job (a model pair) at a time, progress as it is made, cancel any time.

A job is a task of the service's own runner (:class:`~specchat.workers.tasks.TaskRunner`,
thread "specchat-download"); :meth:`DownloadService.start` returns its
:class:`~specchat.workers.tasks.TaskHandle`: ``yielded`` carries each
:class:`~specchat.models.hub.DownloadProgress`, ``returned`` the local paths, ``failed`` one
line and whether it was a cancel.  The job runs on the runner's thread and looks at its
token at least every quarter second in every state (asking the hub, waiting for another
process's lock, a server that sends nothing, hashing a multi-GB file: :mod:`specchat.models.hub`
polls it; its blocking network reads run on helpers of their own).  So
:meth:`DownloadService.shutdown` returns within a second or two, and the app exits, whatever
the download is doing; the partial file stays for a resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject

from specchat.models.hub import DownloadError, DownloadProgress, HubFile, download_files
from specchat.workers.tasks import TaskContext, TaskHandle, TaskRunner


def _download(files: tuple[HubFile, ...], task: TaskContext) -> list[Path]:
    try:
        paths = download_files(list(files), progress=task.report, cancel=task.token)
    except DownloadError:
        raise
    except Exception as exc:  # never kill the app: one line
        raise DownloadError(f"download failed: {exc}") from exc
    return [Path(p) for p in paths]


class DownloadService(QObject):
    """The session's download thread (not a widget; dialogs receive it)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._runner = TaskRunner("specchat-download")
        self._current: TaskHandle | None = None

    @property
    def active(self) -> TaskHandle | None:
        """The newest job's handle while it is queued or running, else None."""
        return self._current if self._current is not None and self._current.running else None

    def start(self, files: Sequence[HubFile]) -> TaskHandle:
        """Queue a job (jobs run one after another); its handle."""
        job = tuple(files)
        self._current = self._runner.run_task(lambda task: _download(job, task), polls=True, name="download")
        return self._current

    def cancel(self) -> None:
        """Stop the newest job; its handle still says how it ended ("cancelled, … kept")."""
        if self._current is not None:
            self._current.stop()

    def shutdown(self, patience_ms: int = 2_000) -> None:
        """Cancel the running job and any queued ones, and end the thread (within ~0.5 s)."""
        self._runner.shutdown(patience_ms)


__all__ = ["DownloadProgress", "DownloadService"]
