"""Hub search, a repo's GGUF files by quantisation, split GGUFs and gated repos, end to end against
the local hub server (small generated GGUFs: the fast tier)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.hub_server import HubServer, point_huggingface_hub_at, write_small_gguf, write_split_gguf
from specchat.errors import UserError
from specchat.models.fit import estimate_files, fit_pair
from specchat.models.hub import DownloadError
from specchat.models.hub_search import (
    HubQueryError,
    entry_fit,
    entry_of,
    gated_message,
    list_gguf_files,
    quant_of,
    search_repos,
)

GIB = 1 << 30
QUANTS = "bartowski/Tiny-Coder-7B-Instruct-GGUF"


@pytest.fixture
def small_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    served = tmp_path / "served"
    served.mkdir()
    server = HubServer()
    one = write_small_gguf(served / "one.gguf")
    for name in ("Tiny-Coder-7B-Instruct-Q8_0.gguf", "Tiny-Coder-7B-Instruct-Q4_K_M.gguf",
                 "Tiny-Coder-7B-Instruct-IQ4_XS.gguf", "Tiny-Coder-7B-Instruct-f16.gguf",
                 "Tiny-Coder-7B-Instruct-Q2_K.gguf", "mmproj-Tiny-Coder-f16.gguf"):
        server.add_file(QUANTS, name, one)
    for part in write_split_gguf(served / "Tiny-Coder-7B-Instruct-Q6_K.gguf"):
        server.add_file(QUANTS, f"Q6_K/{part.name}", part)
    # a split set with its second part missing on the hub
    for part in write_split_gguf(served / "Tiny-Coder-7B-Instruct-Q5_K_M.gguf")[::2]:
        server.add_file(QUANTS, part.name, part)
    server.add_file(QUANTS, "README.md", served / "one.gguf")
    server.set_repo(QUANTS, downloads=500, likes=3, last_modified="2024-03-01T00:00:00.000Z",
                    base_model="tiny/Tiny-Coder-7B-Instruct")
    server.add_file("tiny/Tiny-Coder-1B-GGUF", "Tiny-Coder-1B-Q4_K_M.gguf", one)
    server.set_repo("tiny/Tiny-Coder-1B-GGUF", downloads=900, likes=1, last_modified="2023-01-01T00:00:00.000Z")
    server.add_file("someone/Tiny-Coder-GGUF-gated", "Tiny-Coder-Q4_0.gguf", one)
    server.set_repo("someone/Tiny-Coder-GGUF-gated", downloads=10, likes=50, gated="manual",
                    last_modified="2025-06-30T10:00:00.000Z")
    server.set_repo("tiny/Tiny-Coder-7B-Instruct", downloads=10_000, likes=99, library="transformers")
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server


def test_search_sorts_by_downloads_likes_and_date_and_keeps_only_gguf_repos(small_hub):
    by_downloads = search_repos("tiny-coder")
    assert [h.repo_id for h in by_downloads] == ["tiny/Tiny-Coder-1B-GGUF", QUANTS, "someone/Tiny-Coder-GGUF-gated"]
    assert "tiny/Tiny-Coder-7B-Instruct" not in [h.repo_id for h in by_downloads]  # transformers, no GGUF
    assert [h.repo_id for h in search_repos("tiny", sort="likes")][0] == "someone/Tiny-Coder-GGUF-gated"
    newest = search_repos("", sort="updated")
    assert [h.updated for h in newest] == ["2025-06-30", "2024-03-01", "2023-01-01"]
    assert newest[0].gated == "manual" and newest[1].gated == ""
    assert [h.repo_id for h in search_repos("7B")] == [QUANTS]
    assert [h.repo_id for h in search_repos("coder", limit=1)] == ["tiny/Tiny-Coder-1B-GGUF"]
    assert search_repos("no such model") == []


@pytest.mark.parametrize("kwargs", [{"query": "x" * 201}, {"query": "two\nlines"}, {"query": "a", "sort": "size"},
                                    {"query": "a", "limit": 0}, {"query": "a", "limit": 101}])
def test_bad_search_input_is_one_line(small_hub, kwargs):
    with pytest.raises(HubQueryError) as exc:
        search_repos(**kwargs)
    assert "\n" not in str(exc.value) and isinstance(exc.value, UserError)
    assert small_hub.api_calls() == []  # refused before asking the hub


def test_a_hub_that_is_down_is_one_line_within_seconds(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "hf").mkdir()
    point_huggingface_hub_at(f"http://127.0.0.1:{port}", tmp_path / "hf", monkeypatch)
    start = time.monotonic()
    with pytest.raises(DownloadError) as exc:
        search_repos("qwen")
    assert time.monotonic() - start < 5  # huggingface_hub's list_models retries for ~23 s
    assert str(exc.value).startswith(f"cannot reach http://127.0.0.1:{port}") and "\n" not in str(exc.value)
    with pytest.raises(DownloadError, match="cannot reach"):
        list_gguf_files(QUANTS)


def test_files_are_grouped_by_quant_with_split_sets_as_one_entry(small_hub, tmp_path):
    listing = list_gguf_files(QUANTS)

    assert [(e.quant, e.name) for e in listing.entries] == [
        ("Q2_K", "Tiny-Coder-7B-Instruct-Q2_K.gguf"),
        ("IQ4_XS", "Tiny-Coder-7B-Instruct-IQ4_XS.gguf"),
        ("Q4_K_M", "Tiny-Coder-7B-Instruct-Q4_K_M.gguf"),
        ("Q6_K", "Q6_K/Tiny-Coder-7B-Instruct-Q6_K.gguf (3 parts)"),
        ("Q8_0", "Tiny-Coder-7B-Instruct-Q8_0.gguf"),
        ("F16", "Tiny-Coder-7B-Instruct-f16.gguf"),
    ]  # the mmproj file (a vision projector) and README.md are not models
    split = listing.entries[3]
    assert split.split and [f.filename for f in split.files] == [
        f"Q6_K/Tiny-Coder-7B-Instruct-Q6_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    served = [small_hub.files[(QUANTS, f.filename)] for f in split.files]
    assert split.size == sum(s.size for s in served) and [f.sha256 for f in split.files] == [s.sha256 for s in served]
    assert split.first.filename.endswith("-00001-of-00003.gguf")
    # the incomplete set is not offered, and a note says why
    assert not any("Q5_K_M" in e.name for e in listing.entries)
    assert listing.notes == ("Tiny-Coder-7B-Instruct-Q5_K_M.gguf: 2 of 3 parts on the hub (part 2 missing); "
                             "not offered",)
    assert listing.base_models == ("tiny/Tiny-Coder-7B-Instruct",) and listing.gated == ""
    # any part of the set names the whole entry; a part of the incomplete set is refused in one line
    assert entry_of(split.files[2]) == split
    with pytest.raises(DownloadError, match="part 2 missing"):
        entry_of(listing.entries[0].first.__class__(QUANTS, "Tiny-Coder-7B-Instruct-Q5_K_M-00001-of-00003.gguf"))


def test_a_split_model_fits_with_the_weights_of_all_its_parts(small_hub, tmp_path):
    split = next(e for e in list_gguf_files(QUANTS).entries if e.split)
    local = small_hub.files[(QUANTS, split.first.filename)].path

    verdict = entry_fit(split, free_vram=None, free_ram=8 * GIB, n_ctx=128)

    expected = fit_pair(estimate_files([local], n_ctx=128), free_vram=None, free_ram=8 * GIB)
    assert verdict.models[0].weights == 3 * 4096 * 4  # three parts of one 4096-float layer each
    assert verdict.models[0].weights == expected.models[0].weights and verdict.fits == expected.fits
    assert verdict.needed == expected.needed and not verdict.estimated


def test_a_gated_repo_lists_its_files_and_says_how_to_get_in(small_hub):
    listing = list_gguf_files("someone/Tiny-Coder-GGUF-gated")
    assert listing.gated == "manual" and [e.quant for e in listing.entries] == ["Q4_0"]

    message = gated_message(listing.repo_id, listing.gated, has_token=False)
    assert "\n" not in message and "hf auth login" in message and "HF_TOKEN" in message
    assert f"{small_hub.url}/someone/Tiny-Coder-GGUF-gated" in message and "by hand" in message
    assert "same token" in gated_message(listing.repo_id, "auto", has_token=True)
    assert gated_message(listing.repo_id, "", has_token=False) == ""
    with pytest.raises(DownloadError) as exc:  # its header cannot be read without access
        entry_fit(listing.entries[0], free_vram=None, free_ram=GIB)
    assert "gated" in str(exc.value) and "hf auth login" in str(exc.value) and "\n" not in str(exc.value)


def test_unknown_repo_and_revision_are_one_line(small_hub):
    with pytest.raises(DownloadError, match=r"^repository nobody/nothing not found on http"):
        list_gguf_files("nobody/nothing")
    with pytest.raises(DownloadError, match=r"^revision 'v9' not found in " + QUANTS):
        list_gguf_files(QUANTS, revision="v9")
    with pytest.raises(DownloadError, match="is not a hub repository"):
        list_gguf_files("../../etc")


def test_hostile_file_names_are_left_out_with_a_note(small_hub, tmp_path):
    bad = write_small_gguf(tmp_path / "bad.gguf")
    small_hub.add_file("evil/repo", "ok-Q4_0.gguf", bad)
    small_hub.add_file("evil/repo", "../../escape-Q4_0.gguf", bad)
    listing = list_gguf_files("evil/repo")
    assert [e.name for e in listing.entries] == ["ok-Q4_0.gguf"]
    assert len(listing.notes) == 1 and "not offered" in listing.notes[0]


@pytest.mark.parametrize(("name", "quant"), [
    ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "Q4_K_M"), ("Qwen_Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"),
    ("Llama-3.2-1B-Instruct-IQ4_XS.gguf", "IQ4_XS"), ("model.Q8_0.gguf", "Q8_0"), ("gemma-3-1b-it-BF16.gguf", "BF16"),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"), ("x-UD-Q4_K_XL.gguf", "Q4_K_XL"), ("model-fp16.gguf", "F16"),
    ("Big-Q3_K_L-00001-of-00004.gguf", "Q3_K_L"), ("IQ2_XXS/Big-IQ2_XXS.gguf", "IQ2_XXS"), ("model.gguf", "other"),
])
def test_quant_names_as_uploaders_write_them(name, quant):
    assert quant_of(name) == quant
