"""The layer script really catches a worker that reaches for widgets and a ui module that imports
llama.cpp, the real tree is clean, and import-linter's floors name every room of the package."""

import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import check_layers  # noqa: E402


def test_the_real_tree_keeps_its_layers():
    assert check_layers.breaches() == []


def fake_tree(tmp_path, monkeypatch, files: dict[str, str]) -> list[str]:
    root = tmp_path / "specchat"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for d in ("workers", "ui", "engine", "store", "workers"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for mod in ("engine/generate.py", "engine/controller.py", "engine/runtime.py", "store/__init__.py"):
        (root / mod).touch()
    monkeypatch.setattr(check_layers, "ROOT", root)
    return check_layers.breaches()


def test_a_widget_import_in_a_worker_is_reported(tmp_path, monkeypatch):
    found = fake_tree(tmp_path, monkeypatch, {
        "workers/bad.py": "from PySide6.QtCore import QObject\nfrom PySide6 import QtWidgets\nimport PySide6.QtGui\n"})
    assert len(found) == 2
    assert "PySide6.QtWidgets" in found[0] and "PySide6.QtGui" in found[1]


def test_ui_importing_llama_cpp_is_reported_even_inside_a_function(tmp_path, monkeypatch):
    found = fake_tree(tmp_path, monkeypatch, {
        "ui/bad.py": ("from specchat.store import Store\n"
                      "from specchat.engine.events import Done\n"
                      "def about():\n    import llama_cpp\n"
                      "from llama_cpp import Llama\n")})
    assert len(found) == 2, found
    assert all("llama_cpp" in line and "ui never calls llama.cpp" in line for line in found)


def test_every_room_of_the_package_stands_on_a_floor_of_the_layers_contract():
    """A new top-level module or package left off the floors would escape the one rule that keeps
    arrows pointing down (import-linter checks only the modules a layer names)."""
    doc = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    layers = [c for c in doc["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert len(layers) == 1
    on_floors = {name.strip() for floor in layers[0]["layers"] for name in floor.split("|")}
    rooms = {f"specchat.{p.stem}" for p in check_layers.ROOT.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert rooms - on_floors == set(), "rooms on no floor"
    assert on_floors - rooms == set(), "floors naming no room"


def test_the_real_tree_has_no_import_circle_but_the_known_ones_and_they_are_still_there():
    assert check_layers.circle_breaches() == []
    found = {frozenset(group) for group in check_layers.import_circles()}
    assert set(check_layers.KNOWN_CIRCLES) <= found  # a circle taken apart leaves the list


def test_an_import_circle_is_reported_through_functions_and_type_checking(tmp_path, monkeypatch):
    fake_tree(tmp_path, monkeypatch, {
        "engine/a.py": "from .b import thing\n",
        "engine/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n",
        "engine/c.py": "def later():\n    from specchat.engine.a import thing\n",
        "engine/d.py": "from . import a\nfrom specchat.engine import b\n",  # uses the circle, is not in it
    })
    assert check_layers.circle_breaches() == [
        "import circle: specchat.engine.a <-> specchat.engine.b <-> specchat.engine.c"]
