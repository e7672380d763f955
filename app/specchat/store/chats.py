"""Chats, their settings, messages and app settings, on one SQLite connection.

The GUI thread owns the :class:`Store` (see ``db.py`` for the one-connection-per-thread
rule).  A streaming answer is written through an :class:`AnswerWriter`, which buffers
tokens in memory and commits them at most every ``flush_interval`` seconds: a commit
per token would cost more than the tokens on a fast GPU, and a kill then loses at most
the last interval of text.  An answer that was still "streaming" when the process died
is turned into "stopped" at the next open, keeping its text.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import task_stats
from .backup import migrate_with_backup
from .db import FTS_TABLE, StoreWriteError, connect, default_path, ensure_search_index, transaction
from .records import (
    FINAL_STATES,
    MAX_ATTACHMENTS,
    MAX_MESSAGE_ATTACHMENT_BYTES,
    ROLES,
    Attachment,
    Chat,
    ChatSettings,
    Message,
    MessageStats,
    MessageVersion,
    NewAttachment,
    check_attachments,
    format_spans,
    is_draft_text,
    is_sha256,
    origin_chars,
)

log = logging.getLogger(__name__)

_WORD_CHAR = re.compile(r"[^\W_]")  # what FTS5's unicode61 tokenizer keeps as part of a token
# What a search word can never hold: control characters (NUL ends an FTS5 string early: "unterminated
# string") and lone surrogates (not UTF-8, so SQLite cannot take them). They separate words instead.
_NOT_SEARCHABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def search_words(text: str) -> list[str]:
    """The words of a search query, as :meth:`Store.list_chats` matches them."""
    return _NOT_SEARCHABLE.sub(" ", text).split()


class Store:
    """The app's persistent state.  Build it with :func:`specchat.store.open_store`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        fts: bool,
        flush_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.connection = conn
        self.uses_fts = fts  # False: search falls back to substring matching
        self._told: set[tuple[str, int | str]] = set()  # the damaged rows already said (once per row and session)
        self.flush_interval = flush_interval  # default for AnswerWriter
        self.clock = clock  # monotonic, for flush timing
        self.now = now  # wall clock, for the timestamps users see

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- chats --------------------------------------------------------------------------

    def create_chat(self, title: str = "New chat", settings: ChatSettings | None = None) -> Chat:
        settings = settings or ChatSettings()
        settings.validate()
        now = self.now()
        with transaction(self.connection) as conn:
            cur = conn.execute(
                "INSERT INTO chats (title, created_at, updated_at, settings) VALUES (?, ?, ?, ?)",
                (_clean_title(title), now, now, settings.to_json()),
            )
        return self.get_chat(_inserted_id(cur))

    def get_chat(self, chat_id: int) -> Chat:
        row = self.connection.execute("SELECT * FROM chats WHERE id = ?", (chat_id,)).fetchone()
        if row is None:
            raise KeyError(f"no chat {chat_id}")
        return self._chat(row)

    def rename_chat(self, chat_id: int, title: str) -> Chat:
        """Renaming is not activity: the chat keeps its place in the list."""
        self._update_chat(chat_id, "title", _clean_title(title))
        return self.get_chat(chat_id)

    def update_settings(self, chat_id: int, settings: ChatSettings) -> Chat:
        settings.validate()
        self._update_chat(chat_id, "settings", settings.to_json())
        return self.get_chat(chat_id)

    def _update_chat(self, chat_id: int, column: str, value: object) -> None:
        with transaction(self.connection) as conn:
            cur = conn.execute(f"UPDATE chats SET {column} = ? WHERE id = ?", (value, chat_id))
        if cur.rowcount == 0:
            raise KeyError(f"no chat {chat_id}")

    def delete_chat(self, chat_id: int) -> bool:
        """Delete a chat and (by ON DELETE CASCADE) its messages; False if it did not exist."""
        with transaction(self.connection) as conn:
            cur = conn.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
        return cur.rowcount > 0

    # -- the trash: what the window's Delete does, so that it can be undone ---------------------

    def trash_chat(self, chat_id: int) -> Chat:
        """Move a chat to the trash: gone from :meth:`list_chats` and search, kept with its messages
        and settings until :meth:`purge_trash`; :meth:`restore_chat` brings it back as it was.

        One committed write: a kill -9 after it leaves the chat in the trash, whole.  Trashing a
        trashed chat keeps the first time.
        """
        with transaction(self.connection) as conn:
            cur = conn.execute("UPDATE chats SET trashed_at = coalesce(trashed_at, ?) WHERE id = ?",
                               (self.now(), chat_id))
        if cur.rowcount == 0:
            raise KeyError(f"no chat {chat_id}")
        return self.get_chat(chat_id)

    def restore_chat(self, chat_id: int) -> Chat:
        """Take a chat out of the trash; it keeps its last activity, so it returns to its place."""
        self._update_chat(chat_id, "trashed_at", None)
        return self.get_chat(chat_id)

    def trashed_chats(self) -> list[Chat]:
        """The chats in the trash, the most recently trashed first."""
        rows = self.connection.execute(
            "SELECT * FROM chats WHERE trashed_at IS NOT NULL ORDER BY trashed_at DESC, id DESC").fetchall()
        return [self._chat(row) for row in rows]

    def purge_trash(self) -> int:
        """Delete the trashed chats for good (their messages by cascade; task runs stay); how many.

        The app calls this when it starts, holding the profile's instance lock: no other window
        has this database open then, so no undo is offered anywhere.
        """
        with transaction(self.connection) as conn:
            cur = conn.execute("DELETE FROM chats WHERE trashed_at IS NOT NULL")
        if cur.rowcount:
            log.info("purged %d chat(s) deleted in the last session", cur.rowcount)
        return cur.rowcount

    def list_chats(self, search: str = "") -> list[Chat]:
        """Chats not in the trash, most recent activity first; with ``search``, only matching ones.

        A chat matches when every word of the query is in its title, or when one of its
        shown messages (not those of a version paged away) holds every word
        (case-insensitive).  With FTS5 a word matches the start
        of a word in a message ("sort" finds "sorting", not "quicksort"); without FTS5,
        or for a query word made only of punctuation, any substring matches.
        """
        order = " ORDER BY c.updated_at DESC, c.id DESC"
        terms = search_words(search)
        if not terms:
            rows = self.connection.execute("SELECT c.* FROM chats c WHERE c.trashed_at IS NULL" + order).fetchall()
            return [self._chat(row) for row in rows]
        folded = [t.casefold() for t in terms]
        title_match = " AND ".join(["instr(py_casefold(c.title), ?) > 0"] * len(folded))
        params: list[object] = list(folded)
        if self.uses_fts and all(_WORD_CHAR.search(t) for t in terms):
            message_match = (
                f"SELECT m.chat_id FROM {FTS_TABLE} JOIN messages m ON m.id = {FTS_TABLE}.rowid "
                f"WHERE {FTS_TABLE} MATCH ? AND m.version_id IS NULL"
            )
            params.append(" ".join('"' + t.replace('"', '""') + '"*' for t in terms))
        else:
            message_match = "SELECT m.chat_id FROM messages m WHERE m.version_id IS NULL AND " + " AND ".join(
                ["instr(py_casefold(m.content), ?) > 0"] * len(folded)
            )
            params.extend(folded)
        sql = (f"SELECT c.* FROM chats c WHERE c.trashed_at IS NULL AND (({title_match}) OR c.id IN ({message_match}))"
               + order)
        return [self._chat(row) for row in self.connection.execute(sql, params).fetchall()]

    # -- messages -----------------------------------------------------------------------

    def add_message(self, chat_id: int, role: str, content: str, *, reasoning: str = "",
                    attachments: Sequence[NewAttachment] = ()) -> Message:
        """Append a complete message (an assistant message added this way is "done"), with its files
        (:meth:`attach`'s rules) in the same transaction: a refused file adds nothing."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        files = check_attachments(attachments)
        return self._insert_message(chat_id, role, content, reasoning, "done" if role == "assistant" else None,
                                    files)

    def start_answer(self, chat_id: int) -> Message:
        """Create the empty assistant message that a streaming answer fills.

        Write into it with :meth:`answer_writer`.
        """
        return self._insert_message(chat_id, "assistant", "", "", "streaming")

    def answer_writer(
        self, message: Message | int, *, flush_interval: float | None = None
    ) -> AnswerWriter:
        return AnswerWriter(self, message.id if isinstance(message, Message) else message,
                            flush_interval=flush_interval)

    def _insert_message(self, chat_id: int, role: str, content: str, reasoning: str, state: str | None,
                        files: Sequence[NewAttachment] = ()) -> Message:
        now = self.now()
        with transaction(self.connection) as conn:
            try:
                cur = conn.execute(
                    "INSERT INTO messages (chat_id, role, content, reasoning, state, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (chat_id, role, content, reasoning, state, now),
                )
            except sqlite3.IntegrityError as exc:  # the foreign key: no such chat
                raise KeyError(f"no chat {chat_id}") from exc
            message_id = _inserted_id(cur)
            for position, file in enumerate(files):
                self._link(conn, message_id, position, file, now)
            conn.execute("UPDATE chats SET updated_at = ? WHERE id = ?", (now, chat_id))
        return self.get_message(message_id)

    # -- attachments: files in a message, their text stored once by its SHA-256 -----------------------
    #
    # The attachments API (export, import and backups use it too): attach / attachments /
    # chat_attachments / attachment_data / attachment_text, and add_message(attachments=...).

    def attach(self, message_id: int, name: str, mime: str, data: bytes) -> Attachment:
        """Add a file to a message, after its other files; the text ``data`` (UTF-8 bytes) is stored once
        however many messages hold it.  ValueError (one line) for a file or a message past the caps
        (records.MAX_ATTACHMENT_BYTES, MAX_MESSAGE_ATTACHMENT_BYTES, MAX_ATTACHMENTS) or with no name;
        KeyError for no such message."""
        file = check_attachments([NewAttachment(name, mime, data)])[0]
        with transaction(self.connection) as conn:
            if conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone() is None:
                raise KeyError(f"no message {message_id}")
            count, total, top = conn.execute(
                "SELECT count(*), coalesce(sum(size), 0), max(position) FROM attachments WHERE message_id = ?",
                (message_id,)).fetchone()
            if count + 1 > MAX_ATTACHMENTS:
                raise ValueError(f"a message may hold at most {MAX_ATTACHMENTS} files")
            if total + len(file.data) > MAX_MESSAGE_ATTACHMENT_BYTES:
                raise ValueError(f"{file.name} would bring the message's files past "
                                 f"{MAX_MESSAGE_ATTACHMENT_BYTES >> 20} MiB")
            attachment_id = self._link(conn, message_id, 0 if top is None else top + 1, file, self.now())
        return self._attachment(self.connection.execute("SELECT * FROM attachments WHERE id = ?",
                                                        (attachment_id,)).fetchone())

    @staticmethod
    def _link(conn: sqlite3.Connection, message_id: int, position: int, file: NewAttachment, now: float) -> int:
        digest = hashlib.sha256(file.data).hexdigest()
        conn.execute("INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)",
                     (digest, len(file.data), file.data))
        cur = conn.execute(
            "INSERT INTO attachments (message_id, position, name, mime, sha256, size, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)", (message_id, position, file.name, file.mime, digest, len(file.data), now))
        return _inserted_id(cur)

    def attachments(self, message_id: int) -> list[Attachment]:
        """A message's files, in the order they were attached (no text: :meth:`attachment_data`)."""
        rows = self.connection.execute("SELECT * FROM attachments WHERE message_id = ? ORDER BY position",
                                       (message_id,)).fetchall()
        return [self._attachment(r) for r in rows]

    def chat_attachments(self, chat_id: int) -> dict[int, list[Attachment]]:
        """The files of a chat's shown messages, by message id (messages without files are not keys)."""
        rows = self.connection.execute(
            "SELECT a.* FROM attachments a JOIN messages m ON m.id = a.message_id"
            " WHERE m.chat_id = ? AND m.version_id IS NULL ORDER BY a.message_id, a.position", (chat_id,)).fetchall()
        out: dict[int, list[Attachment]] = {}
        for row in rows:
            attachment = self._attachment(row)
            out.setdefault(attachment.message_id, []).append(attachment)
        return out

    def attachment_data(self, attachment: Attachment | str) -> bytes:
        """The bytes of a file's text (an :class:`Attachment` or its blob's SHA-256).  A blob that is gone
        or whose bytes no longer hash to its key is damaged: read as empty, said once."""
        digest = attachment if isinstance(attachment, str) else attachment.sha256
        row = self.connection.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
        data = None if row is None else row[0]
        if isinstance(data, str):  # SQLite kept text where a BLOB belongs (another tool wrote it)
            data = data.encode("utf-8", "surrogatepass")
        if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != digest:
            why = ("is missing" if row is None else "is not bytes" if not isinstance(data, bytes)
                   else "no longer matches its SHA-256")
            self._damaged("blobs", digest, f"attachment {digest[:12]}", f"the file's text {why}; read as empty")
            return b""
        return data

    def attachment_text(self, attachment: Attachment | str) -> str:
        """A file's text as a model reads it (bytes that are not UTF-8 read as U+FFFD)."""
        return self.attachment_data(attachment).decode("utf-8", errors="replace")

    def chat_size(self, chat_id: int) -> int:
        """The bytes a chat holds: every message's text and reasoning (paged-away versions too) and every
        file of its messages (counted per message, though a file's text is stored once)."""
        row = self.connection.execute(
            "SELECT coalesce(sum(length(CAST(content AS BLOB)) + length(CAST(reasoning AS BLOB))), 0)"
            " + (SELECT coalesce(sum(length(CAST(content AS BLOB))), 0) FROM message_versions WHERE chat_id = ?)"
            " + (SELECT coalesce(sum(a.size), 0) FROM attachments a JOIN messages m ON m.id = a.message_id"
            "    WHERE m.chat_id = ?)"
            " FROM messages WHERE chat_id = ?", (chat_id, chat_id, chat_id)).fetchone()
        return int(row[0] or 0)

    def _attachment(self, row: Mapping[str, Any]) -> Attachment:
        attachment_id = row["id"]
        cols = _Columns(row, lambda line: self._damaged("attachments", attachment_id, f"attachment {attachment_id}",
                                                        line))
        digest = cols.text("sha256")
        if not is_sha256(digest):
            cols.tell(f"sha256 is not a SHA-256 ({_shown(digest)}); its text reads as empty")
            digest = "0" * 64
        return Attachment(id=attachment_id, message_id=row["message_id"], position=cols.whole("position", 0),
                          name=cols.text("name", "file") or "file", mime=cols.text("mime", "text/plain"),
                          sha256=digest, size=max(0, cols.whole("size", 0)), created_at=cols.time("created_at"))

    def get_message(self, message_id: int) -> Message:
        row = self.connection.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            raise KeyError(f"no message {message_id}")
        return self._message(row)

    def messages(self, chat_id: int) -> list[Message]:
        """A chat's shown messages (each in its shown version), in order: what the next turn sends."""
        rows = self.connection.execute("SELECT * FROM messages WHERE chat_id = ? AND version_id IS NULL ORDER BY id",
                                       (chat_id,))
        return [self._message(row) for row in rows.fetchall()]

    def edit_message(self, message_id: int, content: str) -> Message:
        """Edit-and-resend: the message's old text and what followed it become a version (see
        :meth:`new_version`), its text is ``content`` and nothing follows it; the caller then asks
        for a new answer."""
        return self.new_version(message_id, content)

    # -- versions -------------------------------------------------------------------------
    #
    # Regenerate and edit replace a message's (text, tail) and page back to it; nothing is lost.
    # The tail stays in ``messages`` with its ids, marked by ``version_id`` (NULL: shown), so
    # ``messages()`` (what the window shows and the next turn sends) is the shown version of
    # everything.  Task runs stay as they were: an archived answer keeps its one task_runs row
    # under its own message id (never a copy), so it still counts once in the task table and
    # in the plain reference of its pair (it was a real measurement of the machine), and it
    # does not count twice when paged back to.

    def new_version(self, message_id: int, content: str | None = None) -> Message:
        """Keep the message's (text, tail) as a version; it becomes ``content`` (None: the same text,
        i.e. regenerate) followed by nothing, as its newest version.  One transaction.

        The same text with nothing after it has nothing to keep: the message is left as it is.
        """
        with transaction(self.connection) as conn:
            row = self._shown(conn, message_id)
            text = row["content"] if content is None else content
            if text != row["content"] or self._has_tail(conn, row):
                top = conn.execute("SELECT max(number) FROM message_versions WHERE message_id = ?",
                                   (message_id,)).fetchone()[0]
                self._archive(conn, row)
                spans = row["content_spans"] if text == row["content"] else ""  # old spans fit only the old text
                conn.execute("UPDATE messages SET content = ?, content_spans = ?, version = ? WHERE id = ?",
                             (text, spans, max(top or 0, row["version"]) + 1, message_id))
                conn.execute("UPDATE chats SET updated_at = ? WHERE id = ?", (self.now(), row["chat_id"]))
        return self.get_message(message_id)

    def show_version(self, message_id: int, number: int) -> Message:
        """Page to version ``number`` of a shown message: the shown (text, tail) is kept as a version in
        its place and version ``number`` is shown instead, in one transaction (so the conversation the
        next turn sends is always the one on screen).  KeyError if there is no such version."""
        with transaction(self.connection) as conn:
            row = self._shown(conn, message_id)
            if number != row["version"]:
                version = conn.execute("SELECT * FROM message_versions WHERE message_id = ? AND number = ?",
                                       (message_id, number)).fetchone()
                if version is None:
                    raise KeyError(f"message {message_id} has no version {number}")
                self._archive(conn, row)
                conn.execute("UPDATE messages SET version_id = NULL WHERE version_id = ?", (version["id"],))
                conn.execute("UPDATE messages SET content = ?, content_spans = ?, version = ? WHERE id = ?",
                             (version["content"], version["content_spans"], number, message_id))
                conn.execute("DELETE FROM message_versions WHERE id = ?", (version["id"],))
        return self.get_message(message_id)

    def versions(self, message_id: int) -> list[MessageVersion]:
        """The message's versions that are not shown, by number."""
        rows = self.connection.execute("SELECT * FROM message_versions WHERE message_id = ? ORDER BY number",
                                       (message_id,)).fetchall()
        return [self._version(r) for r in rows]

    def version_counts(self, chat_id: int) -> dict[int, int]:
        """How many versions each shown message of the chat has, for those with more than one."""
        rows = self.connection.execute(
            "SELECT v.message_id, count(*) + 1 FROM message_versions v JOIN messages m ON m.id = v.message_id"
            " WHERE v.chat_id = ? AND m.version_id IS NULL GROUP BY v.message_id", (chat_id,)).fetchall()
        return {r[0]: r[1] for r in rows}

    @staticmethod
    def _shown(conn: sqlite3.Connection, message_id: int) -> sqlite3.Row:
        row = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            raise KeyError(f"no message {message_id}")
        if row["version_id"] is not None:
            raise KeyError(f"message {message_id} is in a version that is not shown")
        return row

    @staticmethod
    def _has_tail(conn: sqlite3.Connection, row: sqlite3.Row) -> bool:
        return conn.execute("SELECT 1 FROM messages WHERE chat_id = ? AND version_id IS NULL AND id > ? LIMIT 1",
                            (row["chat_id"], row["id"])).fetchone() is not None

    def _archive(self, conn: sqlite3.Connection, row: sqlite3.Row) -> None:
        """The shown message ``row``'s text and tail into a new version row, under its shown number.

        The shown chat is in id order (a message is added after everything shown, and a tail comes
        back behind the message it followed), so the tail is every shown message after it."""
        cur = conn.execute(
            "INSERT INTO message_versions (chat_id, message_id, number, content, content_spans, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (row["chat_id"], row["id"], row["version"], row["content"], row["content_spans"], self.now()))
        conn.execute("UPDATE messages SET version_id = ? WHERE chat_id = ? AND version_id IS NULL AND id > ?",
                     (_inserted_id(cur), row["chat_id"], row["id"]))

    def delete_messages_after(self, message_id: int, *, inclusive: bool = False) -> int:
        """Delete every later shown message of the chat (and this one if ``inclusive``), with
        their versions.  The app's regenerate keeps the old answer instead (:meth:`new_version`).

        Returns how many shown messages were deleted.
        """
        with transaction(self.connection) as conn:
            row = conn.execute("SELECT chat_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                raise KeyError(f"no message {message_id}")
            op = ">=" if inclusive else ">"
            cur = conn.execute(f"DELETE FROM messages WHERE chat_id = ? AND version_id IS NULL AND id {op} ?",
                               (row["chat_id"], message_id))
        return cur.rowcount

    # -- reading rows: every column checked for its declared type; a damaged row is repaired, said once --

    def _damaged(self, table: str, row_id: int | str, what: str, line: str) -> None:
        """One line per damaged row and session (the list is read again at every refresh)."""
        if (table, row_id) not in self._told:
            self._told.add((table, row_id))
            log.warning("%s: %s", what, line)

    def _chat(self, row: Mapping[str, Any]) -> Chat:
        chat_id = row["id"]
        cols = _Columns(row, lambda line: self._damaged("chats", chat_id, f"chat {chat_id}", line))
        title = cols.text("title", "Untitled") or "Untitled"
        return Chat(
            id=chat_id,
            title=title,
            created_at=cols.time("created_at"),
            updated_at=cols.time("updated_at"),
            settings=ChatSettings.from_json(
                cols.raw("settings"), lambda line: self._damaged("chats", chat_id, f"chat {chat_id} ({title})", line)),
            trashed_at=cols.time("trashed_at", optional=True),
        )

    def _message(self, row: Mapping[str, Any]) -> Message:
        message_id = row["id"]

        def tell(line: str) -> None:
            self._damaged("messages", message_id, f"message {message_id} of chat {row['chat_id']}", line)

        cols = _Columns(row, tell)
        return Message(
            id=message_id,
            chat_id=row["chat_id"],
            role=row["role"],  # CHECK constraint: one of ROLES
            content=cols.text("content"),
            reasoning=cols.text("reasoning"),
            created_at=cols.time("created_at"),
            state=row["state"],  # CHECK constraint: NULL or one of ANSWER_STATES
            stats=MessageStats.from_json(cols.raw("stats"), tell),
            origins=cols.text("origins"),
            content_spans=cols.text("content_spans"),
            version=cols.whole("version", 1),
        )

    def _version(self, row: Mapping[str, Any]) -> MessageVersion:
        cols = _Columns(row, lambda line: self._damaged("message_versions", row["id"], f"version {row['id']}", line))
        return MessageVersion(id=row["id"], message_id=row["message_id"], number=cols.whole("number", 1),
                              content=cols.text("content"), created_at=cols.time("created_at"))

    def recover_interrupted(self) -> list[int]:
        """Answers left "streaming" by a killed process become "stopped", text kept.

        Called by open_store.  Returns the ids it changed.
        """
        with transaction(self.connection) as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE state = 'streaming'").fetchall()]
            conn.execute("UPDATE messages SET state = 'stopped' WHERE state = 'streaming'")
        if ids:
            log.info("recovered %d interrupted answer(s): %s", len(ids), ids)
        return ids


class AnswerWriter:
    """Fills one streaming assistant message, committing at most every ``flush_interval`` s.

    ``append`` buffers; it commits when the interval has passed since the last commit.
    Besides the text it records the token origins and, for the tinted view after a
    restart, which characters of the visible text came from accepted draft tokens
    (``content_spans``, see :meth:`Message.content_segments`).
    When tokens come slowly, call :meth:`poll` from a UI timer as well, so buffered text
    never waits for the next token to be saved.  :meth:`finish` commits the rest with the
    final state and stats in one transaction.

    Writes are guarded by ``state = 'streaming'``: once the message is finished,
    recovered or deleted (regenerate while streaming), a stale writer changes nothing.
    """

    def __init__(self, store: Store, message_id: int, *, flush_interval: float | None = None) -> None:
        self.store = store
        self.message_id = message_id
        self.flush_interval = store.flush_interval if flush_interval is None else flush_interval
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._origins: list[str] = []
        self._spans: list[tuple[int, bool]] = []  # (characters, from draft), adjacent runs merged
        self._last_flush = store.clock()
        self.finished = False
        self.write_error: str | None = None  # the last commit the database refused (None: all saved so far)

    @property
    def pending(self) -> bool:
        """Whether some appended text is not yet in the database."""
        return bool(self._text or self._reasoning or self._origins)  # spans come with text

    def append(self, text: str = "", reasoning: str = "", origins: str | Iterable[object] = "") -> None:
        """Add visible text, reasoning text and the origins of the tokens they came from.

        The engine emits one event per origin, so ``text`` counts as accepted draft text
        when every one of ``origins`` is draft.  Reasoning text is never tinted.
        """
        if self.finished:
            raise RuntimeError("append after finish")
        chars = origin_chars(origins)
        if text:
            self._text.append(text)
            draft = is_draft_text(chars)
            if self._spans and self._spans[-1][1] == draft:
                self._spans[-1] = (self._spans[-1][0] + len(text), draft)
            else:
                self._spans.append((len(text), draft))
        if reasoning:
            self._reasoning.append(reasoning)
        if chars:
            self._origins.append(chars)
        self.poll()

    def poll(self) -> bool:
        """Commit the buffer if the interval has passed; True if it committed.

        A failed commit (database busy, disk full) keeps the buffer for the next try, is
        logged once and noted in :attr:`write_error` (the answer service stops the answer on it).
        """
        if self.finished or not self.pending or self.store.clock() - self._last_flush < self.flush_interval:
            return False
        try:
            self.flush()
        except StoreWriteError as exc:
            if self.write_error is None:
                log.warning("could not save the streaming answer yet: %s", exc)
            self.write_error = str(exc)
            return False
        self.write_error = None
        return True

    def flush(self) -> None:
        """Commit the buffer now."""
        if self.pending:
            with transaction(self.store.connection) as conn:
                conn.execute(
                    "UPDATE messages SET content = content || ?, reasoning = reasoning || ?,"
                    " origins = origins || ?, content_spans = content_spans || ?"
                    " WHERE id = ? AND state = 'streaming'",
                    (*self._take(), self.message_id),
                )
            self._clear()
        self._last_flush = self.store.clock()

    def finish(self, state: str = "done", stats: MessageStats | None = None) -> Message | None:
        """Commit the rest, set the final state and stats; record the answer's task run.

        Returns the final message, or None if it no longer streams (deleted or recovered).
        """
        if state not in FINAL_STATES:
            raise ValueError(f"final state must be one of {', '.join(FINAL_STATES)}")
        if self.finished:
            raise RuntimeError("finish called twice")
        store = self.store
        now = store.now()
        with transaction(store.connection) as conn:
            cur = conn.execute(
                "UPDATE messages SET content = content || ?, reasoning = reasoning || ?,"
                " origins = origins || ?, content_spans = content_spans || ?, state = ?, stats = ?"
                " WHERE id = ? AND state = 'streaming'",
                (*self._take(), state, stats.to_json() if stats else None, self.message_id),
            )
            changed = cur.rowcount > 0
            if changed:
                chat_id = conn.execute("SELECT chat_id FROM messages WHERE id = ?", (self.message_id,)).fetchone()[0]
                # an answer stopped because its chat was deleted is no activity: undone, the chat keeps its place
                conn.execute("UPDATE chats SET updated_at = ? WHERE id = ? AND trashed_at IS NULL", (now, chat_id))
                if stats is not None and state in ("done", "stopped"):
                    settings = ChatSettings.from_json(
                        conn.execute("SELECT settings FROM chats WHERE id = ?", (chat_id,)).fetchone()[0]
                    )
                    task_stats.record_run(conn, self.message_id, settings.task, stats,
                                          target=settings.target, draft=settings.draft, created_at=now)
        self._clear()
        self.finished = True
        return store.get_message(self.message_id) if changed else None

    def _take(self) -> tuple[str, str, str, str]:
        return "".join(self._text), "".join(self._reasoning), "".join(self._origins), format_spans(self._spans)

    def _clear(self) -> None:
        self._text.clear()
        self._reasoning.clear()
        self._origins.clear()
        self._spans.clear()


def _inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just added (sqlite3 says None only when nothing was inserted)."""
    if cur.lastrowid is None:
        raise sqlite3.DatabaseError("the INSERT added no row")
    return cur.lastrowid


def _clean_title(title: str) -> str:
    title = " ".join(str(title).split())
    if not title:
        raise ValueError("a chat title cannot be empty")
    return title


class _Columns:
    """A row's columns read as the schema declares them.  SQLite keeps whatever a writer gave a column
    (text in a REAL, a BLOB in a TEXT); a value of another type, or a time that is not finite, is
    replaced by the column's default and said in one line (``tell``)."""

    def __init__(self, row: Mapping[str, Any], tell: Callable[[str], None]) -> None:
        self.row = row
        self.tell = tell

    def raw(self, name: str) -> Any:
        return self.row[name]

    def text(self, name: str, default: str = "") -> str:
        value = self.row[name]
        if isinstance(value, str):
            return value
        self.tell(f"{name} is not text ({type(value).__name__}); read as {default!r}")
        return default

    def whole(self, name: str, default: int) -> int:
        value = self.row[name]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        self.tell(f"{name} is not a whole number ({type(value).__name__}); read as {default}")
        return default

    def time(self, name: str, *, optional: bool = False) -> float:
        value = self.row[name]
        if value is None and optional:
            return None  # type: ignore[return-value]
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        self.tell(f"{name} is not a time ({_shown(value)}); read as the epoch")
        return 0.0


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def open_store(
    path: Path | None = None,
    *,
    fts: bool | None = None,
    flush_interval: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
    recover: bool = True,
    backup_keep: int = 7,
) -> Store:
    """Open (or create) the chat database and return a ready :class:`Store`.

    ``path`` defaults to :func:`default_path`.  ``fts`` forces the full-text index on or
    off (None: use it when available).  ``recover`` marks answers left "streaming" by a
    killed process as "stopped", keeping their text; a tool that opens the file while the
    app is running (and may be streaming) must pass ``recover=False``.  A file of an older schema is
    backed up before it is migrated (``backups/`` beside it, ``backup_keep`` kept), and put back if
    the migration fails (:mod:`specchat.store.backup`).
    """
    path = default_path() if path is None else Path(path)
    conn = connect(path, lambda c: migrate_with_backup(c, path, keep=backup_keep))
    try:
        use_fts = ensure_search_index(conn, fts)
    except BaseException:
        conn.close()
        raise
    store = Store(conn, fts=use_fts, flush_interval=flush_interval, clock=clock, now=now)
    if recover:
        store.recover_interrupted()
    return store
