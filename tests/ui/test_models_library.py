"""Models → Installed is a library (each model named by its file, with quantisation, size, context,
architecture and folder; removed, or deleted when SpecChat downloaded it), and the catalog knows
which of its files are installed (an imported pair is used, never downloaded again)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gguf import GGUFValueType

from helpers.gguf_samples import write_gguf

STR, U32 = GGUFValueType.STRING, GGUFValueType.UINT32


def _model(path: Path, name: str, n_tensors: int, file_type: int = 15) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_gguf(path, n_tensors=n_tensors, extra={"general.name": (name, STR),
                                                        "general.file_type": (file_type, U32),
                                                        "llama.context_length": (32768, U32)})


@pytest.fixture
def pair_on_disk(tmp_path: Path) -> tuple[Path, Path]:
    """A target and a smaller draft imported from the user's own folder, the target's header naming another build."""
    return (_model(tmp_path / "mine" / "fam-coder-7b-instruct-q4_k_m.gguf", "Fam Coder 7B Instruct AWQ", 12),
            _model(tmp_path / "mine" / "fam-coder-0.5b-instruct-q8_0.gguf", "Fam Coder 0.5B", 2, file_type=7))


def _dialog(qtbot, fake_app, models, catalog: str = ""):  # noqa: ANN001, ANN202
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    if catalog:
        s.profile.user_catalog.parent.mkdir(parents=True, exist_ok=True)
        s.profile.user_catalog.write_text(catalog)
    for path in models:
        s.registry.add(path)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    return s, dialog


def test_the_library_names_each_file_and_shows_quant_size_context_architecture_and_folder(
        qtbot, fake_app, pair_on_disk) -> None:  # noqa: ANN001
    target, draft = pair_on_disk
    _s, dialog = _dialog(qtbot, fake_app, pair_on_disk)
    first = dialog.installed.item(0)  # the largest first
    name, details = first.text().split("\n")
    assert name == "fam-coder-7b-instruct-q4_k_m"  # the file's stem, not "... AWQ"
    assert details.split(" · ") == ["Q4_K_M", f"{target.stat().st_size / 1e3:.1f} kB", "32,768 ctx", "llama",
                                    str(target.parent.resolve())]
    assert "Fam Coder 7B Instruct AWQ" in first.toolTip()
    assert dialog.installed.item(1).text().split("\n")[1].startswith("Q8_0 · ")


def test_a_draft_larger_than_the_target_is_never_offered(qtbot, fake_app, pair_on_disk) -> None:  # noqa: ANN001
    _s, dialog = _dialog(qtbot, fake_app, pair_on_disk)
    dialog.installed.setCurrentRow(1)  # the small one as the target
    qtbot.waitUntil(lambda: dialog.drafts_read is None, timeout=10_000)
    texts = [dialog.drafts.item(i).text() for i in range(dialog.drafts.count())]
    assert texts[0].startswith("No draft") and len(texts) == 2
    assert texts[1].startswith("✗") and "as large as the target or larger" in texts[1]
    assert dialog.drafts.currentRow() == 0  # nothing usable chosen


def _two_pairs(target: Path, draft: Path) -> str:
    return ('[[pair]]\nid = "fam"\nname = "Fam pair"\n'
            f'target = {{ repo = "fam/Fam-Coder-7B-GGUF", file = "{target.name}", size = {target.stat().st_size} }}\n'
            f'drafts = [ {{ repo = "fam/Fam-Coder-0.5B-GGUF", file = "{draft.name}", size = {draft.stat().st_size} }} ]\n'
            '[[pair]]\nid = "half"\nname = "Half pair"\n'
            f'target = {{ repo = "fam/Fam-Coder-7B-GGUF", file = "{target.name}", size = {target.stat().st_size} }}\n'
            'drafts = [ { repo = "fam/Other-GGUF", file = "other-q4_k_m.gguf", size = 500000000 } ]\n')


def test_a_ctrl_still_held_never_turns_choosing_a_pair_into_a_toggle(qtbot, fake_app, pair_on_disk) -> None:  # noqa: ANN001
    """The dialog opened by a shortcut, Ctrl not yet released: the catalog still holds one pair, the one
    chosen (an extended selection read the live modifiers: Ctrl made selecting a toggle, and Download
    acted on another pair than the one highlighted, or on none)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest

    s, dialog = _dialog(qtbot, fake_app, pair_on_disk, _two_pairs(*pair_on_disk))
    QTest.keyClick(s.window, Qt.Key.Key_unknown, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.keyboardModifiers() == Qt.KeyboardModifier.ControlModifier  # held, as far as Qt knows
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    rows = {dialog.catalog.item(r, 0).text().split("  ★")[0]: r for r in range(dialog.catalog.rowCount())}
    for name, button in (("Half pair", "Download the missing file"), ("Fam pair", "Use pair"),
                         ("Fam pair", "Use pair"), ("Half pair", "Download the missing file")):
        dialog.catalog.selectRow(rows[name])
        assert [i.row() for i in dialog.catalog.selectionModel().selectedRows()] == [rows[name]]
        assert dialog.download_button.text() == button


def test_an_imported_pair_is_installed_in_the_catalog_and_used_without_a_download(
        qtbot, fake_app, pair_on_disk) -> None:  # noqa: ANN001
    target, draft = pair_on_disk
    catalog = _two_pairs(target, draft)
    _s, dialog = _dialog(qtbot, fake_app, pair_on_disk, catalog)
    rows = {dialog.catalog.item(r, 0).text().split("  ★")[0]: r for r in range(dialog.catalog.rowCount())}
    assert dialog.catalog.item(rows["Half pair"], 1).text() == "500.0 MB (target installed)"
    dialog.catalog.selectRow(rows["Half pair"])
    assert dialog.download_button.text() == "Download the missing file"
    row = rows["Fam pair"]
    assert dialog.catalog.item(row, 1).text() == "✓ installed"
    dialog.catalog.selectRow(row)
    assert dialog.download_button.text() == "Use pair"
    with qtbot.waitSignal(dialog.pairChosen, timeout=5_000) as chosen:
        dialog.download_button.click()
    assert chosen.args == [target.resolve(), draft.resolve()] and dialog.downloads.active is None


def test_removing_keeps_a_users_own_file_and_deleting_a_downloaded_one_asks_first(
        qtbot, fake_app, pair_on_disk, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    blob = cache / "models--fam--Fam-Coder-3B-GGUF" / "blobs" / ("cd" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(_model(tmp_path / "staging" / "x.gguf", "Fam 3B", 6).read_bytes())
    link = cache / "models--fam--Fam-Coder-3B-GGUF" / "snapshots" / ("1" * 40) / "fam-coder-3b-q4_k_m.gguf"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    s, dialog = _dialog(qtbot, fake_app, pair_on_disk)
    s.registry.add(link, source="fam/Fam-Coder-3B-GGUF/fam-coder-3b-q4_k_m.gguf")
    dialog.refresh_installed()
    asked: list[tuple[str, list[Path]]] = []

    def answer(choice: str):  # noqa: ANN202
        return lambda model, files: (asked.append((model.display_name, files)), choice)[1]

    rows = {dialog.installed.item(i).text().split("\n")[0]: i for i in range(dialog.installed.count())}
    dialog.installed.setCurrentRow(rows["fam-coder-7b-instruct-q4_k_m"])
    monkeypatch.setattr(dialog, "confirm_removal", answer("remove"))
    with qtbot.waitSignal(dialog.remove_selected().finished, timeout=10_000):
        pass
    assert asked[-1] == ("fam-coder-7b-instruct-q4_k_m", [])  # the user's own file: no delete offered
    assert pair_on_disk[0].exists() and "the file stays in" in dialog.message.text()

    rows = {dialog.installed.item(i).text().split("\n")[0]: i for i in range(dialog.installed.count())}
    assert "fam-coder-7b-instruct-q4_k_m" not in rows
    dialog.installed.setCurrentRow(rows["fam-coder-3b-q4_k_m"])  # its hub name, not the blob's sha256
    monkeypatch.setattr(dialog, "confirm_removal", answer(None))  # cancelled: nothing happens
    assert dialog.remove_selected() is None and blob.exists()
    monkeypatch.setattr(dialog, "confirm_removal", answer("delete"))
    with qtbot.waitSignal(dialog.remove_selected().finished, timeout=10_000):
        pass
    assert asked[-1] == ("fam-coder-3b-q4_k_m", [link, blob.resolve()])
    assert not blob.exists() and not link.is_symlink() and dialog.message.text().startswith("Deleted fam-coder-3b")
    assert [Path(m.path).name for m in s.registry.models()] == [pair_on_disk[1].name]
