"""``specchat models search | files | drafts`` and the pull of a split GGUF, as a user runs them
against the local hub (small generated GGUFs: the fast tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.hub_server import HubServer, point_huggingface_hub_at, write_small_gguf, write_split_gguf

SPLIT_REPO = "big/Huge-70B-Instruct-GGUF"


@pytest.fixture
def split_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    served = tmp_path / "served"
    served.mkdir()
    server = HubServer()
    for part in write_split_gguf(served / "Huge-70B-Instruct-Q4_K_M.gguf", floats_per_layer=64 * 1024):
        server.add_file(SPLIT_REPO, f"Q4_K_M/{part.name}", part)
    server.add_file(SPLIT_REPO, "Huge-70B-Instruct-Q8_0.gguf", write_small_gguf(served / "q8.gguf"))
    server.set_repo(SPLIT_REPO, downloads=7, likes=2)
    server.add_file("big/Huge-1B-GGUF", "Huge-1B-Q4_K_M.gguf", write_small_gguf(served / "one.gguf"))
    server.set_repo("big/Huge-1B-GGUF", downloads=70, likes=1, gated="auto")
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    with server:
        point_huggingface_hub_at(server.url, hf_home, monkeypatch)
        yield server


def models(profile: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), "models", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())


def test_search_prints_a_table_and_bad_input_is_one_line(split_hub, tmp_path):
    proc = models(tmp_path / "p", "search", "huge")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["repo", "downloads", "likes", "updated", "gated"]
    assert lines[1].split() == ["big/Huge-1B-GGUF", "70", "1", "2024-09-19", "auto"]
    assert lines[2].split()[0] == SPLIT_REPO
    bad = models(tmp_path / "p", "search", "x" * 300)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("specchat: search text must be one line")


def test_files_groups_by_quant_with_a_fit_for_the_split_model(split_hub, tmp_path):
    proc = models(tmp_path / "p", "files", SPLIT_REPO, "--fit", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    split, q8 = doc["entries"]
    assert split["quant"] == "Q4_K_M" and split["parts"] == 3 and split["name"].endswith("(3 parts)")
    assert split["size"] == sum(f.size for (r, _), f in split_hub.files.items() if r == SPLIT_REPO and "Q4_K_M" in _)
    assert split["fit"] in ("fits on the GPU", "CPU only") and q8["quant"] == "Q8_0"
    gated = models(tmp_path / "p", "files", "big/Huge-1B-GGUF", "--fit")
    assert gated.returncode == 0 and "note: big/Huge-1B-GGUF is a gated repo" in gated.stdout
    assert "unknown (big/Huge-1B-GGUF is a gated repo" in gated.stdout  # its header needs access too


def test_pull_of_a_split_model_fetches_every_part_and_registers_the_first(split_hub, tmp_path):
    profile = tmp_path / "p"
    proc = models(profile, "pull", f"{SPLIT_REPO}/Q4_K_M/Huge-70B-Instruct-Q4_K_M-00002-of-00003.gguf")
    assert proc.returncode == 0, proc.stderr
    first = Path(proc.stdout.strip())
    assert first.name == "Huge-70B-Instruct-Q4_K_M-00001-of-00003.gguf"
    for i in (1, 2, 3):  # all parts side by side, under the names llama.cpp looks for
        assert (first.parent / f"Huge-70B-Instruct-Q4_K_M-0000{i}-of-00003.gguf").is_file()
        assert split_hub.sent(SPLIT_REPO, f"Q4_K_M/Huge-70B-Instruct-Q4_K_M-0000{i}-of-00003.gguf") > 0
    listed = json.loads(models(profile, "list", "--json").stdout)["installed"]
    assert [m["path"] for m in listed] == [str(first)] and listed[0]["current"]
    fit = json.loads(models(profile, "fit", first, "--ctx", "128", "--json").stdout)
    assert fit["models"][0]["weights"] == 3 * 64 * 1024 * 4  # the weights of all three parts

    (first.parent / "Huge-70B-Instruct-Q4_K_M-00003-of-00003.gguf").unlink()
    broken = models(profile, "fit", first)
    assert broken.returncode == 2 and "part 3 of 3 is missing" in broken.stderr.strip().splitlines()[-1]


def test_drafts_for_a_repo_lists_compatible_and_refused(split_hub, tmp_path):
    proc = models(tmp_path / "p", "drafts", SPLIT_REPO, "--json")
    assert proc.returncode == 0, proc.stderr
    found = {c["ref"].split("/")[1]: c for c in json.loads(proc.stdout)}
    small = found["Huge-1B-GGUF"]  # the split 70B target (786 kB here) is 1,230 times its size
    assert not small["compatible"] and small["reason"].startswith("too small: 1230x smaller than the target")
    assert small["source"] == "organisation" and small["bytes_read"] == 0
    text = models(tmp_path / "p", "drafts", SPLIT_REPO)
    assert text.stdout.splitlines()[:2] == ["No compatible draft found.", "Refused:"]
    bad = models(tmp_path / "p", "drafts", "/no/such/file.gguf")
    assert bad.returncode == 2 and bad.stderr.strip() == "specchat: /no/such/file.gguf: no such file"
