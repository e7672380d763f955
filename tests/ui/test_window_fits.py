"""Issue 25 item 1: the window fits a 1280x720 screen, whatever the pair is called."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication

LONG = "Qwen2.5-Coder-14B-Instruct-abliterated-uncensored-i1-Q4_K_M-imatrix-from-a-long-folder-name"


def _long_pair(app):
    target, draft = app.root / f"{LONG}.gguf", app.root / f"{LONG}-draft-0.5B-Q8_0.gguf"
    for p in (target, draft):
        p.touch()
    return target, draft


def test_the_window_fits_a_laptop_screen_with_a_long_pair_name(qtbot, fake_app):
    app = fake_app()
    target, draft = _long_pair(app)
    app.add_chat(target=target, draft=draft)
    w = app.start(qtbot).window
    w.pair_status.setText(f"{target.name} + {draft.name} · CPU · ctx 4096")  # the status bar once it loads
    w.telemetry.show()  # collapsed until an answer has rounds to plot; beside the chat once one has
    qtbot.wait(50)
    assert w.telemetry.isVisible()
    docked = w.minimumSizeHint().width()
    assert docked <= 1000
    w.telemetry.toggleViewAction().trigger()
    qtbot.waitUntil(lambda: w.minimumSizeHint().width() < docked)  # the layout settles in the event loop
    hidden = w.minimumSizeHint().width()
    w.set_chat_list(False)
    qtbot.waitUntil(lambda: w.minimumSizeHint().width() < hidden)
    assert not w.actions_by_slot["set_chat_list"].isChecked()
    w.set_chat_list(True)
    w.telemetry.toggleViewAction().trigger()
    # at that minimum, the header wraps onto more rows: every switch whole and inside the pane
    w.resize(docked, 720)
    qtbot.waitUntil(lambda: w.width() == docked)
    header = w.pane.header
    for control in (header.pair_button, header.speculation, header.reasoning, header.temperature, header.more):
        assert control.width() >= control.sizeHint().width()
        assert header.rect().contains(control.geometry())
    # the long names are elided, and whole in their tooltips
    assert header.pair_label.elided and LONG in header.pair_label.toolTip()
    assert w.pair_status.elided and draft.name in w.pair_status.toolTip()


def test_a_wide_window_keeps_the_header_on_one_row(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot).window
    w.resize(1920, 1080)
    qtbot.waitUntil(lambda: w.width() == 1920)
    header = w.pane.header
    assert header.pair_button.y() == header.more.y()  # one row
    assert not header.pair_label.elided and header.pair_label.text().startswith("fake-target.gguf")


def test_the_chat_list_can_be_hidden_and_stays_hidden_after_a_restart(qtbot, fake_app, tmp_path):
    from PySide6.QtCore import QSettings

    state = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot, window_state=state).window
    w.actions_by_slot["set_chat_list"].trigger()
    assert w.chats.widget.isHidden()
    app.stop()
    w = app.start(qtbot, window_state=state).window
    assert w.chats.widget.isHidden() and not w.actions_by_slot["set_chat_list"].isChecked()
    w.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is w, timeout=5_000)
    qtbot.keySequence(w, QKeySequence("Ctrl+Shift+L"))
    assert not w.chats.widget.isHidden()
