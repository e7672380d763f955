"""One download as the Models dialog runs it: check the pair's headers, fetch, register.

The order is the one ``specchat models pull`` keeps: when a target and its draft are fetched
together, both headers are read first (a few MiB, on the hub thread) and an incompatible pair is
refused before a byte of weights; then the download thread fetches every file (a split GGUF is
all of its parts) and the files to be listed are added to the registry (a split model by its
first part, which llama.cpp is given).  Not a widget: the dialog shows what it says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from specchat.models.compatibility import PairCompatibility
from specchat.models.gguf_header import GGUFError
from specchat.models.hub import DownloadProgress, HubFile, human_bytes
from specchat.models.registry import Registry, RegistryError
from specchat.services.download import DownloadService
from specchat.services.hub import HubCalls, HubTasks
from specchat.workers.tasks import TaskHandle


@dataclass(frozen=True)
class DownloadJob:
    name: str  # what the user picked, for the messages
    files: tuple[HubFile, ...]
    register: tuple[tuple[int, str], ...]  # (index in files, source "owner/repo/file") of what to list
    check: tuple[HubFile, HubFile] | None = None  # a target and draft whose headers must match first
    then: Callable[[list[Path]], None] | None = field(default=None, compare=False)  # with the registered paths


class DownloadFlow(QObject):
    message = Signal(str)  # one line for the status label
    busy = Signal(bool)  # a check or download runs: download buttons off, Cancel on
    progress = Signal(int)  # per mille of the bytes
    completed = Signal(object)  # the registered paths, in the order of job.register

    def __init__(self, registry: Registry, downloads: DownloadService, hub: HubTasks,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.registry, self.downloads, self.hub = registry, downloads, hub
        self.job: DownloadJob | None = None
        self._check: TaskHandle | None = None
        self._download: TaskHandle | None = None
        self._checked = ""  # what the header check found, said again when the download ends

    @property
    def active(self) -> bool:
        return self.job is not None

    def start(self, job: DownloadJob) -> bool:
        """Begin ``job``; False (nothing started) while another download of this app runs."""
        if self.job is not None or self.downloads.active is not None:
            return False
        self.job, self._checked = job, ""
        self.busy.emit(True)
        if job.check is None:
            self._fetch()
            return True
        target, draft = job.check
        self.message.emit(f"Checking that {job.name}'s draft shares the target's tokenizer (headers only)…")
        self._check = HubCalls(self.hub).check_pair(target, draft)
        self._check.returned.connect(self._on_checked)
        self._check.failed.connect(self._on_check_failed)
        return True

    def cancel(self) -> None:
        if self._check is not None:
            self._check.cancel()
            self._end("Cancelled before the download started.")
        elif self._download is not None:
            self.downloads.cancel()

    # -- the steps -----------------------------------------------------------------------------

    def _on_checked(self, result: object) -> None:
        if self.job is None:
            return
        self._check = None
        if not (isinstance(result, tuple) and isinstance(result[0], PairCompatibility)):
            return
        verdict, fetched = result[0], int(result[1])
        if not verdict:
            self._end(f"Not downloaded: {self.job.name} is not a usable pair ({verdict.reason}); "
                      f"found from the two headers, {human_bytes(fetched)} read.")
            return
        self._checked = f"Headers checked ({human_bytes(fetched)} read): the draft shares the target's tokenizer."
        self._fetch()

    def _on_check_failed(self, message: str, _cancelled: bool) -> None:
        self._end(f"Not downloaded: {message}")

    def _fetch(self) -> None:
        assert self.job is not None
        self._download = self.downloads.start(list(self.job.files))
        self._download.yielded.connect(self._on_progress)
        self._download.returned.connect(self._on_finished)
        self._download.failed.connect(self._on_failed)
        self.message.emit(f"Starting {self.job.name}…")

    def _on_progress(self, p: DownloadProgress) -> None:
        self.progress.emit(int(1000 * p.done_bytes / p.total_bytes) if p.total_bytes else 0)
        eta = "" if p.eta_s is None else f", {p.eta_s:.0f} s left"
        self.message.emit(f"{p.filename} ({p.file_index + 1}/{p.file_count}): {human_bytes(p.done_bytes)} of "
                          f"{human_bytes(p.total_bytes)} at {human_bytes(p.rate_bytes_s)}/s{eta}")

    def _on_finished(self, paths: list[Path]) -> None:
        if self.job is None:
            return
        done = self.job
        registered: list[Path] = []
        try:
            for index, source in done.register:
                registered.append(Path(self.registry.add(paths[index], source=source).path))
        except (GGUFError, RegistryError) as exc:  # the files stay where they are; say why they are not listed
            self._end(f"Downloaded, but not registered: {exc}")
            return
        self._end(" ".join(filter(None, [self._checked, f"Downloaded and verified: {done.name}."])))
        self.completed.emit(registered)
        if done.then is not None:
            done.then(registered)

    def _on_failed(self, message: str, cancelled: bool) -> None:
        self._end(("Cancelled; the next download resumes. " if cancelled else "") + message)

    def _end(self, text: str) -> None:
        self.job = None
        self._check = self._download = None
        self.busy.emit(False)
        self.message.emit(text)
