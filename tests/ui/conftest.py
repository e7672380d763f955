"""Fixtures for the window's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from app_driver import FakeApp

from fakes import FakePairFactory, FakeSpec


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
