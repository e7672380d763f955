"""Help → Keyboard shortcuts: every key the window has, from the table the menus and widgets use
(:func:`.menus.shortcut_rows`), so the list says what the keys do, no more and no less."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from .menus import shortcut_rows

COLUMNS = ("Keys", "Does", "Where")


class ShortcutsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        rows = shortcut_rows()
        self.table = QTableWidget(len(rows), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)  # a list, not a form
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                self.table.setItem(r, c, QTableWidgetItem(text))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.table.resizeColumnsToContents()
        width = sum(self.table.columnWidth(c) for c in range(len(COLUMNS))) + 60
        rows_height = self.table.verticalHeader().length() + self.table.horizontalHeader().height() + 90
        self.resize(min(max(width, 520), 760), min(rows_height, 640))

    def rows(self) -> list[tuple[str, ...]]:
        """What the list shows, row by row (keys, what it does, where)."""
        return [tuple(item.text() if (item := self.table.item(r, c)) is not None else "" for c in range(len(COLUMNS)))
                for r in range(self.table.rowCount())]
