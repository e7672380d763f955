"""Speculation by task (View menu) leaves out the runs measured on a busy machine, and says so."""

from __future__ import annotations

from specchat.metrics import Counts
from specchat.store import ChatSettings, MessageStats, open_store
from specchat.ui.task_table import TaskTableDialog


def test_the_multiplier_says_how_many_runs_it_left_out_because_the_machine_was_busy(qtbot, tmp_path) -> None:  # noqa: ANN001
    with open_store(tmp_path / "db.sqlite3") as store:
        chat = store.create_chat("c", ChatSettings(task="code", target="/m/qwen-7b.gguf", speculation="draft"))
        runs = [("baseline", 1.0, False)] * 3 + [("draft", 0.5, None)] * 3 + [("baseline", 5.0, True)] * 2 \
            + [("draft", 4.0, True)]
        for mode, seconds, busy in runs:
            writer = store.answer_writer(store.start_answer(chat.id))
            writer.append("x")
            writer.finish("done", MessageStats(Counts.of_answer(21, seconds), mode=mode, busy=busy))
        dialog = TaskTableDialog(store)
        qtbot.addWidget(dialog)
        header = [dialog.table.horizontalHeaderItem(i).text() for i in range(dialog.table.columnCount())]
        cells = {h: dialog.table.item(0, i).text() for i, h in enumerate(header)}
        assert cells["Answers plain · spec."] == "3 · 3" and cells["Plain tok/s"] == "20.0"
        assert cells["Multiplier"] == "2.00× (3 runs left out: machine busy)"
        tip = dialog.table.item(0, header.index("Multiplier")).toolTip()
        assert "3 runs left out: machine busy" in tip and "other work" in tip
