"""The model registry: damaged files are refused and kept, writers merge under a lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.gguf_samples import write_tiny
from specchat.models.registry import Registry, RegistryError


@pytest.fixture
def ggufs(tmp_path) -> list[Path]:
    (tmp_path / "m").mkdir()
    return [write_tiny(tmp_path / "m" / f"model-{i}.gguf", n_tensors=i + 1) for i in range(4)]


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "QT_", "DISPLAY", "WAYLAND"))}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[var] = str(tmp_path / "xdg" / var.lower())
    return env


def registry_text(ggufs: list[Path], *, sources: dict[int, str] | None = None) -> str:
    """The registry SpecChat writes for these files (then damaged by a test)."""
    path = ggufs[0].parent / "scratch.json"
    reg = Registry(path)
    for i, g in enumerate(ggufs):
        reg.add(g, source=(sources or {}).get(i, ""))
    reg.set_last_pair(ggufs[0], ggufs[1])
    text = path.read_text()
    path.unlink()
    return text


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


# each: (the damaged bytes made from a good registry of the four files, the files that come back)
def damaged_variants(ggufs: list[Path]) -> dict[str, tuple[bytes, list[int]]]:
    text = registry_text(ggufs, sources={1: "Org/Repo-GGUF/model-1.gguf"})
    cut = text.index('"name"', text.index(str(ggufs[2].resolve())))  # inside the third model's record
    doc = json.loads(text)
    first = str(ggufs[0].resolve())

    def shaped(change) -> bytes:
        d = json.loads(text)
        change(d)
        return json.dumps(d, indent=1).encode()

    return {
        "cut off mid-record": (text[:cut].encode(), [0, 1, 2]),  # the third one's key still names it
        "not UTF-8": (replace_once(text, '"name": "model-0"', '"name": "model-0 caf@"').encode()
                      .replace(b"caf@", b"caf\xe9"), [0, 1, 2, 3]),
        "a list": (json.dumps(list(doc["models"].values())).encode(), [0, 1, 2, 3]),
        "a model with a bad size": (shaped(lambda d: d["models"][first].update(size="big")), [0, 1, 2, 3]),
        "a model with a NaN date": (shaped(lambda d: d["models"][first].update(added=float("nan"))), [0, 1, 2, 3]),
        "a model under another key": (shaped(lambda d: d["models"].update(
            {"/elsewhere.gguf": d["models"].pop(first)})), [0, 1, 2, 3]),
        "a model path with a NUL": (shaped(lambda d: d["models"][first].update(path="/x\0.gguf")), [0, 1, 2, 3]),
        "a pair with bad stamps": (shaped(lambda d: d["pairs"].update({f"{first}\n{first}": {
            "target": first, "draft": first, "compatible": True, "reason": "", "stamps": [[1, "2"], [3, 4]]}})),
            [0, 1, 2, 3]),
        "a bad last pair": (shaped(lambda d: d.update(last_pair={"target": 3})), [0, 1, 2, 3]),
        "a relative last pair": (shaped(lambda d: d.update(last_pair={"target": "x.gguf", "draft": None})),
                                 [0, 1, 2, 3]),
        "a version of 0": (shaped(lambda d: d.update(version=0)), [0, 1, 2, 3]),
        "nested too deeply": (b"[" * 200_000 + text.encode(), [0, 1, 2, 3]),
        "empty": (b"", []),
    }


VARIANTS = ["cut off mid-record", "not UTF-8", "a list", "a model with a bad size", "a model with a NaN date",
            "a model under another key", "a model path with a NUL", "a pair with bad stamps", "a bad last pair",
            "a relative last pair", "a version of 0", "nested too deeply", "empty"]


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "specchat" and r.levelname == "WARNING"]


@pytest.mark.parametrize("what", VARIANTS)
def test_a_damaged_registry_is_moved_aside_and_rebuilt_from_the_files_it_lists(tmp_path, ggufs, what, caplog):
    damaged, back = damaged_variants(ggufs)[what]
    path = tmp_path / "registry.json"
    path.write_bytes(damaged)
    models = Registry(path).models()
    assert sorted(Path(m.path) for m in models) == sorted(ggufs[i].resolve() for i in back)
    [aside] = tmp_path.glob("registry.json.corrupt-*")
    assert aside.read_bytes() == damaged  # nothing the user had is lost
    [message] = warnings_of(caplog)
    assert message.startswith(f"{path}: damaged registry (") and str(aside) in message and "\n" not in message
    assert f"rebuilt with the {len(back)} of" in message
    if 1 in back and what not in ("a list",):
        assert [m.source for m in models if m.path == str(ggufs[1].resolve())] == ["Org/Repo-GGUF/model-1.gguf"]
    # the new file is a good one: read again without a second repair
    assert sorted(m.path for m in Registry(path).models()) == sorted(m.path for m in models)
    assert len(warnings_of(caplog)) == 1 and len(list(tmp_path.glob("registry.json.corrupt-*"))) == 1


def test_the_rebuild_after_damage_drops_missing_and_invalid_files_and_keeps_the_last_pair(tmp_path, ggufs, caplog):
    text = registry_text(ggufs, sources={0: "Org/Repo/model-0.gguf"})
    ggufs[2].unlink()
    ggufs[3].write_bytes(ggufs[3].read_bytes()[:-10])  # truncated since
    path = tmp_path / "registry.json"
    path.write_text(replace_once(text, '"n_vocab": 7', '"n_vocab": -7'))
    reg = Registry(path)
    assert [Path(m.path) for m in reg.models()] == [ggufs[0].resolve(), ggufs[1].resolve()]
    assert reg.models()[0].source == "Org/Repo/model-0.gguf"
    assert reg.last_pair() == (ggufs[0].resolve(), ggufs[1].resolve())
    [message] = warnings_of(caplog)
    assert "2 of 4 models" in message and "(1 missing, 1 not valid)" in message


def test_extra_fields_in_a_model_record_are_kept_and_not_damage(tmp_path, ggufs, caplog):
    path = tmp_path / "registry.json"
    doc = json.loads(registry_text(ggufs[:2]))
    doc["models"][str(ggufs[0].resolve())]["licence"] = {"spdx": "MIT"}  # a later 1.x
    path.write_text(json.dumps(doc))
    reg = Registry(path)
    reg.add(ggufs[2])
    assert json.loads(path.read_text())["models"][str(ggufs[0].resolve())]["licence"] == {"spdx": "MIT"}
    assert len(reg.models()) == 3 and warnings_of(caplog) == [] and not list(tmp_path.glob("*.corrupt-*"))


def test_a_registry_of_a_newer_version_is_refused_and_never_touched(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    newer = b'{"version": 99, "models": [], "servers": {}}'
    path.write_bytes(newer)
    with pytest.raises(RegistryError) as err:
        Registry(path)
    assert str(err.value).startswith(f"{path}: written by a newer SpecChat (registry version 99")
    reg = Registry(tmp_path / "other.json")
    reg.path = path
    for call in (lambda: reg.add(ggufs[1]), lambda: reg.set_last_pair(ggufs[0], None), reg.models, reg.rebuild):
        with pytest.raises(RegistryError, match="newer SpecChat"):
            call()
    assert path.read_bytes() == newer and sorted(p.name for p in tmp_path.iterdir()) == [
        "m", "registry.json", "registry.json.lock"]


def test_a_registry_damaged_while_open_is_repaired_before_the_next_change(tmp_path, ggufs, caplog):
    path = tmp_path / "registry.json"
    reg = Registry(path)
    reg.add(ggufs[0])
    good = path.read_text()
    path.write_text(good[: len(good) // 2])  # the disk filled up under another program, say
    reg.add(ggufs[1])
    assert {Path(m.path) for m in Registry(path).models()} == {ggufs[0].resolve(), ggufs[1].resolve()}
    assert len(warnings_of(caplog)) == 1 and len(list(tmp_path.glob("registry.json.corrupt-*"))) == 1


def test_a_registry_larger_than_any_we_write_is_damaged_and_not_read_whole(tmp_path, ggufs, monkeypatch, caplog):
    from specchat.models import registry

    path = tmp_path / "registry.json"
    text = registry_text(ggufs[:2])
    path.write_text(text + " " * 5000)
    monkeypatch.setattr(registry, "MAX_REGISTRY_BYTES", len(text) + 100)
    assert len(Registry(path).models()) == 2 and len(warnings_of(caplog)) == 1


def test_rebuild_re_validates_every_listed_file(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    reg = Registry(path)
    for i, g in enumerate(ggufs):
        reg.add(g, source=f"Org/Repo/model-{i}.gguf")
    reg.compatibility(ggufs[0], ggufs[1])
    reg.compatibility(ggufs[2], ggufs[3])
    reg.set_last_pair(ggufs[3], None)
    ggufs[1].unlink()
    ggufs[2].write_bytes(b"GGUF but not really")
    os.utime(ggufs[3], ns=(1, 10**18))  # the same bytes, a new mtime: re-read
    report = Registry(path).rebuild()
    assert (report.kept, report.refreshed, report.missing, report.invalid) == (1, 1, 1, 1)
    assert "2 of 4 models kept" in report.summary()
    after = {Path(m.path): m for m in reg.models()}
    assert set(after) == {ggufs[0].resolve(), ggufs[3].resolve()}
    assert after[ggufs[3].resolve()].is_current() and after[ggufs[3].resolve()].source == "Org/Repo/model-3.gguf"
    assert json.loads(path.read_text())["pairs"] == {}  # both cached verdicts went stale
    assert reg.last_pair() == (ggufs[3].resolve(), None)


def test_temp_files_left_by_a_killed_writer_are_never_read_and_old_ones_are_removed(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    Registry(path).add(ggufs[0])
    stale, fresh = tmp_path / ".registry.json.abcd1234.tmp", tmp_path / ".registry.json.efgh5678.tmp"
    for t in (stale, fresh):
        t.write_text('{"models": {}, "pairs": {}}')  # a half-written file would be empty or cut off
    os.utime(stale, (1, 1))
    reg = Registry(path)
    assert [Path(m.path) for m in reg.models()] == [ggufs[0].resolve()]
    reg.add(ggufs[1])
    assert not stale.exists() and fresh.exists()  # a young one may be another process's write in progress


def test_an_object_opened_earlier_never_overwrites_another_import(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    window = Registry(path)  # the app keeps one open for hours
    Registry(path).add(ggufs[0], source="a/b/model-0.gguf")  # 'specchat models pull' in a terminal
    window.add(ggufs[1])  # Y, by the object opened before X was imported
    window.set_last_pair(ggufs[1], None)
    assert {Path(m.path) for m in Registry(path).models()} == {ggufs[0].resolve(), ggufs[1].resolve()}
    assert {Path(m.path) for m in window.models()} == {ggufs[0].resolve(), ggufs[1].resolve()}  # reads see it too
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["last_pair"] == {"target": str(ggufs[1].resolve()), "draft": None}


def test_unknown_keys_of_a_later_version_survive_a_write(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"version": 1, "models": {}, "pairs": {}, "servers": {"x": 1}}))
    Registry(path).add(ggufs[0])
    assert json.loads(path.read_text())["servers"] == {"x": 1}


def test_last_pair_round_trip(tmp_path, ggufs):
    reg = Registry(tmp_path / "registry.json")
    assert reg.last_pair() is None
    reg.set_last_pair(ggufs[0], ggufs[1])
    assert Registry(tmp_path / "registry.json").last_pair() == (ggufs[0].resolve(), ggufs[1].resolve())
    reg.set_last_pair(ggufs[2], None)
    assert Registry(tmp_path / "registry.json").last_pair() == (ggufs[2].resolve(), None)


def test_reimporting_a_pulled_file_keeps_its_source(tmp_path, ggufs):
    reg = Registry(tmp_path / "registry.json")
    reg.add(ggufs[0], source="Qwen/Repo-GGUF/model-0.gguf")
    reg.add(ggufs[0])
    assert [m.source for m in reg.by_source("Qwen/Repo-GGUF/model-0.gguf")] == ["Qwen/Repo-GGUF/model-0.gguf"]
    assert [Path(m.path) for m in reg.find("model-0")] == [ggufs[0].resolve()]


def test_two_processes_importing_at_once_lose_nothing(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    script = ("import sys\nfrom specchat.models.registry import Registry\n"
              "reg = Registry(__import__('pathlib').Path(sys.argv[1]))\n"
              "for _ in range(15):\n    for f in sys.argv[2:]:\n        reg.add(f)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), *map(str, files)], stderr=subprocess.PIPE,
                              text=True) for files in (ggufs[:2], ggufs[2:])]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    assert {Path(m.path) for m in Registry(path).models()} == {g.resolve() for g in ggufs}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "registry.json", "registry.json.lock"]


def specchat(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize("args", [("models", "list"), ("models", "import", "{gguf}")])
def test_commands_on_a_damaged_registry_move_it_aside_and_say_so_in_one_line(tmp_path, ggufs, args):
    profile = tmp_path / "profile"
    (profile / "data").mkdir(parents=True)
    registry = profile / "data" / "registry.json"
    listed = json.dumps(str(ggufs[1].resolve()))
    damaged = ('{"models": {' + listed + ': {"path": ' + listed + ', "si').encode()  # cut off
    registry.write_bytes(damaged)
    proc = specchat(clean_env(tmp_path), "--profile", profile, *[a.format(gguf=ggufs[0]) for a in args])
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    [aside] = registry.parent.glob("registry.json.corrupt-*")
    assert f"{registry}: damaged registry (" in line and str(aside) in line, line
    assert aside.read_bytes() == damaged
    expected = {ggufs[1].resolve()} | ({ggufs[0].resolve()} if "import" in args else set())
    assert {Path(m.path) for m in Registry(registry).models()} == expected


def test_a_path_no_file_can_have_is_one_line_not_a_crash(tmp_path, ggufs):
    reg = Registry(tmp_path / "registry.json")
    for call in (lambda: reg.add("/m/a\0b.gguf"), lambda: reg.set_last_pair("/m/a\0b.gguf", None),
                 lambda: reg.remove("/m/a\0b.gguf"), lambda: reg.compatibility(ggufs[0], "/m/a\0b.gguf")):
        with pytest.raises(RegistryError, match="not a usable file path"):
            call()
    assert not (tmp_path / "registry.json").exists()


@pytest.mark.parametrize("hostile", [b'"' + b"a" * (8 << 20), b'"/x.gguf": {' * (700_000), b"[" * (8 << 20)])
def test_salvaging_a_hostile_registry_of_the_largest_size_finishes(tmp_path, hostile, caplog):
    """A backtracking scan took 96 s on one quote and 32 MiB; this one is linear."""
    path = tmp_path / "registry.json"
    path.write_bytes(hostile)
    t0 = time.monotonic()
    assert Registry(path).models() == []
    assert time.monotonic() - t0 < 60  # a deadline, not a speed figure: it must not hang
    assert len(list(tmp_path.glob("registry.json.corrupt-*"))) == 1


def test_a_reader_never_sees_an_empty_registry_while_another_process_repairs_it(tmp_path, ggufs):
    """A repair moves the damaged file aside, then writes the rebuilt one, under the lock; a reader
    that finds no file then waits for that lock instead of reading an empty registry."""
    import threading

    from specchat import files

    path = tmp_path / "registry.json"
    Registry(path).add(ggufs[0])
    good = path.read_text()
    seen: list[int] = []
    with files.locked(path):  # the other process, mid-repair: the file is aside, the new one not written
        path.rename(tmp_path / "registry.json.corrupt-x")
        reader = threading.Thread(target=lambda: seen.append(len(Registry(path).models())))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and not seen  # it waits for the lock, whatever the machine's load
        files.write_text_atomically(path, good)
    reader.join(30)
    assert seen == [1]


def test_a_missing_registry_in_a_fresh_folder_is_empty_and_makes_no_file(tmp_path):
    assert Registry(tmp_path / "registry.json").models() == []
    assert list(tmp_path.iterdir()) == []


# --- the library: what each model is, which catalog file it is, what deleting it removes -------------


def test_a_record_names_the_file_and_keeps_quant_context_and_folder(tmp_path):
    from gguf import GGUFValueType

    from helpers.gguf_samples import write_gguf

    (tmp_path / "mine").mkdir()
    path = write_gguf(tmp_path / "mine" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", extra={
        "general.name": ("Qwen2.5 Coder 1.5B Instruct AWQ", GGUFValueType.STRING),
        "general.file_type": (15, GGUFValueType.UINT32),  # llama.cpp's MOSTLY_Q4_K_M
        "llama.context_length": (32768, GGUFValueType.UINT32)})
    m = Registry(tmp_path / "registry.json").add(path)
    assert m.display_name == "qwen2.5-coder-1.5b-instruct-q4_k_m"  # the file's stem, not the "... AWQ" of the header
    assert m.name == "Qwen2.5 Coder 1.5B Instruct AWQ"
    assert (m.quant, m.context_length, m.architecture) == ("Q4_K_M", 32768, "llama")
    assert m.folder == str((tmp_path / "mine").resolve()) and m.bytes == path.stat().st_size


def test_a_record_of_an_older_registry_gets_its_details_from_the_header(tmp_path, ggufs):
    reg_path = tmp_path / "registry.json"
    Registry(reg_path).add(ggufs[0])
    doc = json.loads(reg_path.read_text())
    for record in doc["models"].values():  # as SpecChat wrote it before it kept these
        for key in ("context_length", "quant", "total_size"):
            del record[key]
    reg_path.write_text(json.dumps(doc))
    reg = Registry(reg_path)
    assert not reg.models()[0].details_known
    assert reg.fill_details() == 1
    m = Registry(reg_path).models()[0]
    assert m.details_known and m.context_length == 128 and m.quant == "other"  # F32 tensors, no file_type
    assert reg.fill_details() == 0


def test_an_imported_copy_of_a_catalog_file_is_found_by_name_and_size_or_its_sha(tmp_path, ggufs):
    from specchat.models.catalog import CatalogModel
    from specchat.models.registry import installed_copy

    reg = Registry(tmp_path / "registry.json")
    reg.add(ggufs[1])
    size = ggufs[1].stat().st_size
    models = reg.models()
    assert installed_copy(CatalogModel("o/R-GGUF", "model-1.gguf", size), models).path == str(ggufs[1].resolve())
    assert installed_copy(CatalogModel("o/R-GGUF", "sub/model-1.gguf", size + size // 200), models) is not None  # a rounded size
    assert installed_copy(CatalogModel("o/R-GGUF", "model-1.gguf", size * 2), models) is None  # another build, same name
    assert installed_copy(CatalogModel("o/R-GGUF", "model-2.gguf", size), models) is None
    blob = tmp_path / "blobs" / ("ab" * 32)  # the hub cache keeps a pulled file under its sha256
    blob.parent.mkdir()
    blob.write_bytes(ggufs[2].read_bytes())
    reg.add(blob)
    assert installed_copy(CatalogModel("o/R-GGUF", "x.gguf", 1, "AB" * 32), reg.models()).path == str(blob)
    ggufs[1].write_bytes(ggufs[1].read_bytes() + b"\0")  # changed on disk: not installed as it was
    assert installed_copy(CatalogModel("o/R-GGUF", "model-1.gguf", size), reg.models()) is None


def test_an_installed_model_as_large_as_the_target_is_never_offered_as_its_draft(tmp_path, ggufs):
    reg = Registry(tmp_path / "registry.json")
    for g in ggufs:
        reg.add(g)
    verdicts = {Path(m.path).name: v for m, v in reg.drafts_for(ggufs[1])}  # model-i has i + 1 tensors
    assert verdicts["model-0.gguf"]  # smaller, same tokenizer
    for larger in ("model-2.gguf", "model-3.gguf"):
        assert not verdicts[larger] and "as large as the target or larger" in verdicts[larger].reason


def _hub_cache_copy(cache: Path, source: Path, repo: str, name: str) -> Path:
    """``source`` laid out as huggingface_hub keeps a download: a blob and a snapshot link to it."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    blob = folder / "blobs" / ("cd" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(source.read_bytes())
    link = folder / "snapshots" / ("1" * 40) / name
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def test_deleting_removes_a_downloaded_file_with_its_links_and_never_a_users_own(tmp_path, ggufs):
    from specchat.models.registry import downloaded_files

    cache = tmp_path / "hf" / "hub"
    link = _hub_cache_copy(cache, ggufs[0], "o/R-GGUF", "model-0.gguf")
    reg = Registry(tmp_path / "registry.json")
    pulled = reg.add(link, source="o/R-GGUF/model-0.gguf")
    own = reg.add(ggufs[1])
    imported_from_cache = reg.add(_hub_cache_copy(cache, ggufs[2], "o/S-GGUF", "model-2.gguf"))
    assert downloaded_files(own, cache) == []  # imported from disk: the user's own file
    assert downloaded_files(imported_from_cache, cache) == []  # no source: SpecChat did not download it
    assert downloaded_files(pulled, tmp_path / "elsewhere") == []  # not in the cache SpecChat downloads to
    assert downloaded_files(pulled, cache) == [link, Path(pulled.path)]
    assert pulled.display_name == "model-0"  # its hub name, not the blob's sha256

    freed = reg.delete(pulled, cache)
    assert freed == ggufs[0].stat().st_size and not Path(pulled.path).exists() and not link.is_symlink()
    assert reg.delete(own, cache) == 0  # removed from the library only
    assert ggufs[1].exists()
    assert [m.path for m in Registry(tmp_path / "registry.json").models()] == [imported_from_cache.path]


def test_a_record_from_before_trained_drafters_is_read_again_for_its_kind(tmp_path, ggufs):
    reg_path = tmp_path / "registry.json"
    Registry(reg_path).add(ggufs[0])
    doc = json.loads(reg_path.read_text())
    for record in doc["models"].values():  # as SpecChat wrote it before issue 34 kept the drafter kind
        del record["drafter"]
    reg_path.write_text(json.dumps(doc))
    reg = Registry(reg_path)
    assert not reg.models()[0].details_known  # the Library asks for its header again
    assert reg.fill_details() == 1
    assert Registry(reg_path).models()[0].details_known
    assert "drafter" in json.loads(reg_path.read_text())["models"][str(ggufs[0].resolve())]
    assert reg.fill_details() == 0
