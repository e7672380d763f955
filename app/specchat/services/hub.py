"""Asking the hub off the GUI thread: searches, file lists, header checks, the draft finder.

Each call is a plain Qt-free function from :mod:`specchat.models` run as a task of the
session's hub runner (:class:`HubTasks`, a :class:`~specchat.workers.tasks.TaskRunner` with
one thread for the session's life, one task at a time, in order).  Every call returns the
task's :class:`~specchat.workers.tasks.TaskHandle`; a view keeps the handle of what it waits
for and cancels it when it asks again or closes, so a slow search never overwrites the one
typed after it.  A task blocked on the network is given up at once on cancel or shutdown
(it runs on a helper, :func:`~specchat.cancel.call_cancellable`); network reads inside a
task are bounded by their own deadlines (:mod:`specchat.models.remote`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject

from specchat.models import catalog_fit
from specchat.models.catalog import CatalogPair
from specchat.models.draft_finder import DraftSearch, search_drafts, target_entry
from specchat.models.fit import FitVerdict
from specchat.models.hub import HubFile
from specchat.models.hub_search import GGUFEntry, entry_fit, list_gguf_files, search_repos
from specchat.models.registry import InstalledModel
from specchat.models.remote import check_remote_pair
from specchat.workers.tasks import TaskContext, TaskHandle, TaskRunner


class HubTasks(TaskRunner):
    """The session's hub thread; owned by the session, lent to dialogs."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("specchat-hub", parent)


# -- the hub calls the Models dialog makes; the window never calls the network itself ------------------


class HubCalls:
    """The dialog's questions to the hub as tasks of :class:`HubTasks`; each returns the task's handle,
    whose ``returned`` carries the answer (the type named) or whose ``failed`` carries one line."""

    def __init__(self, tasks: HubTasks) -> None:
        self.tasks = tasks

    def search(self, query: str, sort: str, limit: int = 50) -> TaskHandle:
        """-> list[RepoHit]"""
        return self.tasks.run_task(lambda task: search_repos(query, sort=sort, limit=limit))

    def files(self, repo_id: str) -> TaskHandle:
        """-> RepoFiles"""
        return self.tasks.run_task(lambda task: list_gguf_files(repo_id))

    def fit(self, entry: GGUFEntry, *, free_vram: int | None, free_ram: int) -> TaskHandle:
        """-> FitVerdict, from the entry's headers"""
        def fit(task: TaskContext) -> FitVerdict:
            task.raise_if_cancelled()
            return entry_fit(entry, free_vram=free_vram, free_ram=free_ram)

        return self.tasks.run_task(fit)

    def catalog_fits(self, pairs: list[CatalogPair], *, free_vram: int | None, free_ram: int, cache_dir: Path,
                     installed: dict[str, Path]) -> TaskHandle:
        """-> dict[pair id, FitVerdict], from the pairs' headers (cached in ``cache_dir``)"""
        return self.tasks.run_task(lambda task: catalog_fit.catalog_fits(
            pairs, free_vram=free_vram, free_ram=free_ram, cache_dir=cache_dir, cancel=task.token,
            installed=installed))

    def check_pair(self, target: HubFile, draft: HubFile) -> TaskHandle:
        """-> (PairCompatibility, bytes read), from the two headers"""
        return self.tasks.run_task(lambda task: check_remote_pair(target, draft))

    def find_drafts(self, target: GGUFEntry | Path | str, catalog: list[CatalogPair],
                    installed: Sequence[InstalledModel] = ()) -> TaskHandle:
        """-> (the target as an entry or path, DraftSearch); a str target is a hub reference; the
        installed models (frozen records) are candidates too, checked from their headers on disk"""
        def find(task: TaskContext) -> tuple[GGUFEntry | Path, DraftSearch]:
            resolved = target_entry(target) if isinstance(target, str) else target
            return resolved, search_drafts(resolved, catalog=catalog, installed=installed, cancel=task.token)

        return self.tasks.run_task(find)
