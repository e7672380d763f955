"""Models → Download pair checks both headers first, as ``specchat models pull`` does.

Driven against the local hub server (tests/helpers/hub_server.py) with two generated 2 MiB
GGUFs: an incompatible pair is refused with the reason after a few kB of headers, and no
weights are fetched; a compatible pair is checked, then downloaded and registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.hub_server import HubServer, point_huggingface_hub_at, write_small_gguf

REPO_T, REPO_D = "test/target-GGUF", "test/draft-GGUF"
SIZE_FLOATS = 8 << 20  # 32 MiB of weights each; a header read fetches its first 1 MiB range
TOKENS = ("<unk>", "<s>", "</s>", "a", "b", "ab", "abc", "ba", "bab")


def _catalog(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '[[pair]]\nid = "tiny-pair"\nname = "Tiny pair"\nlicence = "MIT"\n'
        f'target = {{ repo = "{REPO_T}", file = "target.gguf" }}\n'
        f'drafts = [ {{ repo = "{REPO_D}", file = "draft.gguf" }} ]\n')
    return path


@pytest.fixture
def hub_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HubServer, Path]]:
    served = tmp_path / "served"
    served.mkdir()
    server = HubServer()
    server.add_file(REPO_T, "target.gguf", write_small_gguf(served / "target.gguf", TOKENS, SIZE_FLOATS))
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server, served


def _dialog(qtbot, fake_app):  # noqa: ANN001, ANN202
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    _catalog(s.profile.user_catalog)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    row = next(r for r in range(dialog.catalog.rowCount()) if dialog.catalog.item(r, 0).text().startswith("Tiny pair"))
    dialog.catalog.selectRow(row)
    return s, dialog


def test_an_incompatible_pair_is_refused_from_its_headers_before_any_weights(qtbot, fake_app, hub_pair) -> None:  # noqa: ANN001
    server, served = hub_pair
    other = ("<unk>", "<s>", "</s>", "x", "y", "xy", "abc", "ba", "bab")  # token 5 (the first compared) differs
    server.add_file(REPO_D, "draft.gguf", write_small_gguf(served / "draft.gguf", other, SIZE_FLOATS))
    s, dialog = _dialog(qtbot, fake_app)
    dialog.download_selected()
    qtbot.waitUntil(lambda: dialog.download_button.isEnabled(), timeout=10_000)
    text = dialog.progress_label.text()
    assert text.startswith("Not downloaded") and "token 5 differs" in text
    size = (served / "target.gguf").stat().st_size
    for repo, name in ((REPO_T, "target.gguf"), (REPO_D, "draft.gguf")):
        assert 0 < server.sent(repo, name) < size // 10  # a header, not the weights
    assert dialog.downloads.active is None and not s.registry.models()


def test_a_compatible_pair_is_checked_then_downloaded_and_registered(qtbot, fake_app, hub_pair) -> None:  # noqa: ANN001
    server, served = hub_pair
    server.add_file(REPO_D, "draft.gguf", write_small_gguf(served / "draft.gguf", TOKENS, SIZE_FLOATS // 4))
    s, dialog = _dialog(qtbot, fake_app)
    dialog.download_selected()
    qtbot.waitUntil(lambda: dialog.download_button.isEnabled(), timeout=20_000)
    text = dialog.progress_label.text()
    assert "Headers checked" in text and "Downloaded and verified" in text, text
    assert sorted(m.source for m in s.registry.models()) == [f"{REPO_D}/draft.gguf", f"{REPO_T}/target.gguf"]
    assert server.sent(REPO_T, "target.gguf") >= (served / "target.gguf").stat().st_size


def test_cancel_during_the_check_starts_no_download(qtbot, fake_app, hub_pair) -> None:  # noqa: ANN001
    server, served = hub_pair
    server.add_file(REPO_D, "draft.gguf", write_small_gguf(served / "draft.gguf", TOKENS, SIZE_FLOATS))
    release = server.hold_heads()
    s, dialog = _dialog(qtbot, fake_app)
    dialog.download_selected()
    assert not dialog.download_button.isEnabled()
    dialog.cancel_button.click()
    release.set()
    assert dialog.download_button.isEnabled() and "Cancelled" in dialog.progress_label.text()
    qtbot.wait(500)  # the check's late result is dropped: still no download
    assert dialog.downloads.active is None and not s.registry.models()


def test_the_catalog_fit_column_is_read_from_the_headers_once(qtbot, fake_app, hub_pair) -> None:  # noqa: ANN001
    server, served = hub_pair
    server.add_file(REPO_D, "draft.gguf", write_small_gguf(served / "draft.gguf", TOKENS, SIZE_FLOATS // 4))
    s, dialog = _dialog(qtbot, fake_app)
    row = dialog.catalog.selectionModel().selectedRows()[0].row()
    qtbot.waitUntil(lambda: "headers" not in dialog.catalog.item(row, 2).toolTip()
                    and "estimated" not in dialog.catalog.item(row, 2).toolTip()
                    and dialog._fit_task is None, timeout=20_000)
    cell = dialog.catalog.item(row, 2)
    assert "(from sizes)" not in cell.text()
    from specchat.models.fit import estimate_files, fit_pair

    expected = fit_pair(estimate_files([served / "target.gguf", served / "draft.gguf"], n_ctx=4096),
                        free_vram=dialog.free_vram, free_ram=dialog.free_ram)
    assert cell.text() == expected.label
    before = len(server.requests)
    again = s.window.models_dialog()
    qtbot.addWidget(again)
    qtbot.waitUntil(lambda: again._fit_task is None, timeout=20_000)
    assert not [r for r in server.requests[before:] if r.filename in ("target.gguf", "draft.gguf")]
