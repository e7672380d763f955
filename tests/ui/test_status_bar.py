"""A long status message ends in "…" before the permanent widgets (the memory label), whole in the tooltip;
Qt's own cut it off mid-word under them (seen at 1280x720 with auto's re-check message)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QMainWindow

from specchat.ui.fitting import StatusBar

LONG = ("speculation paused: auto re-checked the draft model: its measured round costs drifted to 1.87x the "
        "calibrated ones, and at those costs the draft model cannot pay here, best case 0.73x; it is tried again "
        "when the costs come back. Chat settings → Speculation chooses another drafter or none.")


def window(qtbot, width: int) -> tuple[QMainWindow, StatusBar, QLabel]:
    w = QMainWindow()
    qtbot.addWidget(w)
    bar = StatusBar(w)
    w.setStatusBar(bar)
    memory = QLabel("RAM 2.58 GiB")
    bar.addPermanentWidget(memory)
    w.resize(width, 300)
    w.show()
    qtbot.waitExposed(w)
    return w, bar, memory


def shown(bar: StatusBar) -> str:
    return StatusBar.__mro__[1].currentMessage(bar)  # what Qt paints


def test_a_long_message_ends_in_an_ellipsis_before_the_memory_label_and_is_whole_in_the_tooltip(qtbot):
    w, bar, memory = window(qtbot, 1280)
    bar.showMessage(LONG, 20_000)
    text = shown(bar)
    assert text.endswith("…") and LONG.startswith(text[:-1])
    assert 6 + bar.fontMetrics().horizontalAdvance(text) <= memory.x()  # drawn left of the memory label
    assert bar.toolTip() == LONG
    assert bar.currentMessage() == LONG  # what the app said, for whoever asks


def test_a_message_that_fits_is_shown_whole_with_no_tooltip_and_a_resize_fits_it_again(qtbot):
    w, bar, memory = window(qtbot, 1800)
    bar.showMessage("exported to chats.md", 20_000)
    assert shown(bar) == "exported to chats.md" and bar.toolTip() == ""
    bar.showMessage(LONG, 20_000)
    wide = shown(bar)
    w.resize(700, 300)
    qtbot.waitUntil(lambda: shown(bar) != wide, timeout=5_000)
    assert len(shown(bar)) < len(wide) and shown(bar).endswith("…")
    assert bar.currentMessage() == LONG


def test_when_the_message_goes_its_tooltip_goes_with_it(qtbot):
    w, bar, memory = window(qtbot, 800)
    bar.showMessage(LONG, 50)
    assert bar.toolTip() == LONG
    qtbot.waitUntil(lambda: bar.currentMessage() == "", timeout=5_000)
    assert bar.toolTip() == ""
