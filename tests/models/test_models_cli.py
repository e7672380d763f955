"""``specchat models ...`` as a user runs it: against the local hub, on real and broken files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.real_models


def specchat(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", "models", *map(str, args)], capture_output=True,
                          text=True, timeout=600, env=env or os.environ.copy())


def one_line_error(proc, code, *needles):
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert lines and all(n in lines[-1] for n in needles), proc.stderr


def test_check_refuses_a_truncated_copy_and_a_text_file(tmp_path, qwen_target, smollm):
    cut = tmp_path / "cut.gguf"
    with smollm.open("rb") as f:
        cut.write_bytes(f.read(30_000_000))
    fake = tmp_path / "notes.gguf"
    fake.write_text("shopping list\n")
    one_line_error(specchat("check", qwen_target, cut), 2, "cut.gguf", "truncated")
    one_line_error(specchat("check", fake, qwen_target), 2, "notes.gguf", "not a GGUF file")


def test_import_validates_and_registers(tmp_path, smollm, qwen_draft):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 10)
    proc = specchat("import", smollm, qwen_draft, fake, "--json")
    assert proc.returncode == 2  # one file was refused, the others imported
    results = json.loads(proc.stdout)
    assert [r["ok"] for r in results] == [True, True, False]
    listed = specchat("list", "--json")
    paths = {m["path"] for m in json.loads(listed.stdout)["installed"]}
    assert str(smollm.resolve()) in paths and str(fake.resolve()) not in paths


def test_fit_reports_the_pair_in_json(qwen_target, qwen_draft):
    proc = specchat("fit", qwen_target, qwen_draft, "--ctx", "4096", "--json")
    doc = json.loads(proc.stdout)
    assert doc["fits"] is True and proc.returncode == 0
    assert [m["name"] for m in doc["models"]] == [qwen_target.name, qwen_draft.name]
    assert doc["needed"] == sum(m["total"] for m in doc["models"])


def ref(f) -> str:
    return f"{f.repo_id}/{f.filename}"


def test_remote_check_reads_headers_only(hub, hub_files, qwen_target, gemma):
    t, g = ref(hub_files["qwen-1.5b"]), ref(hub_files["gemma-270m"])
    proc = specchat("check", t, g, "--json")
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert doc["reason"] == "tokenizer type differs: 'gpt2' vs 'llama'"
    assert doc["bytes_read"] < 0.05 * (qwen_target.stat().st_size + gemma.stat().st_size)


def test_pull_of_an_incompatible_user_pair_downloads_nothing(hub, hub_files, qwen_draft, smollm):
    add = specchat("add", "mismatch", "--target", ref(hub_files["qwen-0.5b"]),
                   "--draft", ref(hub_files["smollm2-135m"]))
    assert add.returncode == 0, add.stderr
    proc = specchat("pull", "mismatch")
    assert proc.returncode == 3
    assert "incompatible: vocabulary sizes differ" in proc.stderr
    assert hub.total_sent() < 0.05 * (qwen_draft.stat().st_size + smollm.stat().st_size)


def test_pull_downloads_verifies_and_registers(hub, hub_files, qwen_draft):
    source = ref(hub_files["qwen-0.5b"])
    proc = specchat("pull", source)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip().splitlines()[-1]
    assert os.path.getsize(path) == qwen_draft.stat().st_size
    installed = json.loads(specchat("list", "--json").stdout)["installed"]
    assert any(m["path"] == os.path.realpath(path) and m["source"] == source for m in installed)


def test_pull_of_a_gated_repo_says_how_to_log_in(hub, hub_files):
    hub.gate(hub_files["smollm2-135m"].repo_id)
    proc = specchat("pull", ref(hub_files["smollm2-135m"]))
    one_line_error(proc, 2, "hf auth login")


def test_after_pulling_a_catalog_pair_chat_needs_no_flag(hub, tmp_path):
    """'specchat models pull qwen2.5-coder-1.5b' then 'specchat chat "hi"': the pulled pair is the default,
    and '--pair qwen2.5-coder-1.5b' finds its files by the hub source the registry keeps."""
    profile = tmp_path / "profile"

    def run(*args):
        return subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), *map(str, args)],
                              capture_output=True, text=True, timeout=600, env=os.environ.copy())

    pull = run("models", "pull", "qwen2.5-coder-1.5b")
    assert pull.returncode == 0, pull.stderr
    assert "default pair for 'specchat chat' and 'bench'" in pull.stderr
    listed = json.loads(run("models", "list", "--json").stdout)
    assert next(p for p in listed["pairs"] if p["id"] == "qwen2.5-coder-1.5b")["downloaded"] is True
    for args in (("chat",), ("chat", "--pair", "qwen2.5-coder-1.5b")):
        proc = run(*args, "--mode", "draft", "--max-tokens", "8", "--ctx", "1024", "Say hi.")
        assert proc.returncode == 0, proc.stderr
        stats = proc.stdout.strip().splitlines()[-1]
        assert stats.startswith("-- ") and "draft accepted" in stats  # the pair's draft was loaded
