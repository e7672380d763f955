"""Presets in the window: the header's Preset… and Chat → Presets… open the dialog; a preset picked
there is the chat's settings (its models kept) or a new chat's; edits are saved, exported, imported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from helpers.fakes import FakeSpec
from specchat.presets import PresetLibrary
from specchat.ui.presets_dialog import PresetsDialog


def select(dialog: PresetsDialog, name: str) -> None:
    rows = [dialog.list.item(i).data(Qt.ItemDataRole.UserRole).name for i in range(dialog.list.count())]
    dialog.list.setCurrentRow(rows.index(name))


@pytest.fixture
def window(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=10))
    chat = app.add_chat("Work", system_prompt="old prompt", speculation="draft")
    s = app.start(qtbot)
    s.window.open_chat(chat)
    return app, s, chat


def test_the_header_and_the_menu_open_the_presets(qtbot, window, monkeypatch):
    _app, s, _chat = window
    opened = []
    monkeypatch.setattr(PresetsDialog, "exec", lambda self: opened.append(self) or 0)
    qtbot.mouseClick(s.window.pane.header.presets, Qt.MouseButton.LeftButton)
    s.window.actions_by_slot["open_presets"].trigger()
    assert len(opened) == 2
    assert [opened[0].list.item(i).text() for i in range(3)] == [
        "Code editing (lookup)  (shipped)", "JSON extraction  (shipped)", "Plain speed reference  (shipped)"]


def test_a_picked_preset_is_the_chats_settings_and_its_models_stay(qtbot, window):
    app, s, chat = window
    before = s.store.get_chat(chat).settings
    dialog = PresetsDialog(PresetLibrary.of(app.root / "presets-test"), s.window)
    qtbot.addWidget(dialog)
    dialog.applyRequested.connect(s.window.apply_preset)
    select(dialog, "Code editing (lookup)")
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    after = s.store.get_chat(chat).settings
    assert (after.target, after.draft) == (before.target, before.draft)
    assert after.speculation == "lookup" and after.system_prompt.startswith("You edit code")
    assert s.window.pane.header.speculation.currentData() == "lookup"  # the header shows it at once


def test_a_new_chat_takes_the_json_preset(qtbot, window):
    app, s, chat = window
    dialog = PresetsDialog(PresetLibrary.of(app.root / "presets-test"), s.window)
    qtbot.addWidget(dialog)
    dialog.newChatRequested.connect(s.window.new_chat)
    select(dialog, "JSON extraction")
    qtbot.mouseClick(dialog.new_chat_button, Qt.MouseButton.LeftButton)
    assert s.window.chat_id != chat
    settings = s.store.get_chat(s.window.chat_id).settings
    assert settings.sampling.structured.kind == "json_schema" and settings.task == "json"


def test_edit_save_export_and_import_in_the_dialog(qtbot, window, tmp_path):
    app, s, _chat = window
    library = PresetLibrary.of(app.root / "presets-test")
    dialog = PresetsDialog(library, s.window)
    qtbot.addWidget(dialog)
    qtbot.mouseClick(dialog.new_button, Qt.MouseButton.LeftButton)
    dialog.name.setText("Careful reviewer")
    dialog.system.setPlainText("Review the code; list problems.")
    dialog.temperature.setValue(0.3)
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    assert library.get("Careful reviewer").settings.sampling.temperature == pytest.approx(0.3)
    out = dialog.export_to(tmp_path / "reviewer.json")
    assert json.loads(Path(out).read_text())["settings"]["system_prompt"] == "Review the code; list problems."
    other = PresetsDialog(PresetLibrary.of(tmp_path / "elsewhere"), s.window)
    qtbot.addWidget(other)
    assert other.import_from(tmp_path / "reviewer.json").name == "Careful reviewer"
    assert other.selected().name == "Careful reviewer"


def test_a_bad_schema_is_one_line_and_nothing_is_saved(qtbot, window):
    app, s, _chat = window
    library = PresetLibrary.of(app.root / "presets-test")
    dialog = PresetsDialog(library, s.window)
    qtbot.addWidget(dialog)
    select(dialog, "JSON extraction")
    dialog.structured_text.setPlainText("{not json")
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    assert "the JSON schema does not read" in dialog.line.text()
    assert library.get("JSON extraction").shipped  # nothing written
