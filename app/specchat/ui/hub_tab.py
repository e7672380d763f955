"""Models → Search the hub: GGUF repos by text and sort, a repo's files by quantisation with their
size and a fit verdict read from the headers, download, and "find drafts" for a chosen file.

Every hub call runs on the session's hub thread (:class:`~specchat.services.hub.HubTasks`);
this tab keeps the id of each task whose answer it waits for and drops every other answer, so
a slow search or listing never overwrites a newer one.  The fit verdicts are one task per file,
queued after the listing, so the column fills in row by row (about 1 MiB of header each) and a
new listing cancels the rest.
"""

from __future__ import annotations

import functools

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from specchat.models.fit import FitVerdict
from specchat.models.hub import human_bytes
from specchat.models.hub_search import (
    SORTS,
    GGUFEntry,
    RepoFiles,
    RepoHit,
    gated_message,
)
from specchat.services.hub import HubCalls, HubTasks
from specchat.workers.tasks import TaskHandle

ROLE = Qt.ItemDataRole.UserRole
SORT_TEXT = {"downloads": "Most downloaded", "likes": "Most liked", "updated": "Recently updated"}


def _table(headers: list[str], stretch: int = 0) -> QTableWidget:
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    header = t.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    t.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    t.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
    t.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    t.verticalHeader().setVisible(False)
    return t


def _cell(text: str, tip: str = "", data: object = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if tip:
        item.setToolTip(tip)
    if data is not None:
        item.setData(ROLE, data)
    return item


class HubSearchTab(QWidget):
    downloadRequested = Signal(object)  # GGUFEntry
    findDraftsRequested = Signal(object)  # GGUFEntry, the target

    def __init__(self, hub: HubTasks, *, free_vram: int | None, free_ram: int, has_token: bool,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.hub = hub
        self.calls = HubCalls(hub)
        self.free_vram, self.free_ram, self.has_token = free_vram, free_ram, has_token
        self._search: TaskHandle | None = None
        self._listing: TaskHandle | None = None
        self._fits: list[TaskHandle] = []  # the header reads of the listed files, one per row
        self.files_of: RepoFiles | None = None
        v = QVBoxLayout(self)
        bar = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search GGUF models on the hub, e.g. qwen2.5 coder")
        self.query.returnPressed.connect(self.search)
        self.sort = QComboBox()
        for key in SORTS:
            self.sort.addItem(SORT_TEXT[key], key)
        self.sort.currentIndexChanged.connect(lambda *_: self.search())
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        bar.addWidget(self.query, 1)
        bar.addWidget(self.sort)
        bar.addWidget(self.search_button)
        v.addLayout(bar)
        split = QSplitter(Qt.Orientation.Vertical)
        self.repos = _table(["Repository", "Downloads", "Likes", "Updated", "Access"])
        self.repos.itemSelectionChanged.connect(self.list_files)
        self.files = _table(["File", "Quantisation", "Size", "Parts", "On this machine"])
        self.files.itemSelectionChanged.connect(self._update_buttons)
        split.addWidget(self.repos)
        split.addWidget(self.files)
        v.addWidget(split, 1)
        self.status = QLabel("Type a model name and press Enter. Only repos with GGUF files are listed.")
        self.status.setWordWrap(True)
        v.addWidget(self.status)
        buttons = QHBoxLayout()
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(lambda: self._emit(self.downloadRequested))
        self.drafts_button = QPushButton("Find drafts for this model…")
        self.drafts_button.clicked.connect(lambda: self._emit(self.findDraftsRequested))
        buttons.addStretch(1)
        buttons.addWidget(self.drafts_button)
        buttons.addWidget(self.download_button)
        v.addLayout(buttons)
        self._update_buttons()

    # -- search -----------------------------------------------------------------------

    def search(self) -> None:
        query, sort = self.query.text(), self.sort.currentData()
        if self._search is not None:
            self._search.cancel()
        self.status.setText(f"Searching the hub for “{query.strip()}”…" if query.strip() else "Listing GGUF repos…")

        self._search = self.calls.search(query, sort)
        self._search.returned.connect(self._on_hits)
        self._search.failed.connect(self._on_search_failed)

    def _show_hits(self, hits: list[RepoHit]) -> None:
        self.repos.setRowCount(len(hits))
        for row, h in enumerate(hits):
            self.repos.setItem(row, 0, _cell(h.repo_id, h.repo_id, h))
            self.repos.setItem(row, 1, _cell(f"{h.downloads:,}"))
            self.repos.setItem(row, 2, _cell(f"{h.likes:,}"))
            self.repos.setItem(row, 3, _cell(h.updated or "–"))
            self.repos.setItem(row, 4, _cell("gated" if h.gated else "open",
                                             gated_message(h.repo_id, h.gated, self.has_token)))
        self.status.setText(f"{len(hits)} repos. Pick one to see its GGUF files." if hits
                            else "No GGUF repo matches; try fewer words.")

    # -- a repo's files -----------------------------------------------------------------

    def list_files(self) -> None:
        rows = self.repos.selectionModel().selectedRows()
        if not rows:
            return
        item = self.repos.item(rows[0].row(), 0)
        hit = item.data(ROLE) if item is not None else None
        if not isinstance(hit, RepoHit):
            return
        for task in (self._listing, *self._fits):
            if task is not None:
                task.cancel()
        self._fits.clear()
        self.files.setRowCount(0)
        self.files_of = None
        self.status.setText(f"Listing the GGUF files of {hit.repo_id}…")
        self._listing = self.calls.files(hit.repo_id)
        self._listing.returned.connect(self._on_listing)
        self._listing.failed.connect(self._on_listing_failed)
        self._update_buttons()

    def _show_files(self, listing: RepoFiles) -> None:
        self.files_of = listing
        self.files.setRowCount(len(listing.entries))
        for row, e in enumerate(listing.entries):
            parts = "\n".join(f.filename for f in e.files)
            self.files.setItem(row, 0, _cell(e.name, parts, e))
            self.files.setItem(row, 1, _cell(e.quant))
            self.files.setItem(row, 2, _cell(human_bytes(e.size) if e.size else "–"))
            self.files.setItem(row, 3, _cell(str(len(e.files))))
            self.files.setItem(row, 4, _cell("reading header…"))
            fit = self.calls.fit(e, free_vram=self.free_vram, free_ram=self.free_ram)
            fit.returned.connect(functools.partial(self._on_fit, row))
            fit.failed.connect(functools.partial(self._on_fit_failed, row))
            self._fits.append(fit)
        lines = [f"{len(listing.entries)} GGUF models in {listing.repo_id}."]
        if listing.gated:
            lines.append(gated_message(listing.repo_id, listing.gated, self.has_token))
        lines.extend(listing.notes[:3])
        self.status.setText("\n".join(lines))
        if listing.entries:
            self.files.selectRow(0)
        self._update_buttons()

    def _show_fit(self, row: int, text: str, tip: str) -> None:
        if row < self.files.rowCount():
            self.files.setItem(row, 4, _cell(text, tip))

    # -- answers from the hub thread ----------------------------------------------------

    def _on_hits(self, result: object) -> None:
        self._search = None
        if isinstance(result, list):
            self._show_hits(result)

    def _on_listing(self, result: object) -> None:
        self._listing = None
        if isinstance(result, RepoFiles):
            self._show_files(result)

    def _on_search_failed(self, message: str, _cancelled: bool) -> None:
        self._search = None
        self.status.setText(message)

    def _on_listing_failed(self, message: str, _cancelled: bool) -> None:
        self._listing = None
        self.status.setText(message)

    def _on_fit(self, row: int, result: object) -> None:
        if isinstance(result, FitVerdict):
            self._show_fit(row, result.label, result.summary)

    def _on_fit_failed(self, row: int, message: str, _cancelled: bool) -> None:
        self._show_fit(row, "header unreadable", message)

    def cancel_tasks(self) -> None:
        for task in (self._search, self._listing, *self._fits):
            if task is not None:
                task.cancel()
        self._search = self._listing = None
        self._fits.clear()

    # -- buttons ---------------------------------------------------------------------------

    def selected_entry(self) -> GGUFEntry | None:
        rows = self.files.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.files.item(rows[0].row(), 0)
        return item.data(ROLE) if item is not None else None

    def _emit(self, signal) -> None:  # noqa: ANN001 (a bound Signal)
        entry = self.selected_entry()
        if entry is not None:
            signal.emit(entry)

    def _update_buttons(self) -> None:
        chosen = self.selected_entry() is not None
        self.download_button.setEnabled(chosen)
        self.drafts_button.setEnabled(chosen)
