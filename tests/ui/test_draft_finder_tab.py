"""Models → Find a draft, end to end against the local hub: candidates of the target's family,
the refused ones listed with their reason and not selectable, and one click that downloads the
draft with its target and makes them the chat's pair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from helpers.hub_server import HubServer, point_huggingface_hub_at, write_small_gguf

TOKENS = tuple(f"t{i}" for i in range(200))
OTHER = TOKENS[:50] + ("different",) + TOKENS[51:]
TARGET = "fam/Fam-Coder-7B-Instruct-GGUF"
DRAFT = "fam/Fam-Coder-0.5B-Instruct-GGUF"


@pytest.fixture
def family_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    d = tmp_path / "served"
    d.mkdir()
    server = HubServer()

    def model(repo: str, file: str, floats: int, tokens: tuple[str, ...] = TOKENS) -> None:
        server.add_file(repo, file, write_small_gguf(d / f"{repo.replace('/', '_')}-{file}", tokens, floats))

    model(TARGET, "Fam-Coder-7B-Instruct-Q4_K_M.gguf", 40_000)
    model(DRAFT, "Fam-Coder-0.5B-Instruct-Q4_K_M.gguf", 3_000)
    model("uploader/Fam-Coder-1B-Instruct-GGUF", "Fam-Coder-1B-Instruct-Q4_K_M.gguf", 4_000, OTHER)
    server.set_repo(TARGET, base_model="fam/Fam-Coder-7B-Instruct")
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server


def test_find_a_draft_lists_the_refused_with_reasons_and_one_click_sets_the_pair(qtbot, fake_app, family_hub) -> None:  # noqa: ANN001
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    finder = dialog.finder
    finder.ref.setText(TARGET)
    finder.find_button.click()
    qtbot.waitUntil(lambda: finder.table.rowCount() > 0, timeout=20_000)
    rows = [[finder.table.item(r, c).text() for c in range(5)] for r in range(finder.table.rowCount())]
    assert rows[0][0].startswith(DRAFT + "/") and rows[0][3] == "✓ compatible"
    refused = [r for r in range(finder.table.rowCount()) if finder.table.item(r, 3).text().startswith("✗")]
    assert refused and "differs" in finder.table.item(refused[0], 3).text()
    assert not finder.table.item(refused[0], 0).flags() & Qt.ItemFlag.ItemIsSelectable
    assert "compatible" in finder.status.text() and "refused" in finder.status.text()

    with qtbot.waitSignal(dialog.pairChosen, timeout=20_000) as chosen:
        finder.use_button.click()
    target, draft = chosen.args
    sources = {m.path: m.source for m in s.registry.models()}
    assert sources[str(target)].startswith(TARGET + "/") and sources[str(draft)].startswith(DRAFT + "/")


def test_an_unknown_target_is_one_line(qtbot, fake_app, family_hub) -> None:  # noqa: ANN001
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    dialog.finder.ref.setText("nobody/Nothing-GGUF")
    dialog.finder.find_button.click()
    qtbot.waitUntil(lambda: "nobody/Nothing-GGUF" in dialog.finder.status.text(), timeout=10_000)
    assert "\n" not in dialog.finder.status.text() and not dialog.finder.use_button.isEnabled()


@pytest.fixture
def no_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub endpoint nothing listens on: a machine without a network."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "hf-home").mkdir()
    point_huggingface_hub_at(f"http://127.0.0.1:{port}", tmp_path / "hf-home", monkeypatch)


def test_without_a_hub_an_installed_draft_is_offered_and_the_hub_named_unreachable(qtbot, fake_app, no_hub,
                                                                                   tmp_path) -> None:  # noqa: ANN001
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    mine = tmp_path / "mine"
    mine.mkdir()
    target = write_small_gguf(mine / "Fam-Coder-7B-Instruct-Q4_K_M.gguf", TOKENS, 40_000)
    draft = write_small_gguf(mine / "Fam-Coder-0.5B-Instruct-Q4_K_M.gguf", TOKENS, 3_000)
    for path in (target, draft):
        s.registry.add(path)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    finder = dialog.finder
    dialog.find_drafts(target)
    qtbot.waitUntil(lambda: finder.table.rowCount() > 0 and finder._task is None, timeout=20_000)
    status = finder.status.text()
    assert status.startswith("The hub was unreachable (cannot reach") and "no model of this family" not in status
    assert finder.table.item(0, 0).text().startswith("Fam-Coder-0.5B-Instruct-Q4_K_M.gguf  (installed")
    assert finder.table.item(0, 3).text().startswith("✓ compatible")
    assert finder.use_button.isEnabled() and finder.use_button.text() == "Use the pair"
    with qtbot.waitSignal(dialog.pairChosen, timeout=5_000) as chosen:
        finder.use_button.click()
    assert chosen.args == [target.resolve(), draft.resolve()] and dialog.downloads.active is None
