"""Shared fixtures: the pinned real test models (DESIGN.md), provisioned once per machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

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
