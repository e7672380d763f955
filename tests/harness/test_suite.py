"""A bench suite file of any content loads or is refused with one line naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.harness.suite import SuiteError, load_suite


def test_a_good_suite_loads_its_prompts(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text('{"id": "a", "task": "code", "messages": [{"role": "user", "content": "hi"}]}\n\n')
    [p] = load_suite(str(f))
    assert (p.id, p.task, p.messages[0]["content"]) == ("a", "code", "hi")


@pytest.mark.parametrize("content", [
    b"\xff\xfe not utf-8",
    b"[1]",
    b'"text"',
    b"{not json",
    b'{"messages": "hi"}',
    b'{"messages": [{"role": 1, "content": "x"}]}',
    b'{"messages": [{"role": "user", "content": {"a": 1}}]}',
    b'{"id": "x"}',
    b"",
])
def test_a_broken_suite_is_one_line(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(content)
    with pytest.raises(SuiteError) as caught:
        load_suite(str(f))
    assert "\n" not in str(caught.value) and "s.jsonl" in str(caught.value)


def test_a_directory_or_missing_file_is_one_line(tmp_path: Path) -> None:
    for spec in (str(tmp_path), str(tmp_path / "nope.jsonl")):
        with pytest.raises(SuiteError):
            load_suite(spec)
