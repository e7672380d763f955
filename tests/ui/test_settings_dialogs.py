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

    from helpers.fake_llama_server import HELP
    from specchat.remote.llama_server import MANAGED

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


# -- the settings in force change as the user saves them: who listens, and what they do ----------------


def _settings_ok(qtbot, window, **fields) -> None:
    """Open Settings… from the window, set the fields as a user would and press OK."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QComboBox, QDialogButtonBox

    seen = []

    def drive() -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, SettingsDialog)
        for key, value in fields.items():
            w = dialog.fields[key]
            w.setCurrentText(value) if isinstance(w, QComboBox) else w.setValue(value)
        dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()
        seen.append(dialog)

    QTimer.singleShot(0, drive)
    window.edit_app_settings()
    assert seen and seen[0].result() == SettingsDialog.DialogCode.Accepted


def test_new_fallback_thresholds_move_the_panels_rails_without_a_restart(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    panel = s.window.telemetry
    panel.show()  # collapsed until an answer has rounds to plot; its timer draws only while it shows
    panel.repaint_now()
    assert (panel.tok_rail.value(), panel.seq_rail.value()) == (0.5, 0.6)
    _settings_ok(qtbot, s.window, min_token_acceptance=0.3, min_sequence_acceptance=0.85)
    # the panel's own timer draws them (no repaint asked for, no restart)
    qtbot.waitUntil(lambda: (panel.tok_rail.value(), panel.seq_rail.value()) == (0.3, 0.85), timeout=5_000)
    assert s.recorder.snapshot().min_token_acceptance == 0.3
    assert AppConfig(app.root / "config.toml")["min_sequence_acceptance"] == 0.85  # and saved
    assert s.config["min_token_acceptance"] == s.window.config["min_token_acceptance"] == 0.3


def test_only_a_setting_the_pair_is_loaded_with_reloads_the_pair(qtbot, fake_app):
    from specchat.ui.theme import current

    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    qtbot.waitUntil(lambda: s.answers.pair_info is not None, timeout=5_000)  # preloaded while idle
    loaded, loads = s.answers.loaded_pair, len(app.factory.loads)
    loading: list[str] = []
    s.answers.pairLoading.connect(loading.append)

    _settings_ok(qtbot, s.window, theme="dark", default_mode="lookup", remote_header_cap_mib=32, decode_nice=5)
    assert current().name == "dark" and s.window.actions_by_slot["set_theme:dark"].isChecked()  # the theme: yes
    assert loading == [] and s.answers.loaded_pair is loaded and s.answers.pair_info is not None  # the pair: no

    _settings_ok(qtbot, s.window, n_ctx=2048)
    assert len(loading) == 1  # reloaded at once (idle)
    qtbot.waitUntil(lambda: len(app.factory.loads) == loads + 1 and s.answers.pair_info is not None, timeout=5_000)
    assert app.factory.loads[-1].target_options.n_ctx == 2048


def test_new_thresholds_take_effect_from_the_next_answer_without_a_reload(qtbot, fake_app):
    """The controller's live settings (fallback thresholds, p_min, k_min) come with each answer: a
    change in Settings loads nothing again, and the next answer runs with them."""
    from helpers.app_driver import send, wait_idle

    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    qtbot.waitUntil(lambda: s.answers.pair_info is not None, timeout=5_000)
    loads = len(app.factory.loads)
    loading: list[str] = []
    s.answers.pairLoading.connect(loading.append)

    _settings_ok(qtbot, s.window, min_token_acceptance=0.3, min_sequence_acceptance=0.85, p_min=0.4, k_min=2)
    send(qtbot, s.window.pane, "hello")
    wait_idle(qtbot, s)

    assert loading == [] and len(app.factory.loads) == loads  # no reload, before or during the answer
    tuned = app.factory.pairs[-1].controller.settings
    assert (tuned.min_token_acceptance, tuned.min_sequence_acceptance, tuned.p_min, tuned.k_min) == (0.3, 0.85, 0.4, 2)
    assert tuned.k_max == app.factory.loads[-1].controller.k_max  # what it was loaded with stays

