"""The reasoning block and the answer, apart: footer, telemetry numbers and the per-task table."""

from __future__ import annotations

from specchat.metrics import Counts, PhaseSplit
from specchat.stats_line import stats_line
from specchat.store import ChatSettings, MessageStats, open_store
from specchat.ui.task_table import TaskTableDialog
from specchat.ui.telemetry_panel import _phases_html

SPLIT = PhaseSplit(Counts(tokens=30, decoded=30, decode_s=3.0, drafted=40, accepted=10, rounds=20, rounds_with_draft=20),
                   Counts(tokens=40, decoded=40, decode_s=2.0, drafted=40, accepted=30, rounds=10, rounds_with_draft=10))


def test_the_footer_shows_each_phase_when_the_answer_reasoned_and_nothing_more_when_not() -> None:
    stats = MessageStats(Counts.of_answer(71, 5.0) + Counts(drafted=80, accepted=40), mode="draft",
                         stop_reason="eog", phases=SPLIT)
    text = stats_line(stats, "done")
    assert "reasoning 25% accepted, 10.0 tok/s" in text and "answer 75% accepted, 20.0 tok/s" in text
    plain = stats_line(MessageStats(Counts.of_answer(71, 5.0), mode="draft", stop_reason="eog"), "done")
    assert "reasoning" not in plain and "answer" not in plain


def test_the_panel_numbers_carry_the_split() -> None:
    assert "25%" in _phases_html(SPLIT) and "75%" in _phases_html(SPLIT)
    assert _phases_html(PhaseSplit()) == ""


def test_the_task_table_has_a_column_per_phase(qtbot, tmp_path) -> None:  # noqa: ANN001
    with open_store(tmp_path / "db.sqlite3") as store:
        chat = store.create_chat("c", ChatSettings(task="chat", speculation="draft"))
        writer = store.answer_writer(store.start_answer(chat.id))
        writer.append("<think>hm</think>yes")
        writer.finish("done", MessageStats(Counts.of_answer(71, 5.0) + Counts(drafted=80, accepted=40),
                                           mode="draft", phases=SPLIT))
        dialog = TaskTableDialog(store)
        qtbot.addWidget(dialog)
        header = [dialog.table.horizontalHeaderItem(i).text() for i in range(dialog.table.columnCount())]
        cells = {h: dialog.table.item(0, i).text() for i, h in enumerate(header)}
        assert cells["In reasoning"] == "25% · 10.0 tok/s" and cells["In the answer"] == "75% · 20.0 tok/s"


def test_the_task_table_says_what_a_multiplier_still_waits_for(qtbot, tmp_path) -> None:  # noqa: ANN001
    with open_store(tmp_path / "db.sqlite3") as store:
        chat = store.create_chat("c", ChatSettings(task="code", target="/m/qwen-7b.gguf", speculation="draft"))
        for mode in ("baseline", "draft", "draft", "draft"):
            writer = store.answer_writer(store.start_answer(chat.id))
            writer.append("x")
            writer.finish("done", MessageStats(Counts.of_answer(21, 1.0), mode=mode))
        dialog = TaskTableDialog(store)
        qtbot.addWidget(dialog)
        header = [dialog.table.horizontalHeaderItem(i).text() for i in range(dialog.table.columnCount())]
        cells = {h: dialog.table.item(0, i).text() for i, h in enumerate(header)}
        assert cells["Model"] == "qwen-7b.gguf" and cells["Answers plain · spec."] == "1 · 3"
        assert cells["Multiplier"] == "– (1 of 3 plain runs)"  # said as in the panel and the stats line
        assert cells["Plain tok/s"] == "20.0"
