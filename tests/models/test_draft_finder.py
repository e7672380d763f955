"""The draft finder end to end against the local hub: candidates from the family, the size range,
header-only checks, ranking, bounds.  Small generated GGUFs (fast tier) and the real test models
(real_models tier: the Qwen 0.5B draft found for the 1.5B target, Gemma and SmolLM2 refused)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import test_models
from helpers.hub_server import REPOS, HubServer, point_huggingface_hub_at, write_small_gguf
from specchat.cancel import CancelToken
from specchat.models.catalog import CatalogModel, CatalogPair
from specchat.models.draft_finder import family_of, find_drafts, target_entry
from specchat.models.hub import DownloadCancelled

TOKENS = tuple(f"t{i}" for i in range(200))
OTHER_TOKENS = TOKENS[:50] + ("different",) + TOKENS[51:]
TARGET = "fam/Fam-Coder-7B-Instruct-GGUF"


@pytest.fixture
def family_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """A 7B-named target (~160 kB) and its family: 0.5B (10x smaller), 3B (2.5x), 6B (1.2x), a 1B
    with another tokenizer, a 14B (larger: never looked at), a gated 0.3B, and an unrelated repo."""
    d = tmp_path / "served"
    d.mkdir()
    server = HubServer()

    def model(repo: str, file: str, floats: int, tokens: tuple[str, ...] = TOKENS) -> None:
        server.add_file(repo, file, write_small_gguf(d / f"{repo.replace('/', '_')}-{file}", tokens, floats))

    model(TARGET, "Fam-Coder-7B-Instruct-Q4_K_M.gguf", 40_000)
    model("fam/Fam-Coder-0.5B-Instruct-GGUF", "Fam-Coder-0.5B-Instruct-Q8_0.gguf", 8_000)
    model("fam/Fam-Coder-0.5B-Instruct-GGUF", "Fam-Coder-0.5B-Instruct-Q4_K_M.gguf", 3_000)
    model("fam/Fam-Coder-3B-Instruct-GGUF", "Fam-Coder-3B-Instruct-Q4_K_M.gguf", 15_500)
    model("fam/Fam-Coder-6B-Instruct-GGUF", "Fam-Coder-6B-Instruct-Q4_K_M.gguf", 33_000)
    model("fam/Fam-Coder-14B-Instruct-GGUF", "Fam-Coder-14B-Instruct-Q4_K_M.gguf", 2_000)
    model("uploader/Fam-Coder-1B-Instruct-GGUF", "Fam-Coder-1B-Instruct-Q4_K_M.gguf", 4_000, OTHER_TOKENS)
    model("fam/Fam-Coder-0.3B-GGUF", "Fam-Coder-0.3B-Q4_K_M.gguf", 3_000)
    server.set_repo("fam/Fam-Coder-0.3B-GGUF", gated="manual")
    model("else/Unrelated-0.5B-GGUF", "Unrelated-0.5B-Q4_K_M.gguf", 3_000)
    server.set_repo(TARGET, base_model="fam/Fam-Coder-7B-Instruct")
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server


def by_repo(found):
    return {c.entry.repo_id: c for c in found}


def test_family_from_names():
    assert family_of("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF") == ("Qwen2.5-Coder", 1500.0)
    assert family_of("bartowski/Qwen_Qwen3-0.6B-GGUF") == ("Qwen_Qwen3", 600.0)
    assert family_of("ggml-org/gemma-3-270m-GGUF") == ("gemma-3", 270.0)
    assert family_of("Llama-3.2-1B-Instruct") == ("Llama-3.2", 1000.0)
    assert family_of("someone/NoSize-GGUF") == ("NoSize", None)


def test_the_family_is_searched_checked_and_ranked(family_hub):
    messages: list[str] = []
    found = find_drafts(target_entry(TARGET), catalog=[], progress=messages.append)

    got = by_repo(found)
    assert "fam/Fam-Coder-14B-Instruct-GGUF" not in got  # its name says it is larger: not even listed
    assert "else/Unrelated-0.5B-GGUF" not in got  # another family
    best = found[0]
    assert best.entry.repo_id == "fam/Fam-Coder-0.5B-Instruct-GGUF" and best.compatible and best.reason == ""
    assert best.entry.quant == "Q4_K_M"  # the target's quantisation, though a Q8_0 is there too
    assert best.source == "organisation" and 5 <= best.ratio <= 20 and best.note == ""
    three = got["fam/Fam-Coder-3B-Instruct-GGUF"]
    assert three.compatible and three.note.startswith("2.") and "outside the usual 5-20x" in three.note
    assert [c.compatible for c in found] == [True, True, False, False, False]  # compatible ones first
    other = got["uploader/Fam-Coder-1B-Instruct-GGUF"]
    assert not other.compatible and other.reason == "token 50 differs: 't50' vs 'different'"
    assert other.source == "base_model"  # found by the family of the target's base model, not by its org
    six = got["fam/Fam-Coder-6B-Instruct-GGUF"]
    assert six.reason.startswith("too large: only 1.2x smaller than the target") and six.bytes_read == 0
    gated = got["fam/Fam-Coder-0.3B-GGUF"]
    assert gated.reason.startswith("gated: ") and "hf auth login" in gated.reason and "\n" not in gated.reason
    assert family_hub.sent("fam/Fam-Coder-6B-Instruct-GGUF", "Fam-Coder-6B-Instruct-Q4_K_M.gguf") == 0
    assert any("checking" in m for m in messages)


def test_catalog_drafts_are_candidates_and_the_checks_are_bounded(family_hub):
    pair = CatalogPair("mine", "mine", CatalogModel(TARGET, "Fam-Coder-7B-Instruct-Q4_K_M.gguf"),
                       (CatalogModel("uploader/Fam-Coder-1B-Instruct-GGUF", "Fam-Coder-1B-Instruct-Q4_K_M.gguf"),))
    found = find_drafts(target_entry(TARGET), catalog=[pair], limit_checks=1)

    got = by_repo(found)
    assert got["uploader/Fam-Coder-1B-Instruct-GGUF"].source == "catalog"
    checked = [c for c in found if not c.reason.startswith(("not checked", "too large"))]
    assert len(checked) == 1 and checked[0].entry.repo_id == "fam/Fam-Coder-0.5B-Instruct-GGUF"  # nearest 10x first
    assert sum(c.reason.startswith("not checked: the limit of 1 header checks") for c in found) == 3


def test_a_local_target_and_a_cancel(family_hub, tmp_path):
    local = tmp_path / "Fam-Coder-7B-Instruct-Q4_K_M.gguf"  # no base model or basename in it: its name
    local.write_bytes(family_hub.files[(TARGET, local.name)].path.read_bytes())
    found = find_drafts(local, catalog=[])
    assert found[0].compatible and found[0].entry.repo_id == "fam/Fam-Coder-0.5B-Instruct-GGUF"
    assert found[0].source == "name"

    with pytest.raises(DownloadCancelled):
        find_drafts(local, catalog=[], cancel=CancelledAtCheck(3))


class CancelledAtCheck(CancelToken):
    """A token that reads as cancelled from its ``n``-th look on: the cancel lands mid-search."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.looks = iter(range(100))
        self.n = n

    @property
    def cancelled(self) -> bool:
        return next(self.looks) >= self.n


# --- the real models ------------------------------------------------------------------------------


def test_the_qwen_draft_is_found_and_gemma_and_smollm_are_refused(hub, hub_files):
    """Qwen2.5-Coder 1.5B as target; the 0.5B (same org and family), Gemma 3 270M and SmolLM2 135M
    (paired with it in a user's catalog) as candidates.  Bytes per candidate stay ~header-sized."""
    hub.set_repo(REPOS["qwen-1.5b"], base_model="Qwen/Qwen2.5-Coder-1.5B-Instruct", downloads=100)
    hub.set_repo(REPOS["qwen-0.5b"], base_model="Qwen/Qwen2.5-Coder-0.5B-Instruct", downloads=50)
    target = CatalogModel(REPOS["qwen-1.5b"], hub_files["qwen-1.5b"].filename)
    catalog = [CatalogPair("user-pair", "user pair", target, tuple(
        CatalogModel(REPOS[n], hub_files[n].filename) for n in ("gemma-270m", "smollm2-135m")))]

    start = time.monotonic()
    found = find_drafts(target_entry(f"{REPOS['qwen-1.5b']}/{hub_files['qwen-1.5b'].filename}"), catalog=catalog)
    took = time.monotonic() - start

    got = by_repo(found)
    qwen, gemma, smol = got[REPOS["qwen-0.5b"]], got[REPOS["gemma-270m"]], got[REPOS["smollm2-135m"]]
    assert found[0] is qwen and qwen.compatible and qwen.source == "organisation"
    assert 2 < qwen.ratio < 2.5 and "outside the usual 5-20x" in qwen.note
    assert gemma.reason == "tokenizer type differs: 'gpt2' vs 'llama'" and gemma.source == "catalog"
    assert smol.reason == "vocabulary sizes differ by 102784 (> 128): 151936 vs 49152"
    print(f"find_drafts took {took:.2f} s against the local hub")
    for name, c in (("qwen-0.5b", qwen), ("gemma-270m", gemma), ("smollm2-135m", smol)):
        file = hub_files[name]
        sent, size = hub.sent(file.repo_id, file.filename), test_models.MODELS[name].size
        print(f"{name}: {sent:,} bytes read of {size:,} ({sent / size:.2%})")
        assert sent == c.bytes_read and sent < 0.02 * size


# --- installed files, and a hub that cannot be reached --------------------------------------------


@pytest.fixture
def no_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A hub endpoint nothing listens on (connection refused): the newcomer's machine without a network."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "hf-home").mkdir()
    point_huggingface_hub_at(f"http://127.0.0.1:{port}", tmp_path / "hf-home", monkeypatch)
    return f"http://127.0.0.1:{port}"


def test_with_the_hub_unreachable_installed_files_and_the_catalog_are_used_and_it_says_so(no_hub, tmp_path):
    from specchat.models.draft_finder import search_drafts
    from specchat.models.registry import Registry

    d = tmp_path / "mine"
    d.mkdir()
    target = write_small_gguf(d / "Fam-Coder-7B-Instruct-Q4_K_M.gguf", TOKENS, 40_000)
    registry = Registry(tmp_path / "registry.json")
    for name, floats, tokens in (("Fam-Coder-0.5B-Instruct-Q4_K_M.gguf", 3_000, TOKENS),
                                 ("Fam-Coder-1B-Instruct-Q4_K_M.gguf", 4_000, OTHER_TOKENS),
                                 ("Fam-Coder-6B-Instruct-Q4_K_M.gguf", 33_000, TOKENS),
                                 ("Fam-Coder-14B-Instruct-Q4_K_M.gguf", 80_000, TOKENS)):
        registry.add(write_small_gguf(d / name, tokens, floats))
    registry.add(target)
    pair = CatalogPair("fam", "Fam pair", CatalogModel(TARGET, "Fam-Coder-7B-Instruct-Q4_K_M.gguf"),
                       (CatalogModel("fam/Fam-Coder-0.3B-GGUF", "Fam-Coder-0.3B-Q4_K_M.gguf", 12_000),))

    search = search_drafts(target, catalog=[pair], installed=registry.models())

    assert "cannot reach" in search.hub_unreachable and no_hub in search.hub_unreachable
    best = search.candidates[0]
    assert best.compatible and best.entry is None and Path(best.path).name == "Fam-Coder-0.5B-Instruct-Q4_K_M.gguf"
    assert best.source == "installed" and 5 <= best.ratio <= 20
    by_name = {Path(c.ref).name: c for c in search.candidates}
    assert "Fam-Coder-14B-Instruct-Q4_K_M.gguf" not in by_name  # larger than the target: never a draft
    assert "Fam-Coder-7B-Instruct-Q4_K_M.gguf" not in by_name  # the target itself
    assert "differs" in by_name["Fam-Coder-1B-Instruct-Q4_K_M.gguf"].reason
    assert by_name["Fam-Coder-6B-Instruct-Q4_K_M.gguf"].reason.startswith("too large")
    catalog = by_name["Fam-Coder-0.3B-Q4_K_M.gguf"]
    assert catalog.source == "catalog" and catalog.entry is not None and not catalog.compatible
    assert catalog.reason.startswith("not checked: the hub was unreachable")
