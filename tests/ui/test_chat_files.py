"""File → Export this chat… / Export all chats… / Import chats… / Restore a backup…, and the chat list's menu:
the file a user gets, the chats that appear, and one line in the status bar either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.store import backup

DATA = Path(__file__).parents[1] / "store" / "data"


@pytest.fixture
def app(fake_app, qtbot):
    app = fake_app()
    first = app.add_chat("Sorting")
    app.add_chat("Haiku")
    app.start(qtbot)
    store = app.session.store
    store.add_message(first, "user", "How do I sort?\n```python\nsorted(xs)\n```")
    store.add_message(first, "assistant", "Use sorted.", reasoning="easy one")
    app.first = first
    return app


def status(window) -> str:
    return window.statusBar().currentMessage()


def finish(window, qtbot) -> None:
    """The file is read or written on the session's task runner: wait for it (the line says how it went)."""
    assert window.files.working or status(window).startswith(("not exported", "nothing imported"))
    qtbot.waitUntil(lambda: not window.files.working, timeout=30_000)


def run_dialog(window, slot: str, path: Path | None = None):
    window.actions_by_slot[slot].trigger()
    dialog = window.files.dialog
    assert dialog is not None and dialog.isVisible()
    if path is not None:
        dialog.path.setText(str(path))
    return dialog


def test_export_this_chat_as_markdown_says_where_it_went(app, qtbot, tmp_path):
    window = app.window
    window.open_chat(app.first)
    dest = tmp_path / "sorting.md"
    dialog = run_dialog(window, "export_chat", dest)
    assert dialog.this_chat.isChecked() and "Sorting" in dialog.this_chat.text()
    dialog.export_button.click()
    assert status(window) == f"exporting to {dest}…"
    finish(window, qtbot)
    assert status(window) == f"exported “Sorting” to {dest}"
    text = dest.read_text()
    assert "# Sorting" in text and "```python\nsorted(xs)\n```" in text and "easy one" in text and "Haiku" not in text


def test_export_all_as_json_then_import_it_adds_the_chats_again(app, qtbot, tmp_path):
    window = app.window
    dest = tmp_path / "all.json"
    dialog = run_dialog(window, "export_all_chats", dest)
    dialog.json.setChecked(True)
    dest = Path(dialog.path.text())
    dialog.export_button.click()
    finish(window, qtbot)
    assert status(window) == f"exported 2 chats to {dest}"
    assert len(json.loads(dest.read_text())["chats"]) == 2

    dialog = run_dialog(window, "import_chats", dest)
    dialog.import_button.click()
    finish(window, qtbot)
    assert status(window).startswith("imported 2 chats from a SpecChat export")
    titles = [text for _, text in window.chats.items()]
    assert titles.count("Sorting") == 2 and titles.count("Haiku") == 2
    assert window.pane.chat_id not in (app.first, None)  # the imported chat is shown


def test_importing_a_chatgpt_export_shows_its_chat(app, qtbot):
    dialog = run_dialog(app.window, "import_chats", DATA / "chatgpt-conversations.json")
    dialog.import_button.click()
    finish(app.window, qtbot)
    assert "imported 2 chats from a ChatGPT export" in status(app.window)
    assert "Sorting in Python" in [text for _, text in app.window.chats.items()]


def test_a_refused_import_or_export_is_one_line_and_changes_nothing(app, qtbot, tmp_path):
    window = app.window
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "specchat-chats", "version": 99, "chats": []}')
    before = window.chats.items()
    run_dialog(window, "import_chats", bad).import_button.click()
    finish(window, qtbot)
    assert status(window).startswith("nothing imported: cannot import") and "newer SpecChat" in status(window)
    assert window.chats.items() == before
    run_dialog(window, "export_chat", tmp_path).export_button.click()  # a folder
    finish(window, qtbot)
    assert status(window) == f"not exported: cannot export to {tmp_path}: a folder, not a regular file"


def test_the_chat_list_menu_exports_and_imports(app):
    texts = [a.text() for a in app.window.chats.list.actions()]
    assert {"Export…", "Export all chats…", "Import chats…"} <= set(texts)


def test_restore_a_backup_brings_the_chats_back_and_keeps_what_it_replaced(app):
    window = app.window
    store = app.session.store
    made = window.commands.back_up()
    window.delete_chat(app.first)
    assert window.undo_bar.pending == [app.first]
    store.purge_trash()
    store.create_chat("Made after the backup")
    dialog = run_dialog(window, "restore_backup")
    assert dialog.list.count() == 1 and dialog.chosen() == made
    dialog.restore_button.click()
    assert status(window).startswith(f"restored the chats from {made.name}; what they were is kept as")
    titles = sorted(text for _, text in window.chats.items())
    assert titles == ["Haiku", "Sorting"]
    assert window.pane.chat_id in {c.id for c in store.list_chats()}
    assert window.undo_bar.pending == []  # no undo of a delete from before the restore
    kept = [b for b in backup.list_backups(made.parent) if b.reason == "before-restore"]
    assert len(kept) == 1


def test_a_restore_waits_for_no_answer(app, monkeypatch):
    window = app.window
    window.commands.back_up()
    store = app.session.store
    store.create_chat("keep me")
    monkeypatch.setattr(window.files, "busy", lambda: True)
    run_dialog(window, "restore_backup").restore_button.click()
    assert status(window) == "not restored: an answer is running or waiting; stop it first"
    assert "keep me" in [c.title for c in store.list_chats()]


def test_the_scheduled_backup_is_made_when_due_and_not_again(app, qtbot):
    files = app.window.files
    database = app.window.commands.database()
    assert backup.list_backups(backup.backup_dir(database)) == []
    files.back_up_if_due()
    qtbot.waitUntil(lambda: files._backup is None, timeout=10_000)
    (made,) = backup.list_backups(backup.backup_dir(database))
    assert made.reason == "daily"
    files.back_up_if_due()  # the next check within the day: nothing to do
    assert files._backup is None and len(backup.list_backups(backup.backup_dir(database))) == 1
