"""The catalog's fit column from the headers: equal to the local estimate, cached on disk so a
second look costs no network, and a size estimate (marked so) when a header cannot be read."""

from __future__ import annotations

import socket

from helpers.hub_server import REPO, serve_small_files
from specchat.models.catalog import CatalogModel, CatalogPair
from specchat.models.catalog_fit import catalog_fits
from specchat.models.fit import estimate_files, fit_pair

GIB = 1 << 30


def pair(target: CatalogModel, *drafts: CatalogModel, pair_id: str = "p") -> CatalogPair:
    return CatalogPair(pair_id, pair_id, target, tuple(drafts))


def test_the_verdict_is_the_header_estimate_and_a_second_look_reads_nothing(hub, hub_files, qwen_target, qwen_draft,
                                                                            tmp_path):
    t, d = hub_files["qwen-1.5b"], hub_files["qwen-0.5b"]
    pairs = [pair(CatalogModel(t.repo_id, t.filename, size=1), CatalogModel(d.repo_id, d.filename, size=1))]
    machine = {"free_vram": None, "free_ram": 16 * GIB}

    first = catalog_fits(pairs, cache_dir=tmp_path / "fit-cache", **machine)
    requests = len(hub.requests)
    second = catalog_fits(pairs, cache_dir=tmp_path / "fit-cache", **machine)

    expected = fit_pair(estimate_files([qwen_target, qwen_draft], n_ctx=4096), **machine)
    assert first["p"] == expected and not first["p"].estimated  # not the size guess (sizes say 1 byte here)
    assert second["p"] == expected
    assert len(hub.requests) == requests  # the second call asked the hub nothing
    assert hub.sent(t.repo_id, t.filename) < 0.02 * qwen_target.stat().st_size


def test_installed_files_are_read_locally_and_a_damaged_cache_is_ignored(tmp_path, monkeypatch):
    with serve_small_files(tmp_path, monkeypatch) as server:
        tiny = CatalogModel(REPO, "tiny.gguf")
        big = CatalogModel(REPO, "two-mib.gguf", sha256=server.files[(REPO, "two-mib.gguf")].sha256)
        local = server.files[(REPO, "tiny.gguf")].path
        cache = tmp_path / "cache"
        got = catalog_fits([pair(tiny, big)], free_vram=None, free_ram=GIB, cache_dir=cache,
                           installed={tiny.ref: local})
        assert server.gets(REPO, "tiny.gguf") == [] and server.gets(REPO, "two-mib.gguf")
        assert got["p"] == fit_pair(estimate_files([local, server.files[(REPO, "two-mib.gguf")].path], n_ctx=4096),
                                    free_vram=None, free_ram=GIB)
        for f in cache.glob("*.json"):  # damaged in every way a cache file can be
            f.write_text('{"version": 1, "key": 3, "facts": {"n_layers": -1}}')
        server.reset()
        again = catalog_fits([pair(tiny, big)], free_vram=None, free_ram=GIB, cache_dir=cache,
                             installed={tiny.ref: local})
        assert again == got and server.gets(REPO, "two-mib.gguf")  # read again, and rewritten
        server.reset()
        catalog_fits([pair(tiny, big)], free_vram=None, free_ram=GIB, cache_dir=cache, installed={tiny.ref: local})
        assert server.gets(REPO, "two-mib.gguf") == []


def test_an_unreadable_header_keeps_the_size_estimate_and_says_why(tmp_path, monkeypatch):
    with serve_small_files(tmp_path, monkeypatch) as server:
        notes = CatalogModel(REPO, "notes.gguf", size=3 * GIB)  # a text file, not a GGUF
        got = catalog_fits([pair(notes, pair_id="text")], free_vram=None, free_ram=2 * GIB, cache_dir=tmp_path / "c")
        v = got["text"]
        assert v.estimated and not v.fits and "estimated from file sizes" in v.summary
        assert "notes.gguf" in v.summary and "not a GGUF file" in v.summary and "\n" not in v.summary
        server.gate(REPO)
        gated = catalog_fits([pair(CatalogModel(REPO, "tiny.gguf", size=100), pair_id="g")], free_vram=None,
                             free_ram=GIB, cache_dir=tmp_path / "c")["g"]
        assert gated.estimated and "gated" in gated.summary


def test_a_hub_that_is_down_gives_estimates_not_errors(tmp_path, monkeypatch):
    from helpers.hub_server import point_huggingface_hub_at

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "hf").mkdir()
    point_huggingface_hub_at(f"http://127.0.0.1:{port}", tmp_path / "hf", monkeypatch)
    got = catalog_fits([pair(CatalogModel("a/b", "c-Q4_K_M.gguf", size=GIB), pair_id="x")], free_vram=None,
                       free_ram=8 * GIB, cache_dir=tmp_path / "c")
    assert got["x"].estimated and got["x"].fits and "cannot reach" in got["x"].summary
