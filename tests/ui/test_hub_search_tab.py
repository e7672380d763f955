"""Models → Search the hub, end to end against the local hub server: search and sort, a repo's
files by quantisation with a fit verdict from the headers, a gated repo in one line, and
downloading a split model (all parts, registered by its first)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.hub_server import HubServer, point_huggingface_hub_at, write_small_gguf, write_split_gguf

QUANTS = "bartowski/Tiny-Coder-7B-Instruct-GGUF"
GATED = "someone/Tiny-Coder-GGUF-gated"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    served = tmp_path / "served"
    served.mkdir()
    server = HubServer()
    one = write_small_gguf(served / "one.gguf")
    for name in ("Tiny-Coder-7B-Instruct-Q8_0.gguf", "Tiny-Coder-7B-Instruct-Q4_K_M.gguf"):
        server.add_file(QUANTS, name, one)
    for part in write_split_gguf(served / "Tiny-Coder-7B-Instruct-Q6_K.gguf"):
        server.add_file(QUANTS, part.name, part)
    server.set_repo(QUANTS, downloads=500, likes=3)
    server.add_file(GATED, "Tiny-Coder-Q4_0.gguf", one)
    server.set_repo(GATED, downloads=10, likes=50, gated="manual")
    server.set_repo("tiny/Tiny-Coder-7B-Instruct", downloads=10_000, likes=99, library="transformers")
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server


def _dialog(qtbot, fake_app):  # noqa: ANN001, ANN202
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    return s, dialog


def _column(table, col: int) -> list[str]:  # noqa: ANN001
    return [table.item(r, col).text() for r in range(table.rowCount())]


def test_search_sorts_lists_quants_with_fit_and_explains_a_gated_repo(qtbot, fake_app, hub) -> None:  # noqa: ANN001
    s, dialog = _dialog(qtbot, fake_app)
    tab = dialog.search_tab
    tab.query.setText("tiny-coder")
    tab.search()
    qtbot.waitUntil(lambda: tab.repos.rowCount() == 2, timeout=10_000)
    assert _column(tab.repos, 0) == [QUANTS, GATED]  # most downloaded first; the transformers repo is not GGUF
    tab.sort.setCurrentIndex(tab.sort.findData("likes"))
    qtbot.waitUntil(lambda: _column(tab.repos, 0) == [GATED, QUANTS], timeout=10_000)
    assert _column(tab.repos, 4) == ["gated", "open"]

    tab.repos.selectRow(1)
    qtbot.waitUntil(lambda: tab.files.rowCount() == 3, timeout=10_000)
    assert _column(tab.files, 1) == ["Q4_K_M", "Q6_K", "Q8_0"]
    assert _column(tab.files, 3) == ["1", "3", "1"]
    qtbot.waitUntil(lambda: "reading header…" not in _column(tab.files, 4), timeout=20_000)
    assert set(_column(tab.files, 4)) <= {"fits on the GPU", "partly on the GPU", "CPU only"}  # read, not guessed

    tab.repos.selectRow(0)
    qtbot.waitUntil(lambda: tab.files.rowCount() == 1, timeout=10_000)
    assert "gated repo" in tab.status.text() and "hf auth login" in tab.status.text()


def test_a_split_model_downloads_all_its_parts_and_is_listed_by_its_first(qtbot, fake_app, hub) -> None:  # noqa: ANN001
    s, dialog = _dialog(qtbot, fake_app)
    tab = dialog.search_tab
    tab.query.setText("Instruct")
    tab.search()
    qtbot.waitUntil(lambda: tab.repos.rowCount() == 1, timeout=10_000)
    tab.repos.selectRow(0)
    qtbot.waitUntil(lambda: tab.files.rowCount() == 3, timeout=10_000)
    tab.files.selectRow(1)
    assert tab.selected_entry().split
    tab.download_button.click()
    qtbot.waitUntil(lambda: "Downloaded" in dialog.progress_label.text() or "Not" in dialog.progress_label.text(),
                    timeout=20_000)
    assert "Downloaded and verified" in dialog.progress_label.text(), dialog.progress_label.text()
    [model] = s.registry.models()
    assert model.source.endswith("-00001-of-00003.gguf")
    for i in (1, 2, 3):
        assert hub.sent(QUANTS, f"Tiny-Coder-7B-Instruct-Q6_K-0000{i}-of-00003.gguf") > 0
    assert dialog.tabs.count() >= 3 and tab.download_button.isEnabled()
