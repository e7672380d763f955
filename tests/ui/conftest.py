"""Fixtures for the window's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.app_driver import FakeApp
from helpers.fakes import FakePairFactory, FakeSpec
from specchat.workers.tasks import TaskRunner


@pytest.fixture
def fake_app(qtbot, tmp_path) -> Iterator[Callable[..., FakeApp]]:
    """``fake_app(spec)`` makes a FakeApp; every one is stopped at the end of the test."""
    made: list[FakeApp] = []

    def make(spec: FakeSpec | None = None, root: Path | None = None) -> FakeApp:
        app = FakeApp(root or tmp_path, FakePairFactory(spec or FakeSpec()))
        made.append(app)
        return app

    yield make
    for app in made:
        app.stop()


@pytest.fixture
def tasks(qtbot) -> Iterator[TaskRunner]:
    """A task runner for a dialog built without a session (the session owns the app's)."""
    runner = TaskRunner("specchat-test-tasks")
    yield runner
    runner.shutdown()


@pytest.fixture(autouse=True)
def _no_modifier_left_held(qapp) -> Iterator[None]:  # noqa: ANN001
    """QTest's simulated Ctrl+N leaves QGuiApplication.keyboardModifiers() at Ctrl until the next plain
    key event (its releases carry the modifiers they release), and a held Ctrl turns a later test's
    selectRow into a toggle.  Each test starts, and ends, with no modifier held."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QWidget

    def release() -> None:
        if QGuiApplication.keyboardModifiers() != Qt.KeyboardModifier.NoModifier:
            probe = QWidget()
            QTest.keyRelease(probe, Qt.Key.Key_unknown)  # a spontaneous key event with no modifier
            probe.deleteLater()

    release()
    yield
    release()


@pytest.fixture(autouse=True)
def _no_model_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The window's tests reach no model hub (the Models dialog reads the catalog's headers when it
    opens): huggingface_hub offline, so those reads fail at once and the size estimate stays.  Tests
    that serve a local hub (tests/helpers/hub_server.py) switch it back on for their server."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
