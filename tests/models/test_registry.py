"""The model registry: damaged files are refused and kept, writers merge under a lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_gguf_header import write_tiny

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


DAMAGED = {
    "not JSON": b'{"models": {',
    "not UTF-8": b'{"models": {}, "pairs": {}, "note": "caf\xe9"}',
    "a list": b"[1, 2, 3]",
    "models not an object": b'{"models": [], "pairs": {}}',
    "a model without fields": b'{"models": {"/x.gguf": {"path": "/x.gguf"}}, "pairs": {}}',
    "a model with a bad size": json.dumps({"models": {"/x.gguf": {
        "path": "/x.gguf", "size": "big", "mtime_ns": 1, "name": "x", "architecture": "llama", "n_vocab": 3}},
        "pairs": {}}).encode(),
    "a bad pair": b'{"models": {}, "pairs": {"a\\nb": {"target": "a"}}}',
    "a bad last pair": b'{"models": {}, "pairs": {}, "last_pair": {"target": 3}}',
    "a newer version": b'{"version": 99, "models": {}, "pairs": {}}',
}


@pytest.mark.parametrize("what", list(DAMAGED))
def test_a_damaged_registry_is_refused_with_one_line_and_never_rewritten(tmp_path, ggufs, what):
    path = tmp_path / "registry.json"
    path.write_bytes(DAMAGED[what])
    with pytest.raises(RegistryError) as err:
        Registry(path)
    message = str(err.value)
    assert message.startswith(f"{path}: damaged registry (") and "move it aside" in message and "\n" not in message
    assert path.read_bytes() == DAMAGED[what]


def test_a_registry_damaged_while_open_is_not_overwritten(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    reg = Registry(path)
    reg.add(ggufs[0])
    path.write_bytes(b"{oops")
    for call in (lambda: reg.add(ggufs[1]), lambda: reg.set_last_pair(ggufs[0], None), lambda: reg.remove(ggufs[0]),
                 reg.models, reg.last_pair):
        with pytest.raises(RegistryError, match="damaged registry"):
            call()
        assert path.read_bytes() == b"{oops"


def test_an_object_opened_earlier_never_overwrites_another_import(tmp_path, ggufs):
    path = tmp_path / "registry.json"
    window = Registry(path)  # the app keeps one open for hours
    Registry(path).add(ggufs[0], source="a/b/model-0.gguf")  # 'specchat models pull' in a terminal
    window.add(ggufs[1])
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


@pytest.mark.parametrize("args", [("models", "list"), ("models", "import", "{gguf}"),
                                  ("chat", "--pair", "qwen2.5-coder-1.5b", "hi"), ("chat", "hi")])
def test_commands_on_a_damaged_registry_say_so_in_one_line_and_leave_it(tmp_path, ggufs, args):
    profile = tmp_path / "profile"
    (profile / "data").mkdir(parents=True)
    registry = profile / "data" / "registry.json"
    registry.write_bytes(b'{"models": {"/x.gguf": ')
    proc = specchat(clean_env(tmp_path), "--profile", profile, *[a.format(gguf=ggufs[0]) for a in args])
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"specchat: {registry}: damaged registry (") and "move it aside" in lines[0]
    assert registry.read_bytes() == b'{"models": {"/x.gguf": '
