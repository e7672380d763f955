"""Every failure of a command ends in one stderr line: exit 2 for the user's input, 1 for our bugs."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from specchat.cli import commands as cli
from specchat.errors import UserError, one_line
from specchat.profile import Profile


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, list[str]]:
    rc = cli.main(list(argv), profile=Profile.at(tmp_path / "profile"))
    err = capsys.readouterr().err
    return rc, err.splitlines()


def test_a_user_error_from_deep_inside_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch) -> None:
    class Deep(UserError):
        pass

    def boom(args):
        raise Deep("model.gguf: something\nwrong  with\tit")

    monkeypatch.setattr(cli, "cmd_config", boom)
    rc, lines = run(capsys, tmp_path, "config")
    assert rc == 2
    assert lines == ["specchat: model.gguf: something wrong with it"]


def test_a_bug_is_one_line_naming_a_saved_traceback(capsys, tmp_path, monkeypatch) -> None:
    def boom(args):
        raise KeyError("oops")

    monkeypatch.setattr(cli, "cmd_config", boom)
    rc, lines = run(capsys, tmp_path, "config")
    assert rc == 1
    assert len(lines) == 1 and lines[0].startswith("specchat: internal error: KeyError")
    saved = Path(re.search(r"please report it with (\S+)\)", lines[0]).group(1))
    try:
        assert "Traceback" in saved.read_text() and "oops" in saved.read_text()
    finally:
        saved.unlink()


def test_warnings_of_the_core_are_specchat_lines(capsys, tmp_path, monkeypatch) -> None:
    def warn(args):
        logging.getLogger("specchat.models.registry").warning("registry.json was damaged; moved aside")
        return 0

    monkeypatch.setattr(cli, "cmd_config", warn)
    rc, lines = run(capsys, tmp_path, "config")
    assert rc == 0
    assert lines == ["specchat: registry.json was damaged; moved aside"]
    rc, lines = run(capsys, tmp_path, "config")  # a second command in one process: still one line
    assert lines == ["specchat: registry.json was damaged; moved aside"]


@pytest.mark.parametrize("argv", [
    ["models", "fit", "x.gguf", "--ctx", "99999999999999999999999"],
    ["models", "fit", "x.gguf", "--ctx", "0"],
    ["chat", "--max-tokens", "1e9", "hi"],
    ["models", "pull", "some-pair", "--draft-index", "-1"],
])
def test_numbers_out_of_range_are_refused_before_any_work(capsys, tmp_path, argv) -> None:
    rc, lines = run(capsys, tmp_path, *argv)
    assert rc == 2
    assert len(lines) == 1 and lines[0].startswith("specchat ")


def test_one_line_flattens_control_characters_and_caps_length() -> None:
    assert one_line("a\r\nb\x00c\x1b[31m") == "a b c [31m"
    assert len(one_line("x" * 10_000)) == 400


def test_a_file_system_refusal_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch) -> None:
    import errno

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out.json"))

    monkeypatch.setattr(cli, "cmd_config", full)
    rc, lines = run(capsys, tmp_path, "config")
    assert rc == 2
    assert lines == [f"specchat: {tmp_path / 'out.json'}: No space left on device"]
