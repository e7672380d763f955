"""Fixtures for the hub client tests: a local hub serving the real test models.

huggingface_hub reads HF_ENDPOINT once, at import, into ``constants.ENDPOINT`` and
``constants.HUGGINGFACE_CO_URL_TEMPLATE`` (``hf_hub_url`` formats the latter at call
time).  Setting the environment variable in a test is too late for this process, so the
``hub`` fixture patches both constants (and sets HF_ENDPOINT too, for subprocesses, which
import huggingface_hub afresh), then checks that ``hf_hub_url`` really points at the
local server: if a future huggingface_hub reads the endpoint elsewhere, the tests fail
here instead of trying the real hub.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import test_models  # scripts/test_models.py, put on sys.path by tests/conftest.py
from helpers.hub_server import REPOS, HubServer, point_huggingface_hub_at
from specchat.models.hub import HubFile


@pytest.fixture(scope="session")
def hub_server(qwen_target: Path, qwen_draft: Path, gemma: Path, smollm: Path) -> Iterator[HubServer]:
    """One server for the session, serving the four pinned models from the user cache."""
    paths = {"qwen-1.5b": qwen_target, "qwen-0.5b": qwen_draft, "gemma-270m": gemma, "smollm2-135m": smollm}
    server = HubServer()
    for name, path in paths.items():
        model = test_models.MODELS[name]
        server.add_file(REPOS[name], model.filename, path, sha256=model.sha256)
    with server:
        yield server


@pytest.fixture
def hub_files() -> dict[str, HubFile]:
    """The test models as hub files, by test-model name."""
    return {name: HubFile(REPOS[name], test_models.MODELS[name].filename) for name in REPOS}


@pytest.fixture
def hf_home(tmp_path: Path) -> Iterator[Path]:
    """A private HF_HOME (cache, token) per test, deleted afterwards: downloads here are GBs."""
    home = tmp_path / "hf-home"
    home.mkdir()
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def hf_cache(hf_home: Path) -> Path:
    """The hub cache of the test (also huggingface_hub's default while ``hub`` is active)."""
    return hf_home / "hub"


@pytest.fixture
def hub(hub_server: HubServer, hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """The local hub, reset, with huggingface_hub pointed at it, online, without xet or any token."""
    hub_server.reset()
    point_huggingface_hub_at(hub_server.url, hf_home, monkeypatch)
    yield hub_server
    hub_server.reset()
