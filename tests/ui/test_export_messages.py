"""The window says where an export went, or why it could not (issue 37, class 4).

Telemetry's "Export rounds…" and "Save PNG…" buttons and the menu's "Export this chat's
telemetry…" used to say nothing either way (a read-only folder printed a traceback to a terminal
the user never sees).  Each now puts one line in the status bar: the file written, or the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

import specchat.ui.main_window as main_window
import specchat.ui.telemetry_panel as telemetry_panel
from helpers.event_streams import R, answer_events, feed_all
from specchat import files


@pytest.fixture
def window(fake_app, qtbot):
    app = fake_app()
    app.start(qtbot)
    feed_all(app.session.recorder, 1, 11, answer_events([R(4, 4, 3)] * 4))
    return app.window


def choose(monkeypatch, module, path: Path) -> None:
    """The save dialog answers ``path`` (a modal dialog cannot run headless)."""
    monkeypatch.setattr(module.QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(path), "")))


def status(window) -> str:
    return window.statusBar().currentMessage()


def test_export_rounds_says_where_the_file_went(window, qtbot, monkeypatch, tmp_path):
    dest = tmp_path / "rounds.csv"
    choose(monkeypatch, telemetry_panel, dest)
    qtbot.mouseClick(window.telemetry.export_button, Qt.MouseButton.LeftButton)
    assert status(window) == f"exported 4 rounds to {dest}"  # before: nothing was said
    assert dest.read_text().count("\n") == 5


def test_export_rounds_over_a_fifo_says_why_not_and_leaves_it(window, qtbot, monkeypatch, tmp_path):
    dest = tmp_path / "rounds.json"
    os.mkfifo(dest)
    choose(monkeypatch, telemetry_panel, dest)
    qtbot.mouseClick(window.telemetry.export_button, Qt.MouseButton.LeftButton)
    assert status(window) == f"could not export to {dest}: a FIFO, not a regular file"
    assert dest.is_fifo()  # before: replaced by a regular file, silently


def test_save_png_into_a_folder_says_why_not(window, qtbot, monkeypatch, tmp_path):
    dest = tmp_path / "plots.png"
    dest.mkdir()
    choose(monkeypatch, telemetry_panel, dest)
    qtbot.mouseClick(window.telemetry.png_button, Qt.MouseButton.LeftButton)
    assert status(window) == f"could not export to {dest}: a folder, not a regular file"
    assert dest.is_dir() and list(dest.iterdir()) == []


def test_save_png_says_where_the_image_went(window, qtbot, monkeypatch, tmp_path):
    dest = tmp_path / "plots.png"
    choose(monkeypatch, telemetry_panel, dest)
    qtbot.mouseClick(window.telemetry.png_button, Qt.MouseButton.LeftButton)
    assert status(window) == f"saved the plots to {dest}"
    assert dest.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_chats_export_into_a_folder_that_cannot_be_written_is_one_line_not_a_traceback(
        window, monkeypatch, tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if os.access(folder, os.W_OK):  # root writes anyway: the folder refuses as a read-only mount would
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
    dest = folder / "chat.csv"
    choose(monkeypatch, main_window, dest)
    try:
        window.export_telemetry()  # the menu's "Export this chat's telemetry…"; before: PermissionError
    finally:
        folder.chmod(0o700)
    assert status(window) == f"could not export to {dest}: Permission denied"


def test_the_chats_export_says_where_it_went(window, monkeypatch, tmp_path):
    dest = tmp_path / "chat.json"
    choose(monkeypatch, main_window, dest)
    window.export_telemetry()
    assert status(window).startswith("exported ") and status(window).endswith(f" to {dest}")
    assert dest.exists()
