"""View → API requests…: the recent requests of the window's API server, one row each, newest first.

What each answer did (tokens, speed, mode, drafts accepted, the multiplier against the plain rate the load
measured, why it stopped) and who asked; never the request's text, which the server does not keep.  The
rows come from :class:`~specchat.services.api.ApiService` (its ``recent`` records, then ``record`` as each
request ends); the dialog only shows them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout

from specchat.stats_line import STOP_WORDS

if TYPE_CHECKING:
    from specchat.serve.http import ApiRecord
    from specchat.services.api import ApiService

COLUMNS = ("Time", "Client", "Endpoint", "Status", "Tokens", "tok/s", "Mode", "Accepted / drafted", "× plain",
           "Stop")
API_STOP_WORDS = STOP_WORDS | {"cancelled": "cancelled"}  # an API request's Stop is its client's
RIGHT = frozenset({"Status", "Tokens", "tok/s", "Accepted / drafted", "× plain"})


def cells(r: ApiRecord) -> tuple[str, ...]:
    """One request's row, as :data:`COLUMNS` names them ("–" where it has no figure)."""
    answered = r.status == 200
    return (
        time.strftime("%H:%M:%S", time.localtime(r.started)),
        r.client,
        "chat" if r.endpoint == "chat" else "completions",
        str(r.status),
        str(r.tokens) if answered or r.tokens else "–",
        f"{r.tok_s:.1f}" if r.tok_s else "–",
        r.mode or "–",
        f"{r.accepted} / {r.drafted}" if r.drafted else "–",
        f"{r.speedup:.2f}×" if r.speedup else "–",
        API_STOP_WORDS.get(r.stop, r.stop) or "–",
    )


class ApiRequestsDialog(QDialog):
    """The API's recent requests; it follows new ones while open (not modal)."""

    def __init__(self, api: ApiService, parent=None) -> None:
        super().__init__(parent)
        self.api = api
        self.setWindowTitle("API requests")
        self.resize(980, 360)
        v = QVBoxLayout(self)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        v.addWidget(self.summary)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COLUMNS.index("Stop"), QHeaderView.ResizeMode.Stretch)
        v.addWidget(self.table)
        for record in api.recent:
            self._add(record)
        self._say()
        api.record.connect(self._on_record)
        api.stateChanged.connect(self._say)

    def _on_record(self, record: ApiRecord) -> None:
        self._add(record)
        self._say()

    def _add(self, r: ApiRecord) -> None:
        self.table.insertRow(0)
        for j, text in enumerate(cells(r)):
            item = QTableWidgetItem(text)
            if COLUMNS[j] in RIGHT:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if COLUMNS[j] in ("Stop", "Client"):
                item.setToolTip(text)
            self.table.setItem(0, j, item)
        while self.table.rowCount() > self.api.recent.maxlen:  # type: ignore[operator]  # a bounded deque
            self.table.removeRow(self.table.rowCount() - 1)

    def _say(self) -> None:
        n = self.api.requests
        state = (f"Serving at {self.api.url}" if self.api.running else "The API is off (Models → Serve the API)")
        self.summary.setText(f"{state}. {n} request{'' if n == 1 else 's'} since SpecChat started; the newest "
                             f"{self.table.rowCount()} are listed. Their text is never kept.")
