"""Shared fixtures: the pinned real test models (docs/ARCHITECTURE.md), provisioned once per machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import specchat  # noqa: F401  (before any test module: llama.cpp's library loads before numpy; see its __init__)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # GUI tests run headless

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import test_models  # noqa: E402  (scripts/test_models.py)


@pytest.fixture(autouse=True, scope="session")
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep tests away from the user's real config, data and cache dirs (the models cache stays)."""
    os.environ.setdefault("SPECCHAT_TEST_MODELS", str(test_models.cache_dir()))
    home = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        os.environ[var] = str(home / var.lower())


MODEL_FIXTURES = frozenset({"qwen_target", "qwen_draft", "gemma", "smollm"})


# The inner loop (``pytest -m inner``): the Qt-free core and the UI flows that take well under a
# second each; no model file, no subprocess-heavy or kill-and-restart test (those stay in the fast tier).
INNER = (
    "tests/engine/", "tests/telemetry/", "tests/store/", "tests/test_metrics.py", "tests/test_config.py",
    "tests/test_layers.py", "tests/test_files.py", "tests/workers/test_services_on_the_fake.py",
    "tests/workers/test_hub_tasks.py", "tests/ui/test_main_window.py", "tests/ui/test_chat_shortcuts.py",
    "tests/ui/test_telemetry_panel.py", "tests/ui/test_answer_view.py", "tests/ui/test_settings_dialogs.py",
    "tests/ui/test_reasoning_split_ui.py", "tests/ui/test_chat_settings_structured.py",
    "tests/ui/test_theme_contrast.py",
)
# in those places, what runs a child process or a whole command (about 5 s of the inner loop's 20)
INNER_EXCEPT = (
    "tests/store/test_crash_safety.py",
    "tests/engine/test_simulate.py::test_simulate_agreement_from_the_command_line",
    "tests/engine/test_simulate.py::test_the_agreement_table_has_one_column_per_share_and_the_kits_goals",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses a real model file, directly or through another fixture, is ``real_models``:
    the fast tier (``-m "not real_models"``) can never start a 1 GB download by accident.  The others
    under :data:`INNER` are ``inner``, but for :data:`INNER_EXCEPT` and any marked ``slow``."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_models)
            continue
        if inner(item.nodeid) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.inner)


def inner(nodeid: str) -> bool:
    """Is this test (its id from the repository root) in the inner loop?"""
    return nodeid.split("::")[0].startswith(INNER) and not nodeid.startswith(INNER_EXCEPT)


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
