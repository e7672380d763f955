"""Where does speculation pay for me?  Acceptance and multiplier per task tag, across chats."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QDialog, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout

from specchat.metrics import MIN_PLAIN_RUNS, Counts, PhaseSplit, runs_phrase
from specchat.store import Store, TaskRow, task_table


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


def busy_text(runs: int) -> str:
    """"3 runs left out: machine busy" ("" for none): runs whose timings other work made up."""
    return f"{runs} run{'s' if runs != 1 else ''} left out: machine busy" if runs else ""


def _multiplier_cell(r: TaskRow) -> tuple[str, str]:
    """The multiplier, or what it still waits for: a figure from fewer runs is noise, never shown.  Runs
    measured on a busy machine are not in it, and the cell says how many were left out."""
    text, why = _multiplier_figure(r)
    if r.busy_runs:
        text += f" ({busy_text(r.busy_runs)})"
        why = (f"{why}. " if why else "") + (f"{busy_text(r.busy_runs)}: other work on the cores while they "
                                             "were measured makes their timings the machine's, not the models'.")
    return text, why


def _multiplier_figure(r: TaskRow) -> tuple[str, str]:
    if r.multiplier is not None:
        return f"{r.multiplier:.2f}×", f"{r.speculative_answers} speculative over {r.plain_answers} plain answers"
    missing = [runs_phrase(n, side) for side, n in
               (("plain", r.plain_answers), ("spec.", r.speculative_answers)) if n < MIN_PLAIN_RUNS]
    if not missing:  # enough answers, but a side without a decode speed
        return "–", ""
    return f"– ({', '.join(missing)})", (
        f"A multiplier rests on {MIN_PLAIN_RUNS} plain and {MIN_PLAIN_RUNS} speculative answers of this task "
        "and model or more: one run is noise.")


class TaskTableDialog(QDialog):
    COLUMNS = ("Task", "Model", "Answers plain · spec.", "Token acc.", "Sequence acc.", "Plain tok/s",
               "Spec. tok/s", "Multiplier", "In reasoning", "In the answer")

    def __init__(self, store: Store, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Speculation by task")
        self.resize(980, 320)
        v = QVBoxLayout(self)
        note = QLabel(f"Accumulated over all chats, one row per task and target model. The multiplier needs "
                      f"{MIN_PLAIN_RUNS} or more answers of the same task and model with speculation off and as "
                      "many with it on (tag a chat in Chat settings…). The last two columns split the "
                      "speculative answers that reasoned: token acceptance and tok/s inside the reasoning "
                      "block and after it. Answers measured while other work kept the machine busy are left out.")
        note.setWordWrap(True)
        v.addWidget(note)
        rows = task_table(store)
        self.table = QTableWidget(len(rows), len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)  # the model's name takes what is left
        for i, r in enumerate(rows):
            mult, why = _multiplier_cell(r)
            cells = (r.tag, Path(r.target).name if r.target else "–",
                     f"{r.plain_answers} · {r.speculative_answers}",
                     _pct(r.token_acceptance), _pct(r.sequence_acceptance),
                     "–" if r.plain_tok_s is None else f"{r.plain_tok_s:.1f}",
                     "–" if r.speculative_tok_s is None else f"{r.speculative_tok_s:.1f}",
                     mult, *_phase_cells(r.phases))
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                tip = {"Multiplier": why, "Model": r.target or ""}.get(self.COLUMNS[j], "")
                item.setToolTip(tip)
                self.table.setItem(i, j, item)
        v.addWidget(self.table)
