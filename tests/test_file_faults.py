"""SpecChat's own files under real processes: concurrent writers merge, kill -9 never leaves a broken file.

Every test runs small ``python -c`` scripts that import specchat, as the app, a second
window and ``specchat models pull`` in a terminal would.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from specchat.config import AppConfig
from specchat.models.registry import Registry, _shape_error

PY = sys.executable


def tiny_gguf(path: Path, i: int) -> Path:
    """The smallest file Registry.add accepts: a header with an architecture and one tensor."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"tiny-{i}")
    w.add_tensor("t", np.full(8, i, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def many_ggufs(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [tiny_gguf(folder / f"m{i:04d}.gguf", i) for i in range(n)]


def start(script: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", script, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    """stdout and stderr of a script that must succeed."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out, err


IMPORT_ALL = """
import sys
from pathlib import Path
from specchat.models.registry import Registry
reg = Registry(Path(sys.argv[1]))
for f in Path(sys.argv[2]).glob('*.gguf'):
    reg.add(f)
"""


@pytest.mark.slow
def test_two_processes_importing_200_models_each_lose_none(tmp_path):
    path = tmp_path / "registry.json"
    a, b = many_ggufs(tmp_path / "a", 200), many_ggufs(tmp_path / "b", 200)
    t0 = time.monotonic()
    procs = [start(IMPORT_ALL, path, tmp_path / folder) for folder in ("a", "b")]
    for p in procs:
        finish(p)
    print(f"\n400 imports by two processes into one registry: {time.monotonic() - t0:.1f} s")
    assert {Path(m.path) for m in Registry(path).models()} == {f.resolve() for f in a + b}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "registry.json", "registry.json.lock"]


def test_an_object_opened_earlier_never_overwrites_another_process_import(tmp_path):
    path = tmp_path / "registry.json"
    x, y = many_ggufs(tmp_path / "m", 2)
    window = Registry(path)  # the app keeps one open
    finish(start("import sys\nfrom specchat.models.registry import Registry\nRegistry(__import__('pathlib')"
                 ".Path(sys.argv[1])).add(sys.argv[2], source='Org/Repo/x.gguf')", path, x))
    window.add(y)
    assert {(Path(m.path), m.source) for m in Registry(path).models()} == {
        (x.resolve(), "Org/Repo/x.gguf"), (y.resolve(), "")}


def test_two_processes_meeting_a_damaged_registry_repair_it_once(tmp_path):
    path = tmp_path / "registry.json"
    files = many_ggufs(tmp_path / "m", 3)
    good = Registry(tmp_path / "scratch.json")
    for f in files:
        good.add(f)
    damaged = (tmp_path / "scratch.json").read_text()[:-40]
    path.write_text(damaged)
    script = ("import sys\nfrom pathlib import Path\nfrom specchat.models.registry import Registry\n"
              "print(len(Registry(Path(sys.argv[1])).models()))")
    procs = [start(script, path) for _ in range(2)]
    outs = [finish(p) for p in procs]
    assert [out for out, _ in outs] == ["3\n", "3\n"]  # both see the three models
    [aside] = tmp_path.glob("registry.json.corrupt-*")  # moved aside once, by whichever came first
    assert aside.read_text() == damaged
    assert sum("damaged registry" in err for _, err in outs) == 1


# -- kill -9 in the middle of writes --------------------------------------------------------

REGISTRY_WRITER = """
import sys
from pathlib import Path
from specchat.models.registry import Registry
path, files = Path(sys.argv[1]), sorted(Path(sys.argv[2]).glob('*.gguf'))
reg = Registry(path)
print('ready', flush=True)
sys.stdin.readline()  # go
first = True
index = {str(f.resolve()): i for i, f in enumerate(files)}
while True:  # grow to all the files, then shrink from the front: every version is a contiguous range
    have = sorted(index[m.path] for m in reg.models())
    if not have:
        reg.add(files[0])
    elif have[-1] == len(files) - 1:
        reg.remove(files[have[0]])
    else:
        reg.add(files[have[-1] + 1])
    if first:  # one whole version written: from here every kill lands at a random point of some write
        print('writing', flush=True)
        first = False
"""


def contiguous(indices: list[int]) -> bool:
    return not indices or indices == list(range(indices[0], indices[0] + len(indices)))


def registry_version(path: Path, files: list[Path]) -> list[int]:
    """The indices of the files a registry lists; it must parse and have the right shape."""
    doc = json.loads(path.read_bytes().decode("utf-8"))
    assert _shape_error(doc) is None
    index = {str(f.resolve()): i for i, f in enumerate(files)}
    return sorted(index[k] for k in doc["models"])


def kill_at_random_moments(script: str, args: list[object], kills: int, check, seed: int) -> None:
    """Start the writer, let it write for a random while (reading the file all along), kill -9 it; repeat."""
    rng = random.Random(seed)
    following = start(script, *args)  # the next writer starts (imports) while this one writes
    for i in range(kills):
        proc = following
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr and proc.stderr.read()
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        following = start(script, *args) if i + 1 < kills else None
        # the window opens once it wrote a whole version, however loaded the machine: on two busy cores a
        # first write could take longer than the window, and no kill would land inside a later write
        assert proc.stdout.readline() == "writing\n", proc.stderr and proc.stderr.read()
        # a write takes milliseconds, so a window of 10-200 ms still lands each kill at a random point of
        # some write (and lets the writer get on between kills)
        deadline = time.monotonic() + rng.uniform(0.01, 0.2)
        while time.monotonic() < deadline:
            check()  # a reader during the writes never sees half a file
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        check()


def stray_temps(folder: Path, name: str) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(f".{name}.") and p.name.endswith(".tmp")]


@pytest.mark.slow
def test_kill_9_during_registry_writes_leaves_the_old_or_the_new_file(tmp_path):
    path = tmp_path / "registry.json"
    files = many_ggufs(tmp_path / "m", 40)
    versions: list[list[int]] = []

    def check() -> None:
        if path.exists():
            versions.append(registry_version(path, files))
            assert contiguous(versions[-1]), versions[-1]

    kill_at_random_moments(REGISTRY_WRITER, [path, tmp_path / "m"], kills=30, check=check, seed=1)
    assert len({tuple(v) for v in versions}) > 10  # the writer got on between kills
    # the app reads it as it is: no repair, nothing moved aside, whatever temp files a kill left
    assert contiguous(sorted(files.index(Path(m.path)) for m in Registry(path).models()))
    assert list(tmp_path.glob("registry.json.corrupt-*")) == []
    for t in stray_temps(tmp_path, "registry.json"):  # a kill between the temp file and the rename
        os.utime(t, (1, 1))  # an hour later...
    Registry(path).add(files[0])
    assert stray_temps(tmp_path, "registry.json") == []  # ...the next write removes them


CONFIG_WRITER = """
import sys
from pathlib import Path
from specchat.config import AppConfig
path = Path(sys.argv[1])
print('ready', flush=True)
sys.stdin.readline()  # go
first = True
while True:  # each version: n_ctx = 1000 + i and a target path i characters longer than '/m/.gguf'
    i = AppConfig(path)['n_ctx'] - 1000 + 1
    if i > 3000:
        i = 1
    AppConfig(path).apply({'n_ctx': 1000 + i, 'target': '/m/' + 'x' * i + '.gguf'})
    if first:  # one whole version written: from here every kill lands at a random point of some write
        print('writing', flush=True)
        first = False
"""


@pytest.mark.slow
def test_kill_9_during_config_saves_leaves_the_old_or_the_new_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("n_ctx = 1000\n")
    seen: set[int] = set()

    def check() -> None:
        c = AppConfig(path)  # ConfigError if half a file were ever read
        i = int(str(c["n_ctx"])) - 1000
        assert len(str(c["target"])) == (len("/m/.gguf") + i if i else 0)
        seen.add(i)

    kill_at_random_moments(CONFIG_WRITER, [path], kills=30, check=check, seed=2)
    assert len(seen) > 10
    assert list(tmp_path.glob("config.toml.corrupt-*")) == []


# -- the calibration cache ------------------------------------------------------------------

STORE_COSTS = """
import sys
from pathlib import Path
from specchat.engine.calibration import store_costs
from specchat.engine.controller import CostModel
for i in range(40):
    store_costs(Path(sys.argv[1]), f'{sys.argv[2]}{i}', CostModel({1: 0.01, 2: 0.02}, {'lookup': 0.0}))
"""


def test_two_processes_calibrating_at_once_keep_each_others_entries(tmp_path):
    cache = tmp_path / "calibration.json"
    procs = [start(STORE_COSTS, cache, prefix) for prefix in ("a", "b")]
    for p in procs:
        finish(p)
    assert sorted(json.loads(cache.read_text())) == sorted(f"{p}{i}" for p in "ab" for i in range(40))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json", "calibration.json.lock"]
