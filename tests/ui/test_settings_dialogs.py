"""The settings dialog, built from the schema: what it saves, and a bad combination refused in one line."""

from __future__ import annotations

from pathlib import Path

from specchat.config import SCHEMA, AppConfig
from specchat.store import ChatSettings
from specchat.ui.settings_dialogs import ChatSettingsDialog, SettingsDialog


def test_every_setting_has_a_field_and_saved_values_come_back(qtbot, tmp_path):
    path = tmp_path / "config.toml"
    dialog = SettingsDialog(AppConfig(path))
    qtbot.addWidget(dialog)
    assert set(dialog.fields) == {s.key for s in SCHEMA}
    dialog.fields["target"].setText("  ~/models/big.gguf ")
    dialog.fields["k_max"].setValue(5)
    dialog.fields["default_mode"].setCurrentText("lookup")
    dialog.save()
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    again = AppConfig(path)
    assert again["target"] == "~/models/big.gguf" and again["k_max"] == 5 and again["default_mode"] == "lookup"


def test_k_min_above_k_max_stays_open_with_the_reason(qtbot, tmp_path):
    path = tmp_path / "config.toml"
    dialog = SettingsDialog(AppConfig(path))
    qtbot.addWidget(dialog)
    dialog.fields["k_min"].setValue(6)
    dialog.fields["k_max"].setValue(3)
    dialog.save()
    assert dialog.result() != SettingsDialog.DialogCode.Accepted
    assert "k_min" in dialog.error.text() and "k_max" in dialog.error.text() and "\n" not in dialog.error.text()
    assert not path.exists()  # nothing half-saved


def test_cancel_after_an_error_leaves_the_config_in_force_exactly_as_it_was(qtbot, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("k_max = 5\n")
    config = AppConfig(path)
    before = dict(config.values)
    dialog = SettingsDialog(config)
    qtbot.addWidget(dialog)
    dialog.fields["k_min"].setValue(6)
    dialog.fields["k_max"].setValue(3)
    dialog.fields["theme"].setCurrentText("dark")
    dialog.save()  # refused: k_min > k_max
    dialog.reject()
    assert config.values == before and config.controller().k_min <= config.controller().k_max
    assert dialog.result_config is None
    assert path.read_text() == "k_max = 5\n"


def test_ok_gives_a_new_config_and_leaves_the_old_object_alone(qtbot, tmp_path):
    config = AppConfig(tmp_path / "config.toml")
    dialog = SettingsDialog(config)
    qtbot.addWidget(dialog)
    dialog.fields["k_max"].setValue(4)
    dialog.save()
    assert dialog.result_config["k_max"] == 4 and config["k_max"] == 8


def test_saving_over_a_config_damaged_on_disk_keeps_it_aside_and_says_so(qtbot, tmp_path):
    path = tmp_path / "config.toml"
    dialog = SettingsDialog(AppConfig(path))
    qtbot.addWidget(dialog)
    path.write_bytes(b"k_max = = 3\n")  # damaged by hand while the dialog was open
    dialog.fields["k_max"].setValue(5)
    dialog.save()
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    [moved] = tmp_path.glob("config.toml.corrupt-*")
    assert moved.read_bytes() == b"k_max = = 3\n"
    assert len(dialog.notes) == 1 and moved.name in dialog.notes[0]
    assert AppConfig(path)["k_max"] == 5


def test_chat_settings_offers_the_servers_and_disables_what_the_server_decides(qtbot, tasks):
    dialog = ChatSettingsDialog(ChatSettings(target=Path("t.gguf"), draft=Path("d.gguf"), speculation="draft"),
                                servers=("gpu-box", "lab"), tasks=tasks)
    qtbot.addWidget(dialog)
    dialog.show()
    combo = dialog.backend
    assert [combo.itemData(i) for i in range(combo.count())] == ["", "llama-server", "gpu-box", "lab"]
    assert dialog.speculation.isEnabled() and not dialog.local_note.isVisible()
    combo.setCurrentIndex(combo.findData("lab"))
    assert not dialog.speculation.isEnabled() and not dialog.pair.isEnabled()
    assert dialog.local_note.isVisible() and "server decides" in dialog.local_note.text()
    chosen = dialog.result_settings()
    assert chosen.backend == "lab" and chosen.speculation == "draft" and chosen.target == Path("t.gguf")


def test_a_chat_whose_server_was_removed_keeps_naming_it(qtbot, tasks):
    dialog = ChatSettingsDialog(ChatSettings(backend="gone"), servers=("gpu-box",), tasks=tasks)
    qtbot.addWidget(dialog)
    assert dialog.backend.currentData() == "gone" and "not in Settings" in dialog.backend.currentText()
    assert dialog.result_settings().backend == "gone"


def test_the_llama_server_on_this_machine_offers_only_the_drafters_the_chats_models_can_use(
        qtbot, tmp_path, monkeypatch, tasks):
    """The managed backend lists the --spec-type values of the llama-server found on PATH (its real
    help text), usable ones enabled, the others greyed out with why (no MTP layers, no EAGLE3 head)."""
    import os
    import stat
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "remote"))
    from fake_llama_server import HELP

    from specchat.remote.backend import MANAGED

    (tmp_path / "help.txt").write_text(HELP)
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\ncat '{tmp_path / 'help.txt'}'\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    settings = ChatSettings(target=tmp_path / "t.gguf", draft=tmp_path / "d.gguf", server_spec_type="draft-mtp")
    d = ChatSettingsDialog(settings, tasks=tasks)
    qtbot.addWidget(d)
    d.backend.setCurrentIndex(d.backend.findData(MANAGED))
    qtbot.waitUntil(lambda: d.spec_types_check is None, timeout=10_000)  # its --help ran as a task
    kinds = {d.spec_type.itemData(i): d.spec_type.model().item(i).isEnabled() for i in range(d.spec_type.count())}
    assert kinds["draft-simple"] and kinds["ngram-mod"] and kinds["none"]
    assert not kinds["draft-mtp"] and not kinds["draft-eagle3"]
    assert "multi-token" in d.spec_type.model().item(d.spec_type.findData("draft-mtp")).toolTip()
    out = d.result_settings()
    assert out.backend == MANAGED and out.server_spec_type == "draft-simple"  # the asked-for one cannot run
    assert d.pair.isEnabled() and not d.speculation.isEnabled()
