"""``specchat models ...`` as a user runs it: against the local hub, on real and broken files.

Tests that use a real model (directly or through the ``hub`` fixture) are marked
real_models by tests/conftest.py; the user-catalog and hostile-reference tests use small
generated files and a local hub of their own (``small_hub``), so they run in the fast tier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.hub_server import REPO, HubServer, serve_small_files
from specchat.models.catalog import CatalogModel, add_user_pair, load_catalog


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


# --- the fast tier: the user catalog, hostile references, a pulled file that is not a model ------------

SHIPPED = "qwen2.5-coder-1.5b"  # a shipped pair every listing must show


@pytest.fixture
def small_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with serve_small_files(tmp_path, monkeypatch) as server:
        yield server


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    return tmp_path / "profile"


def models(profile: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), "models", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())


def catalog_file(profile: Path) -> Path:
    from specchat.profile import Profile

    return Profile.at(profile).user_catalog


def listed_ids(proc: subprocess.CompletedProcess) -> set[str]:
    assert proc.returncode == 0, proc.stderr
    return {p["id"] for p in json.loads(proc.stdout)["pairs"]}


@pytest.mark.parametrize("args, needle", [
    (("x", "--target", "/etc/passwd.gguf"), "expected owner/repo/file.gguf"),
    (("x", "--target", "owner/repo/../../x.gguf"), "expected owner/repo/file.gguf"),
    (("x", "--target", "a/b/m.gguf", "--draft", "..\\a\\m.gguf"), "expected owner/repo/file.gguf"),
    (("x", "--target", "a/b/m.gguf", "--name", "two\nlines"), "one line of printable text"),
    (("x", "--target", "a/b/m.gguf", "--name", "bell\a"), "one line of printable text"),
    (("bad id!", "--target", "a/b/m.gguf"), "is not a pair id"),
    (("x", "--target", "a/b/m.gguf", "--task", "chat\n[[pair]]"), "is not a task tag"),
])
def test_add_refuses_paths_ids_and_control_characters_in_one_line(profile, args, needle):
    proc = models(profile, "add", *args)

    one_line_error(proc, 2, needle)
    assert not catalog_file(profile).exists()


def test_a_name_with_quotes_and_backslashes_reads_back_exactly(profile):
    name = 'My "best" pair \\ C:\\models \\u0041 # not a comment'
    assert models(profile, "add", "mine", "--target", "a/b/t.gguf", "--draft", "a/c/d.gguf",
                  "--name", name).returncode == 0

    (mine,) = [p for p in load_catalog(catalog_file(profile)) if p.id == "mine"]
    assert mine.name == name and mine.target == CatalogModel("a/b", "t.gguf")
    assert mine.drafts == (CatalogModel("a/c", "d.gguf"),)
    assert "mine" in listed_ids(models(profile, "list", "--json"))


@pytest.mark.parametrize("content, problem", [
    (b"[[pair]\nid = 'x'\n", "not valid TOML"),
    (b"\xff\xfe[[pair]]\n", "not valid UTF-8"),
])
def test_list_shows_the_shipped_pairs_beside_a_damaged_user_catalog(profile, content, problem):
    path = catalog_file(profile)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)

    proc = models(profile, "list", "--json")

    assert SHIPPED in listed_ids(proc)
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and str(path) in warnings[0] and problem in warnings[0]
    assert path.read_bytes() == content  # a listing never touches the file


GOOD = """[[model]]
id = "good"
repo = "a/b"
file = "m.gguf"
"""


@pytest.mark.parametrize("entry, needle", [
    ('[[pair]]\nid = "p"\nname = 3\ntarget = { repo = "a/b", file = "t.gguf" }\n', "'name' must be text"),
    ('[[pair]]\nid = "p"\ntarget = { repo = "a/b", file = "t.gguf" }\ndrafts = "x"\n', "'drafts' must be a list"),
    ('[[pair]]\nid = "p"\ntarget = 5\n', "needs 'repo' and 'file'"),
    ('[[pair]]\nid = "p"\ndraft_max = "a"\ntarget = { repo = "a/b", file = "t.gguf" }\n', "'draft_max'"),
    ('[[pair]]\nid = "p"\ntarget = { repo = "a/b", file = "t.gguf", size = "big" }\n', "'size' of t.gguf"),
    ('[[pair]]\nid = "p"\ntarget = { repo = "a/b", file = "../../t.gguf" }\n', "not a file name in a hub"),
    ('[[pair]]\nid = "p"\ntarget = { repo = "/etc", file = "passwd" }\n', "not a hub repository"),
    ('[[pair]]\nid = 7\ntarget = { repo = "a/b", file = "t.gguf" }\n', "'id' must be text"),
    ('[[model]]\nid = "p"\nrepo = "a/b"\nfile = "t.gguf"\nname = "x\\ny"\n', "one line of printable text"),
    ('pair = "not tables"\n', "'pair' must be a list of tables"),
    ('[[pair]]\nid = "p"\nspec_type = "draft-magic"\ntarget = { repo = "a/b", file = "t.gguf" }\n',
     "'spec_type': 'draft-magic' is not one of draft-mtp"),
])
def test_a_wrongly_typed_or_hostile_entry_is_named_and_the_rest_still_lists(profile, entry, needle):
    path = catalog_file(profile)
    path.parent.mkdir(parents=True)
    path.write_text(entry + "\n" + GOOD)

    proc = models(profile, "list", "--json")

    assert {SHIPPED, "good"} <= listed_ids(proc) and "p" not in listed_ids(proc)
    (warning,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert str(path) in warning and needle in warning, warning
    # using the bad entry is refused in one line, naming the file
    one_line_error(models(profile, "pull", "p"), 2, str(path))


def test_add_moves_a_damaged_catalog_aside_and_starts_a_fresh_one(profile):
    path = catalog_file(profile)
    path.parent.mkdir(parents=True)
    damaged = b"[[pair]\nid = 'mine, half-edited\n"
    path.write_bytes(damaged)

    proc = models(profile, "add", "fresh", "--target", "a/b/m.gguf")

    assert proc.returncode == 0, proc.stderr
    (moved,) = path.parent.glob("catalog.toml.corrupt-*")
    assert moved.read_bytes() == damaged  # the user's file is kept, never overwritten
    assert moved.name in proc.stderr and "moved it aside" in proc.stderr
    assert [p["id"] for p in tomllib.loads(path.read_text())["model"]] == ["fresh"]
    assert "fresh" in listed_ids(models(profile, "list", "--json"))


def test_concurrent_adds_all_land(profile):
    path = catalog_file(profile)
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            add_user_pair(f"pair-{i}", CatalogModel("a/b", f"m{i}.gguf"), [], user_file=path)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors
    assert {p.id for p in load_catalog(path) if p.user} == {f"pair-{i}" for i in range(8)}


def test_pull_of_a_local_path_is_refused_before_any_request(profile, small_hub, tmp_path):
    local = tmp_path / "owner" / "repo" / "model.gguf"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"GGUF")

    for ref in (str(local), "owner/repo/../../model.gguf", "~/model.gguf"):
        one_line_error(models(profile, "pull", ref), 2, "expected owner/repo/file.gguf")
    assert not small_hub.requests


def test_pull_of_a_file_that_is_not_gguf_names_it_as_the_user_does(profile, small_hub):
    proc = models(profile, "pull", f"{REPO}/notes.gguf")

    one_line_error(proc, 2, f"{REPO}/notes.gguf:", "not a GGUF file")
    sha = small_hub.files[(REPO, "notes.gguf")].sha256
    assert sha not in proc.stderr.splitlines()[-1].split("(downloaded to")[0]  # named by its hub name, not the blob
    assert json.loads(models(profile, "list", "--json").stdout)["installed"] == []


def test_pull_of_a_small_model_registers_it(profile, small_hub):
    proc = models(profile, "pull", f"{REPO}/tiny.gguf")

    assert proc.returncode == 0, proc.stderr
    installed = json.loads(models(profile, "list", "--json").stdout)["installed"]
    assert [m["source"] for m in installed] == [f"{REPO}/tiny.gguf"]


def test_rebuild_drops_the_missing_and_the_broken_and_keeps_the_rest(tmp_path):
    from helpers.gguf_samples import write_gguf

    profile = tmp_path / "profile"
    files = [write_gguf(tmp_path / f"m{i}.gguf") for i in range(3)]
    env = os.environ.copy()
    imported = subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), "models", "import",
                               *map(str, files)], capture_output=True, text=True, timeout=120, env=env)
    assert imported.returncode == 0, imported.stderr
    files[1].unlink()
    files[2].write_bytes(files[2].read_bytes()[:100])  # truncated: no longer a valid GGUF file
    done = subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), "models", "rebuild"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "1 of 3 models kept" in done.stdout and "1 missing" in done.stdout
    listed = json.loads(subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), "models",
                                        "list", "--json"], capture_output=True, text=True, timeout=120,
                                       env=env).stdout)
    assert [Path(m["path"]).name for m in listed["installed"]] == ["m0.gguf"]


def test_check_names_the_file_that_is_missing_whichever_side_and_mixes_a_local_file_with_a_hub_one(
        small_hub, tmp_path):
    """Each reference is read where it is: a missing local path is named (it used to make both
    references hub ones, blaming the file that was there), and a local file checks against a hub file."""
    local = tmp_path / "served" / "tiny.gguf"
    for missing in ("missing.gguf", str(tmp_path / "gone.gguf"), "./gone.gguf"):
        one_line_error(specchat("check", local, missing), 2, Path(missing).name, "no such file")
        one_line_error(specchat("check", missing, local), 2, Path(missing).name, "no such file")
    mixed = specchat("check", local, f"{REPO}/tiny.gguf", "--json")
    assert mixed.returncode == 0, mixed.stderr
    assert json.loads(mixed.stdout)["compatible"] is True and json.loads(mixed.stdout)["bytes_read"] > 0
    one_line_error(specchat("check", f"{REPO}/absent.gguf", local), 2, "absent.gguf")
