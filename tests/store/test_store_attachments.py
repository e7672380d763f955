"""Files in a message: stored with it, once by content, counted in the chat's size, refused whole past
the caps, gone with their message, and a damaged blob reads as empty instead of failing the chat."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from specchat.store import (
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    MAX_MESSAGE_ATTACHMENT_BYTES,
    NewAttachment,
    open_store,
)


@pytest.fixture
def store(tmp_path: Path):
    with open_store(tmp_path / "specchat.sqlite3") as s:
        yield s


def blob_count(store) -> int:
    return store.connection.execute("SELECT count(*) FROM blobs").fetchone()[0]


def test_a_message_keeps_its_files_in_order_with_their_text(store):
    chat = store.create_chat("c")
    msg = store.add_message(chat.id, "user", "rename f to g", attachments=[
        NewAttachment("src/main.py", "text/x-python", b"def f():\n    return 1\n"),
        NewAttachment("notes.md", "text/markdown", "# Überblick\n".encode()),
    ])
    files = store.attachments(msg.id)
    assert [(a.name, a.mime, a.position) for a in files] == [("main.py", "text/x-python", 0),
                                                             ("notes.md", "text/markdown", 1)]
    assert store.attachment_text(files[0]) == "def f():\n    return 1\n"
    assert store.attachment_text(files[1]) == "# Überblick\n"
    assert files[1].size == len("# Überblick\n".encode())
    assert files[0].sha256 == hashlib.sha256(b"def f():\n    return 1\n").hexdigest()
    later = store.attach(msg.id, "data.csv", "text/csv", b"a,b\n1,2\n")
    assert later.position == 2 and [a.name for a in store.attachments(msg.id)][-1] == "data.csv"
    assert store.chat_attachments(chat.id) == {msg.id: store.attachments(msg.id)}


def test_the_same_text_is_stored_once_and_goes_with_its_last_message(store):
    chat = store.create_chat("c")
    data = b"x = 1\n" * 1000
    one = store.add_message(chat.id, "user", "a", attachments=[NewAttachment("a.py", "text/x-python", data)])
    two = store.add_message(chat.id, "user", "b", attachments=[NewAttachment("copy.py", "text/x-python", data)])
    assert blob_count(store) == 1
    store.delete_messages_after(two.id, inclusive=True)
    assert blob_count(store) == 1 and store.attachment_data(store.attachments(one.id)[0]) == data
    store.delete_chat(chat.id)  # the cascade takes the last link, and the blob with it
    assert blob_count(store) == 0


def test_files_count_in_the_chats_size(store):
    chat = store.create_chat("c")
    store.add_message(chat.id, "user", "hi")
    before = store.chat_size(chat.id)
    assert before == 2
    store.add_message(chat.id, "user", "é", attachments=[NewAttachment("a.txt", "text/plain", b"z" * 5000)])
    assert store.chat_size(chat.id) == before + 2 + 5000
    assert store.chat_size(store.create_chat("empty").id) == 0


def test_past_the_caps_a_file_is_refused_whole_and_nothing_is_added(store):
    chat = store.create_chat("c")
    with pytest.raises(ValueError, match="1 bytes over the 1.0 MiB a file may hold"):
        store.add_message(chat.id, "user", "big", attachments=[
            NewAttachment("big.txt", "text/plain", b"a" * (MAX_ATTACHMENT_BYTES + 1))])
    assert store.messages(chat.id) == [] and blob_count(store) == 0
    many = [NewAttachment(f"f{i}.txt", "text/plain", bytes([65 + i % 26]) * MAX_ATTACHMENT_BYTES) for i in range(5)]
    assert sum(len(f.data) for f in many) > MAX_MESSAGE_ATTACHMENT_BYTES
    with pytest.raises(ValueError, match="a message may hold at most"):
        store.add_message(chat.id, "user", "many", attachments=many)
    msg = store.add_message(chat.id, "user", "ok", attachments=many[:4])
    with pytest.raises(ValueError, match="past 4 MiB"):
        store.attach(msg.id, "one more.txt", "text/plain", b"x")
    assert len(store.attachments(msg.id)) == 4
    small = store.add_message(chat.id, "user", "count")
    for i in range(MAX_ATTACHMENTS):
        store.attach(small.id, f"{i}.txt", "text/plain", str(i).encode())
    with pytest.raises(ValueError, match=f"at most {MAX_ATTACHMENTS} files"):
        store.attach(small.id, "33.txt", "text/plain", b"33")


@pytest.mark.parametrize("name, shown", [("../../etc/passwd", "passwd"), ("C:\\Users\\me\\a.py", "a.py"),
                                         ("tab\tname.md", "tabname.md"), ("lone\ud800.txt", "lone.txt")])
def test_a_name_is_its_last_part_without_control_characters(store, name, shown):
    msg = store.add_message(store.create_chat("c").id, "user", "x")
    assert store.attach(msg.id, name, "text/plain", b"t").name == shown


@pytest.mark.parametrize("name", ["", "  ", "dir/", ".."])
def test_a_file_needs_a_name(store, name):
    msg = store.add_message(store.create_chat("c").id, "user", "x")
    with pytest.raises(ValueError, match="needs a file name"):
        store.attach(msg.id, name, "text/plain", b"t")


def test_attaching_to_no_message_is_a_key_error(store):
    with pytest.raises(KeyError):
        store.attach(12345, "a.txt", "text/plain", b"t")


def test_a_damaged_blob_or_row_reads_as_empty_said_once(store, caplog):
    chat = store.create_chat("c")
    msg = store.add_message(chat.id, "user", "x", attachments=[NewAttachment("a.py", "text/x-python", b"print(1)\n")])
    att = store.attachments(msg.id)[0]
    store.connection.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (b"print(2)\n", att.sha256))
    with caplog.at_level(logging.WARNING):
        assert store.attachment_text(att) == ""
        assert store.attachment_text(att) == ""
    assert sum("no longer matches its SHA-256" in r.getMessage() for r in caplog.records) == 1
    store.connection.execute("PRAGMA foreign_keys = OFF")  # another tool wrote the row
    store.connection.execute("UPDATE attachments SET name = X'00ff', size = 'big', sha256 = 'nope' WHERE id = ?", (att.id,))
    damaged = store.attachments(msg.id)[0]
    assert (damaged.name, damaged.size, store.attachment_text(damaged)) == ("file", 0, "")


def test_editing_a_message_keeps_its_files(store):
    chat = store.create_chat("c")
    msg = store.add_message(chat.id, "user", "old", attachments=[NewAttachment("a.py", "text/x-python", b"a")])
    store.add_message(chat.id, "assistant", "answer")
    store.edit_message(msg.id, "new")
    assert [a.name for a in store.attachments(msg.id)] == ["a.py"]
    assert list(store.chat_attachments(chat.id)) == [msg.id]
