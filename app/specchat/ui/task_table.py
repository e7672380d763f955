"""Where does speculation pay for me?  Acceptance and multiplier per task tag, across chats."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout

from specchat.metrics import Counts, PhaseSplit
from specchat.store import Store, task_table


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _phase_cells(phases: PhaseSplit) -> tuple[str, str]:
    """Acceptance and speed of the speculative answers inside their reasoning blocks and after them
    (reasoning lowers acceptance); dashes for a tag whose answers never reasoned."""
    if not phases.has_reasoning:
        return "–", "–"
    return _phase_cell(phases.reasoning), _phase_cell(phases.answer)


def _phase_cell(c: Counts) -> str:
    return f"{_pct(c.token_acceptance)} · {'–' if c.decode_tok_s is None else f'{c.decode_tok_s:.1f}'} tok/s"


class TaskTableDialog(QDialog):
    COLUMNS = ("Task", "Answers", "Token acceptance", "Sequence acceptance", "Plain tok/s", "Speculative tok/s",
               "Multiplier", "In reasoning", "In the answer")

    def __init__(self, store: Store, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Speculation by task")
        self.resize(980, 320)
        v = QVBoxLayout(self)
        v.addWidget(QLabel("Accumulated over all chats. The multiplier needs answers of the same task with "
                           "speculation off and on (tag a chat in Chat settings…). The last two columns split "
                           "the speculative answers that reasoned: token acceptance and tok/s inside the "
                           "reasoning block and after it."))
        rows = task_table(store)
        self.table = QTableWidget(len(rows), len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        for i, r in enumerate(rows):
            cells = (r.tag, str(r.answers), _pct(r.token_acceptance), _pct(r.sequence_acceptance),
                     "–" if r.plain_tok_s is None else f"{r.plain_tok_s:.1f}",
                     "–" if r.speculative_tok_s is None else f"{r.speculative_tok_s:.1f}",
                     "–" if r.multiplier is None else f"{r.multiplier:.2f}×",
                     *_phase_cells(r.phases))
            for j, text in enumerate(cells):
                self.table.setItem(i, j, QTableWidgetItem(text))
        v.addWidget(self.table)
