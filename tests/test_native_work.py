"""A crash in llama.cpp ends the process with no word; the next start must know, and not load the same
pair blindly again (issue 31): app/specchat/native_work.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.native_work import CRASH_LOG, WORK_FILE, LastCrash, NativeWork, read_last_crash

# a process that records a load, enables the crash log, and dies inside the load by SIGILL, as a
# tile instruction the CPU cannot run kills it
CRASHING = r"""
import os, signal, sys
from pathlib import Path
from specchat.native_work import NativeWork, enable_crash_log
data = Path(sys.argv[1])
enable_crash_log(data)
with NativeWork(data).running("load", "big-target.gguf", [data / "big-target.gguf", data / "draft.gguf"]):
    os.kill(os.getpid(), signal.SIG{sig})
"""


def test_work_is_recorded_while_it_runs_and_gone_after_it(tmp_path):
    work = NativeWork(tmp_path)
    with work.running("answer", "t.gguf", [tmp_path / "t.gguf"]):
        doc = json.loads((tmp_path / WORK_FILE).read_text())
        assert doc["what"] == "answer" and doc["files"] == [str(tmp_path / "t.gguf")]
    assert not (tmp_path / WORK_FILE).exists()
    with pytest.raises(RuntimeError), work.running("load", "t.gguf", [tmp_path / "t.gguf"]):
        raise RuntimeError("a Python error is not a crash: the app lives on")
    assert not (tmp_path / WORK_FILE).exists()
    with work.running("load", "a server", []):  # nothing of llama.cpp runs in this process
        assert not (tmp_path / WORK_FILE).exists()
    assert read_last_crash(tmp_path) is None  # a clean run leaves nothing to tell


@pytest.mark.parametrize("sig, fatal", [("ILL", "Illegal instruction"), ("SEGV", "Segmentation fault")])
def test_a_native_crash_inside_a_load_is_told_once_at_the_next_start(tmp_path, sig, fatal):
    proc = subprocess.run([sys.executable, "-c", CRASHING.format(sig=sig), str(tmp_path)], capture_output=True,
                          timeout=60)
    assert proc.returncode < 0  # it really died by the signal
    crash = read_last_crash(tmp_path)
    assert crash is not None
    assert (crash.what, crash.label, crash.fatal) == ("loading", "big-target.gguf", f"Fatal Python error: {fatal}")
    assert crash.files == (tmp_path / "big-target.gguf", tmp_path / "draft.gguf")
    assert crash.log == tmp_path / (CRASH_LOG + ".1") and "Current thread" in crash.log.read_text()
    line = crash.line()
    assert line.startswith(f"SpecChat crashed ({fatal}) last time while loading big-target.gguf: it was not loaded "
                           "again. Send a message to load it, or choose another pair") and "\n" not in line
    assert read_last_crash(tmp_path) is None  # told once


def test_a_kill_during_an_answer_reads_as_ended_not_crashed(tmp_path):
    (tmp_path / WORK_FILE).write_text(json.dumps({"what": "answer", "label": "t.gguf", "files": ["/m/t.gguf"]}))
    crash = read_last_crash(tmp_path)
    assert crash == LastCrash("answering", "t.gguf", (Path("/m/t.gguf"),), "", None)
    assert crash.line().startswith("SpecChat ended unexpectedly last time while answering t.gguf")


@pytest.mark.parametrize("content", ["{half", "[1, 2]", '{"files": "x", "what": 3}', "\x00" * 100_000])
def test_a_damaged_record_still_reads_as_an_unexpected_end_and_never_stops_the_start(tmp_path, content):
    (tmp_path / WORK_FILE).write_text(content)
    crash = read_last_crash(tmp_path)
    assert crash is not None and crash.files == () and crash.line() == "SpecChat ended unexpectedly last time."
    assert not (tmp_path / WORK_FILE).exists()
