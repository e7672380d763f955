"""Asking the hub off the GUI thread: searches, file lists, header checks, the draft finder.

Each task is a plain Qt-free callable from :mod:`specchat.models` that takes a
``should_cancel`` function and returns a result or raises a one-line ``UserError``.  One
thread for the session's life runs one task at a time, in order (Orange3's rule: one task
per worker); :meth:`HubTasks.cancel` marks a task so that it stops at its next check, and
a view keeps the id of the task it waits for and drops every other result, so a slow
search never overwrites the one typed after it.  Network reads inside a task are bounded
by their own deadlines (:mod:`specchat.models.remote`), so :meth:`shutdown` waits at most
one such read.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.errors import UserError, one_line
from specchat.models import catalog_fit
from specchat.models.catalog import CatalogPair
from specchat.models.draft_finder import DraftCandidate, find_drafts, target_entry
from specchat.models.fit import FitVerdict
from specchat.models.hub import HubFile
from specchat.models.hub_search import GGUFEntry, entry_fit, list_gguf_files, search_repos
from specchat.models.remote import check_remote_pair

from .threads import end_thread, start_thread

log = logging.getLogger(__name__)
Task = Callable[[Callable[[], bool]], Any]  # should_cancel -> result
POLL_S = 0.05  # how soon a cancel or shutdown is seen while a task body waits on the network


class TaskCancelled(UserError):
    """Raised by a task that saw its cancel: its result is dropped, never shown."""


class _Worker(QObject):
    done = Signal(int, object)  # task id, result
    failed = Signal(int, str)  # task id, one line

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._cancelled: set[int] = set()
        self.closing = threading.Event()

    def cancel(self, task_id: int) -> None:
        with self._lock:
            self._cancelled.add(task_id)

    def is_cancelled(self, task_id: int) -> bool:
        with self._lock:
            return self.closing.is_set() or task_id in self._cancelled

    @Slot(int, object)
    def run(self, task_id: int, task: Task) -> None:
        try:
            if self.is_cancelled(task_id):
                return
            result = self._wait(task_id, task)
        except TaskCancelled:
            return
        except UserError as exc:
            self.failed.emit(task_id, one_line(str(exc)))
        except Exception as exc:  # a bug must not end the thread: say it in one line, log the rest
            log.exception("hub task %d failed", task_id)
            self.failed.emit(task_id, one_line(f"{type(exc).__name__}: {exc}"))
        else:
            if not self.is_cancelled(task_id):
                self.done.emit(task_id, result)
        finally:
            with self._lock:
                self._cancelled.discard(task_id)


    def _wait(self, task_id: int, task: Task) -> Any:
        """Run ``task`` in a daemon thread; its result, or TaskCancelled as soon as it is cancelled."""
        box: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        check = lambda: self.is_cancelled(task_id)  # noqa: E731 (the task's cancel check)

        def body() -> None:
            try:
                box.put((True, task(check)))
            except BaseException as exc:  # handed to the worker, raised there
                box.put((False, exc))

        threading.Thread(target=body, name="specchat-hub-task", daemon=True).start()
        while True:
            if check():
                raise TaskCancelled("cancelled")
            try:
                ok, value = box.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if ok:
                return value
            raise value


class HubTasks(QObject):
    """GUI-side handle of the hub thread; owned by the session, lent to dialogs."""

    done = Signal(int, object)
    failed = Signal(int, str)
    _run = Signal(int, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("specchat-hub")
        self._worker = _Worker()
        self._worker.moveToThread(self._thread)
        self._thread.finished.connect(self._worker.deleteLater)
        self._run.connect(self._worker.run)
        self._worker.done.connect(self.done)
        self._worker.failed.connect(self.failed)
        start_thread(self._thread)
        self._next = 0

    def submit(self, task: Task) -> int:
        """Queue ``task``; returns its id, which ``done`` or ``failed`` carry (never both; neither if cancelled)."""
        self._next += 1
        self._run.emit(self._next, task)
        return self._next

    def cancel(self, task_id: int | None) -> None:
        if task_id is not None:
            self._worker.cancel(task_id)

    def shutdown(self, patience_ms: int = 2_000) -> None:
        """Cancel everything queued or running and end the thread."""
        self._worker.closing.set()
        end_thread(self._thread, patience_ms)


def raise_if(should_cancel: Callable[[], bool]) -> None:
    """For tasks made of steps: stop between two of them once cancelled."""
    if should_cancel():
        raise TaskCancelled("cancelled")


# -- the hub calls the Models dialog makes; the window never calls the network itself ------------------


class HubCalls:
    """The dialog's questions to the hub as tasks of :class:`HubTasks`; each returns the task id
    whose ``done`` carries the answer (the type named) or whose ``failed`` carries one line."""

    def __init__(self, tasks: HubTasks) -> None:
        self.tasks = tasks

    def search(self, query: str, sort: str, limit: int = 50) -> int:
        """-> list[RepoHit]"""
        return self.tasks.submit(lambda should_cancel: search_repos(query, sort=sort, limit=limit))

    def files(self, repo_id: str) -> int:
        """-> RepoFiles"""
        return self.tasks.submit(lambda should_cancel: list_gguf_files(repo_id))

    def fit(self, entry: GGUFEntry, *, free_vram: int | None, free_ram: int) -> int:
        """-> FitVerdict, from the entry's headers"""
        def task(should_cancel: Callable[[], bool]) -> FitVerdict:
            raise_if(should_cancel)
            return entry_fit(entry, free_vram=free_vram, free_ram=free_ram)

        return self.tasks.submit(task)

    def catalog_fits(self, pairs: list[CatalogPair], *, free_vram: int | None, free_ram: int, cache_dir: Path,
                     installed: dict[str, Path]) -> int:
        """-> dict[pair id, FitVerdict], from the pairs' headers (cached in ``cache_dir``)"""
        return self.tasks.submit(lambda should_cancel: catalog_fit.catalog_fits(
            pairs, free_vram=free_vram, free_ram=free_ram, cache_dir=cache_dir, should_cancel=should_cancel,
            installed=installed))

    def check_pair(self, target: HubFile, draft: HubFile) -> int:
        """-> (PairCompatibility, bytes read), from the two headers"""
        return self.tasks.submit(lambda should_cancel: check_remote_pair(target, draft))

    def find_drafts(self, target: GGUFEntry | Path | str, catalog: list[CatalogPair]) -> int:
        """-> (the target as an entry or path, list[DraftCandidate]); a str target is a hub reference"""
        def task(should_cancel: Callable[[], bool]) -> tuple[GGUFEntry | Path, list[DraftCandidate]]:
            resolved = target_entry(target) if isinstance(target, str) else target
            return resolved, find_drafts(resolved, catalog=catalog, should_cancel=should_cancel)

        return self.tasks.submit(task)
