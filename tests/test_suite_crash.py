"""A test that kills its interpreter (a native fault: SIGILL, SIGSEGV) must not take the README's test run
down unseen (issue 31: the whole suite once died at the first batch decode, with no summary line).

The README's test command runs pytest in an xdist worker: a worker killed by a signal is reported as
"crashed while running" that test, counted as failed, and replaced, and the run goes on to its summary.
This runs pytest with the README's own pytest options on a small suite that crashes.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CRASHY = """
import os, signal

def test_before():
    pass

def test_a_kernel_the_cpu_cannot_run():
    signal.signal(signal.SIGILL, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGILL)

def test_after():
    pass
"""


def readme_pytest_options() -> list[str]:
    """The options of the pytest call in README.md's test command (between the test-command markers)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- test-command -->\s*```\s*\n(.*?)\n```", text, re.S)
    assert block, "README.md has no test command"
    words = shlex.split(block.group(1).split("&&")[-1])
    assert words[0] == "pytest", block.group(1)
    return words[1:]


def test_the_readme_runs_pytest_with_workers_that_survive_a_crash():
    options = readme_pytest_options()
    assert "-n" in options or any(o.startswith("--numprocesses") for o in options), options


def test_a_crashing_test_is_reported_by_name_and_the_others_still_run(tmp_path):
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's settings: only the README's options
    proc = subprocess.run([sys.executable, "-m", "pytest", *readme_pytest_options(), "-p", "no:cacheprovider",
                           "test_crashy.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(r"crashed while running .*test_a_kernel_the_cpu_cannot_run", out), out
    assert re.search(r"\b1 failed, 2 passed\b", out), out
