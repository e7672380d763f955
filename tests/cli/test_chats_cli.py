"""``specchat chats export|import|list|backup|backups``: the files a user gets, and one line for a refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.cli import commands as cli
from specchat.profile import Profile
from specchat.store import open_store

DATA = Path(__file__).parents[1] / "store" / "data"


def run(capsys: pytest.CaptureFixture[str], profile: Path, *argv: str) -> tuple[int, str, list[str]]:
    rc = cli.main(list(argv), profile=Profile.at(profile))
    out = capsys.readouterr()
    return rc, out.out, out.err.splitlines()


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    root = tmp_path / "profile"
    with open_store(Profile.at(root).database) as store:
        for title in ("First", "Second"):
            chat = store.create_chat(title)
            store.add_message(chat.id, "user", f"question in {title}")
            store.add_message(chat.id, "assistant", f"answer in {title}\n```sh\nls\n```", reasoning="hmm")
    return root


def test_export_all_as_json_then_import_into_another_profile(capsys, profile, tmp_path):
    out = tmp_path / "chats.json"
    rc, printed, err = run(capsys, profile, "chats", "export", "--all", "--format", "json", "--out", str(out))
    assert rc == 0 and err == [] and f"exported 2 chats to {out}" in printed
    assert json.loads(out.read_text())["format"] == "specchat-chats"

    other = tmp_path / "other"
    rc, printed, err = run(capsys, other, "chats", "import", str(out))
    assert rc == 0 and "imported 2 chats" in printed and "SpecChat export" in printed
    rc, printed, _ = run(capsys, other, "chats", "list")
    assert "First" in printed and "Second" in printed


def test_export_one_chat_as_markdown_with_and_without_reasoning(capsys, profile, tmp_path):
    out = tmp_path / "one.md"
    assert run(capsys, profile, "chats", "export", "1", "--format", "markdown", "--out", str(out))[0] == 0
    text = out.read_text()
    assert "# First" in text and "Second" not in text and "```sh\nls\n```" in text and "hmm" in text
    run(capsys, profile, "chats", "export", "1", "--format", "markdown", "--no-reasoning", "--out", str(out))
    assert "hmm" not in out.read_text()


@pytest.mark.parametrize("argv, words", [
    (["chats", "export", "99", "--format", "json", "--out", "x.json"], "no chat 99"),
    (["chats", "import", "missing.json"], "No such file"),
])
def test_a_refusal_is_one_line_and_exit_2(capsys, profile, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, profile, *argv)
    assert rc == 2 and len(err) == 1 and words in err[0]


def test_importing_a_refused_file_from_the_shell_is_one_line_exit_2_and_adds_nothing(profile, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"mapping": {"a": {"id": "a", "parent": None, "children": {"x": 1}}}}]))
    proc = subprocess.run([sys.executable, "-m", "specchat", "--profile", str(profile), "chats", "import", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot import" in proc.stderr
    with open_store(Profile.at(profile).database) as store:
        assert len(store.list_chats()) == 2


def test_chatgpt_and_openwebui_exports_import_from_the_command_line(capsys, tmp_path):
    root = tmp_path / "p"
    rc, printed, _ = run(capsys, root, "chats", "import", str(DATA / "chatgpt-conversations.json"))
    assert rc == 0 and "imported 2 chats (6 messages shown) from a ChatGPT export" in printed
    rc, printed, _ = run(capsys, root, "chats", "import", str(DATA / "openwebui-export.json"))
    assert rc == 0 and "imported 1 chat (4 messages shown) from an Open WebUI export: Sea haiku" in printed


def test_backup_then_backups_lists_it(capsys, profile):
    rc, printed, _ = run(capsys, profile, "chats", "backup")
    assert rc == 0 and "backed up the chats to" in printed
    made = Path(printed.split(" to ", 1)[1].strip())
    assert made.is_file() and made.parent == Profile.at(profile).data_dir / "backups"
    rc, printed, _ = run(capsys, profile, "chats", "backups")
    assert rc == 0 and "manual" in printed and str(made) in printed
