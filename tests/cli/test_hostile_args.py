"""Numbers and text on the command line: what argparse lets through is checked before anything runs.

A number that is not finite (``--temp nan``) or text that is not UTF-8 (a prompt in Latin-1 bytes,
which Python hands over with lone surrogates) is one line and exit 2, naming the flag; never an
"internal error", never an answer of random text.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specchat.cli import commands as cli
from specchat.profile import Profile


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, list[str]]:
    rc = cli.main(list(argv), profile=Profile.at(tmp_path / "profile"))
    return rc, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("flag", ["--temp", "--repeat-penalty", "--top-p", "--min-p"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
@pytest.mark.parametrize("command", ["chat", "bench"])
def test_a_number_that_is_not_finite_is_refused_naming_it(capsys, tmp_path, command, flag, value):
    argv = [command, "--target", str(tmp_path / "none.gguf"), f"{flag}={value}"] + (["hi"] if command == "chat" else [])
    rc, lines = run(capsys, tmp_path, *argv)
    assert rc == 2
    assert len(lines) == 1 and "finite" in lines[0], lines  # not "no such file": refused before any model
    assert flag.removeprefix("--").replace("-", "_").replace("temp", "temperature") in lines[0]


@pytest.mark.parametrize(("argv", "named"), [
    (["chat", "--target", "x.gguf", "caf\udce9"], "prompt"),
    (["chat", "--target", "x.gguf", "--system", "\udcff\udcfe", "hi"], "--system"),
    (["chat", "--target", "x.gguf", "--stop", "ok", "--stop", "\udc80", "hi"], "--stop"),
    (["chat", "--pair", "qwen\udce9", "hi"], "--pair"),
])
def test_text_that_is_not_utf8_is_refused_naming_the_argument(capsys, tmp_path, argv, named):
    rc, lines = run(capsys, tmp_path, *argv)
    assert rc == 2
    assert len(lines) == 1 and "not valid UTF-8" in lines[0] and named in lines[0], lines


def test_a_file_name_that_is_not_utf8_is_still_a_file_name(capsys, tmp_path):
    """Paths are bytes to the OS: a Latin-1 file name is a file name (here, one that is not there)."""
    rc, lines = run(capsys, tmp_path, "chat", "--target", str(tmp_path / "mod\udce8le.gguf"), "hi")
    assert rc == 2 and len(lines) == 1 and "not valid UTF-8" not in lines[0] and "internal" not in lines[0]


@pytest.mark.real_models
def test_a_latin1_prompt_from_a_terminal_is_one_line_not_an_internal_error(smollm, tmp_path):
    """As reported: the bytes of a Latin-1 terminal reach the model only after the load, as a crash."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    for extra in ([b"caf\xe9"], [b"--system", b"\xff", b"hi"]):
        proc = subprocess.run([sys.executable.encode(), b"-m", b"specchat", b"--profile", str(tmp_path).encode(),
                               b"chat", b"--target", str(smollm).encode(), b"--max-tokens", b"2", *extra],
                              capture_output=True, timeout=120, env=env)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 2, err
        assert "internal error" not in err and "not valid UTF-8" in err and len(err.strip().splitlines()) == 1


# -- every flag and argument, fed hostile values -------------------------------------------------

NUMBER_TEXT = st.one_of(
    st.sampled_from(["nan", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e999", "0", "-0", "1e-320", "0x10",
                     "1_000", " 1", "", "\udcff", "٣", "1" * 5000]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(1 << 100), 1 << 100).map(str),
    st.text(max_size=8))
HOSTILE_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=12),  # lone surrogates included
    st.lists(st.sampled_from(["\udc80", "\udcff", "\ud800", "\x00", "\x1b]0;x\x07", "a", "-", "--"]),
             max_size=4).map("".join))
FLAGS = ["--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--seed", "--max-tokens", "--ctx",
         "--threads", "--k-max"]


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(flag=st.sampled_from(FLAGS), value=NUMBER_TEXT, prompt=HOSTILE_TEXT, system=HOSTILE_TEXT)
def test_hostile_flags_and_text_end_in_one_line_of_the_users_error(tmp_path_factory, flag, value, prompt, system):
    """Whatever the values, the command ends before any model loads with exit 2 and one line (here the
    model file is missing, so a run that gets that far says so): never an internal error."""
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("h")
    err = io.StringIO()
    argv = ["chat", "--target", str(tmp / "none.gguf"), f"{flag}={value}", "--system", system, "--", prompt]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(argv, profile=Profile.at(tmp / "p"))
    lines = err.getvalue().splitlines()
    assert rc == 2, lines
    assert len(lines) == 1 and "internal error" not in lines[0], lines
