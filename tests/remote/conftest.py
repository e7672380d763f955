"""Fixtures of the remote tests."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

import test_server  # scripts/test_server.py, put on sys.path by tests/conftest.py

# --- llama-server: the real build and a fake one (tests/remote/test_llama_server.py) --------

# Read now, at collection: tests/conftest.py moves XDG_CACHE_HOME to a temp dir for the session,
# and the build lives in the user's real cache dir (like the test models).
LLAMA_SERVER_ROOT = test_server.build_root()
FAKE_LLAMA_SERVER = Path(__file__).parents[1] / "helpers" / "fake_llama_server.py"


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    """The llama-server built by scripts/test_server.py: skipped without it, a failure under CI."""
    binary = test_server.cached_binary(LLAMA_SERVER_ROOT)
    if binary is None:
        reason = f"no llama-server built under {LLAMA_SERVER_ROOT}: run python scripts/test_server.py"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


@pytest.fixture
def fake_llama_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable ``llama-server`` that runs tests/helpers/fake_llama_server.py (its state,
    ``runs.jsonl``, in the launcher's directory; FAKE_LLAMA_* variables steer it)."""
    if os.name != "posix":
        pytest.skip("the fake llama-server's launcher is a shell script")
    home = tmp_path / "fake-llama"
    home.mkdir()
    launcher = home / "llama-server"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_LLAMA_SERVER}" "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_LLAMA_STATE", str(home))
    for var in ("FAKE_LLAMA_LOAD_S", "FAKE_LLAMA_FAIL", "FAKE_LLAMA_CRASHES", "FAKE_LLAMA_CRASH_AFTER_S",
                "FAKE_LLAMA_IGNORE_TERM", "FAKE_LLAMA_OMIT", "FAKE_LLAMA_SLOTS", "FAKE_LLAMA_READY_FILE", "FAKE_LLAMA_START_DELAY_S"):
        monkeypatch.delenv(var, raising=False)
    return launcher
