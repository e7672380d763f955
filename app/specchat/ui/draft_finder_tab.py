"""Models → Find a draft: for a target (installed, or a file on the hub) the drafts that can serve it.

:func:`specchat.models.draft_finder.search_drafts` gathers candidates: the installed models
smaller than the target, and the target's family (its base_model tags, its organisation, name
patterns, the catalog); it keeps those 5 to 20 times smaller and reads each one's header (from
disk, or about 1 MiB from the hub) to check the tokenizer.  This tab shows the compatible ones
first, ranked, and the refused ones after them with the reason, greyed out: a list that is
silently empty is what users of other apps complain about most.  When the hub could not be
reached it says so above the list (what is listed comes from installed files and the catalog).
One click downloads what is not installed yet (the draft, and the target when it is on the hub)
and makes the pair the chat's.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from specchat.models.catalog import CatalogPair
from specchat.models.draft_finder import DraftCandidate, DraftSearch
from specchat.models.hub import human_bytes
from specchat.models.hub_search import GGUFEntry
from specchat.models.registry import InstalledModel
from specchat.services.hub import HubCalls, HubTasks
from specchat.workers.tasks import TaskHandle

ROLE = Qt.ItemDataRole.UserRole
SOURCE_TEXT = {"base_model": "base model tag", "organisation": "same organisation", "name": "name pattern",
               "catalog": "catalog", "installed": "installed"}


def target_name(target: GGUFEntry | Path) -> str:
    return target.name if isinstance(target, Path) else target.ref


class DraftFinderTab(QWidget):
    useRequested = Signal(object, object)  # target (GGUFEntry | Path), draft (GGUFEntry, or Path: installed)

    def __init__(self, hub: HubTasks, catalog: list[CatalogPair], parent: QWidget | None = None, *,
                 installed: Callable[[], Sequence[InstalledModel]] = tuple) -> None:
        super().__init__(parent)
        self.hub = hub
        self.catalog = catalog
        self.installed = installed  # the registry's records now (frozen: safe to hand to the hub thread)
        self.target: GGUFEntry | Path | None = None
        self._task: TaskHandle | None = None
        self.candidates: list[DraftCandidate] = []
        v = QVBoxLayout(self)
        ask = QHBoxLayout()
        self.ref = QLineEdit()
        self.ref.setPlaceholderText("Target on the hub: owner/repo or owner/repo/file.gguf (or pick one in "
                                    "Installed or Search the hub)")
        self.ref.returnPressed.connect(self.find_typed)
        self.find_button = QPushButton("Find drafts")
        self.find_button.clicked.connect(self.find_typed)
        ask.addWidget(self.ref, 1)
        ask.addWidget(self.find_button)
        v.addLayout(ask)
        self.heading = QLabel("Drafts share the target's tokenizer and are 5 to 20 times smaller.")
        self.heading.setWordWrap(True)
        v.addWidget(self.heading)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["Draft", "Size", "Smaller by", "Verdict", "Found through"])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.itemSelectionChanged.connect(self._update_button)
        v.addWidget(self.table, 1)
        self.status = QLabel()
        self.status.setWordWrap(True)
        v.addWidget(self.status)
        row = QHBoxLayout()
        row.addStretch(1)
        self.use_button = QPushButton("Download the draft and use the pair")
        self.use_button.clicked.connect(self._use)
        row.addWidget(self.use_button)
        v.addLayout(row)
        self._update_button()

    def find_typed(self) -> None:
        """Find drafts for the hub reference typed in the box (resolved on the hub thread)."""
        ref = self.ref.text().strip()
        if ref:
            self._find(ref, None)

    def find_for(self, target: GGUFEntry | Path) -> None:
        """Look for drafts of ``target``; the answer of an earlier search is dropped."""
        self.ref.setText("" if isinstance(target, Path) else target.ref)
        self._find(target_name(target), target)

    def _find(self, name: str, target: GGUFEntry | Path | None) -> None:
        if self._task is not None:
            self._task.cancel()
        self.target = target
        self.candidates = []
        self.table.setRowCount(0)
        self.heading.setText(f"Drafts for <b>{html.escape(name)}</b>")
        self.status.setText("Gathering candidates of the same family and reading their headers (about 1 MiB each)…")
        self._task = HubCalls(self.hub).find_drafts(target if target is not None else name, self.catalog,
                                                    tuple(self.installed()))
        self._task.returned.connect(self._on_done)
        self._task.failed.connect(self._on_failed)
        self._update_button()

    def _on_done(self, result: object) -> None:
        self._task = None
        if not isinstance(result, tuple) or not isinstance(result[1], DraftSearch):
            return
        self.target, search = result
        self.show_candidates(search.candidates, hub_unreachable=search.hub_unreachable)

    def _on_failed(self, message: str, _cancelled: bool) -> None:
        self._task = None
        self.status.setText(message)
        self._update_button()

    def show_candidates(self, candidates: list[DraftCandidate], *, hub_unreachable: str = "") -> None:
        self.candidates = candidates
        self.table.setRowCount(len(candidates))
        for row, c in enumerate(candidates):
            name = c.ref if c.entry is not None else f"{Path(c.path).name}  (installed: {Path(c.path).parent})"
            cells = (name, human_bytes(c.size) if c.size else "–",
                     f"{c.ratio:.1f}×" if c.ratio else "–",
                     ("✓ compatible" + (f" ({c.note})" if c.note else "")) if c.compatible else f"✗ {c.reason}", SOURCE_TEXT.get(c.source, c.source))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(c.reason or text)
                if col == 0:
                    item.setData(ROLE, row)
                if not c.compatible:  # listed, with the reason, but cannot be picked
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsSelectable)
                self.table.setItem(row, col, item)
        good = sum(c.compatible for c in candidates)
        refused = len(candidates) - good
        offline = (f"The hub was unreachable ({hub_unreachable}), so only installed models and the catalog "
                   "were looked at. ") if hub_unreachable else ""
        if not candidates:
            self.status.setText(offline + ("No installed model is smaller than the target, and the catalog has no "
                                           "draft of its family." if offline else
                                           "No candidate found: no model of this family installed, on the hub "
                                           "or in the catalog."))
        else:
            self.status.setText(offline + f"{good} compatible, {refused} refused (the reason is in each row). "
                                "Ranked by how much smaller than the target they are.")
        if good:
            self.table.selectRow(next(i for i, c in enumerate(candidates) if c.compatible))
        self._update_button()

    def cancel_tasks(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._task = None

    def selected(self) -> DraftCandidate | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        c = self.candidates[rows[0].row()]
        return c if c.compatible else None

    def _update_button(self) -> None:
        chosen = self.selected()
        self.use_button.setEnabled(chosen is not None and self._task is None)
        if chosen is not None and chosen.entry is None:  # installed
            self.use_button.setText("Use the pair" if isinstance(self.target, Path)
                                    else "Download the target and use the pair")
        else:
            self.use_button.setText("Download the draft and use the pair")

    def _use(self) -> None:
        chosen = self.selected()
        if chosen is not None and self.target is not None:
            self.useRequested.emit(self.target, chosen.entry if chosen.entry is not None else Path(chosen.path))
