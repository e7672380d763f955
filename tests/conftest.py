"""Shared fixtures: the pinned real test models (docs/ARCHITECTURE.md), provisioned once per machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import specchat  # noqa: F401  (before any test module: llama.cpp's library loads before numpy; see its __init__)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # GUI tests run headless
# the suite's other work is its own (xdist workers, a loaded CI box): the contention judge's CPU counters
# are not read, so no answer of a test is judged busy by chance; its own tests give it a fake machine
os.environ["SPECCHAT_ASSUME_QUIET"] = "1"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import test_models  # noqa: E402  (scripts/test_models.py)
from helpers.tiers import inner  # noqa: E402  (tests/helpers/tiers.py)


@pytest.fixture(autouse=True, scope="session")
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep tests away from the user's real config, data and cache dirs (the models cache stays)."""
    os.environ.setdefault("SPECCHAT_TEST_MODELS", str(test_models.cache_dir()))
    home = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        os.environ[var] = str(home / var.lower())


MODEL_FIXTURES = frozenset({"qwen_target", "qwen_draft", "gemma", "smollm"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses a real model file, directly or through another fixture, is ``real_models``:
    the fast tier (``-m "not real_models"``) can never start a 1 GB download by accident.  The others
    in the inner loop (tests/helpers/tiers.py) are ``inner``, but any marked ``slow``."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_models)
            continue
        if inner(item.nodeid) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.inner)



@pytest.fixture(autouse=True)
def _no_leaked_windows_or_threads(request: pytest.FixtureRequest):
    """Fail a test that leaves a top-level window or dialog behind, or a worker thread running.

    Autouse, so it is set up before the test's own fixtures and checks after all of them
    (pytest-qt's widget closing included) have been torn down.
    """
    def windows() -> dict[int, object]:
        if "PySide6.QtWidgets" not in sys.modules:
            return {}
        from PySide6.QtWidgets import QApplication, QDialog, QMainWindow
        from shiboken6 import Shiboken

        app = QApplication.instance()
        out = {}
        for w in app.topLevelWidgets() if app is not None else ():
            if isinstance(w, QMainWindow | QDialog) or w.isVisible():
                out[Shiboken.getCppPointer(w)[0]] = w
        return out

    before = set(windows())
    yield
    if "PySide6.QtWidgets" not in sys.modules:
        return
    from PySide6.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    QCoreApplication.processEvents()
    leaked = [type(w).__name__ + (f" {w.windowTitle()!r}" if w.windowTitle() else "")
              for p, w in windows().items() if p not in before]
    from specchat.workers.threads import running_threads

    running = running_threads()
    if leaked or running:
        pytest.fail(f"leaked top-level widgets: {leaked}; worker threads still running: {running}")


def _model(name: str) -> Path:
    return test_models.ensure(name, quiet=True)


@pytest.fixture(scope="session")
def qwen_target() -> Path:
    return _model("qwen-1.5b")


@pytest.fixture(scope="session")
def qwen_draft() -> Path:
    return _model("qwen-0.5b")


@pytest.fixture(scope="session")
def gemma() -> Path:
    return _model("gemma-270m")


@pytest.fixture(scope="session")
def smollm() -> Path:
    return _model("smollm2-135m")
