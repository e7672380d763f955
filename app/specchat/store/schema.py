"""The versioned schema: what each version adds, as forward migrations.

``MIGRATIONS[n]`` turns version ``n - 1`` into version ``n`` (``db.migrate`` runs a
version's steps in one transaction).  A step is an SQL statement or a function of the
connection, for what SQL cannot say (rewriting JSON documents).  The steps are history:
they spell out the shapes of their time instead of using today's classes, so that a
later change to a record cannot change what an old migration does.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from collections.abc import Callable, Sequence

from specchat import bounded_json

log = logging.getLogger(__name__)

Step = str | Callable[[sqlite3.Connection], None]
Migration = Sequence[Step]

# Version 1: chats, messages (with streaming state, stats and token origins), app
# settings (unread since issue 33: the settings live in config.toml; the empty table stays, as
# dropping it would take a schema version that every older SpecChat refuses to open), per-answer
# task runs.  AUTOINCREMENT on purpose: an id is never reused, so a
# late write from a stale AnswerWriter (answer deleted by "regenerate" while it was
# still streaming) can never land in the message that replaced it.
_V1 = [
    """CREATE TABLE chats (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,   -- last activity: drives the newest-first order
        settings TEXT NOT NULL      -- JSON of ChatSettings: new fields need no migration
    )""",
    "CREATE INDEX chats_by_activity ON chats (updated_at DESC, id DESC)",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
        content TEXT NOT NULL DEFAULT '',
        reasoning TEXT NOT NULL DEFAULT '',
        origins TEXT NOT NULL DEFAULT '',   -- one 'd' (draft) or 't' (target) per token
        state TEXT CHECK (state IS NULL OR state IN ('streaming', 'done', 'stopped', 'error')),
        stats TEXT,                          -- JSON of MessageStats, NULL until finished
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX messages_by_chat ON messages (chat_id, id)",
    "CREATE INDEX messages_streaming ON messages (state) WHERE state = 'streaming'",
    """CREATE TABLE app_settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL                  -- JSON
    )""",
    # Task runs outlive their chat (ON DELETE SET NULL): they are measurements of the
    # machine and model pair, and deleting a conversation should not erase what was learnt.
    """CREATE TABLE task_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER REFERENCES messages (id) ON DELETE SET NULL,
        tag TEXT NOT NULL,
        mode TEXT NOT NULL,
        target TEXT,
        draft TEXT,
        tokens INTEGER NOT NULL,
        decode_s REAL NOT NULL,
        drafted INTEGER NOT NULL,
        accepted INTEGER NOT NULL,
        rounds_with_draft INTEGER NOT NULL,
        rounds_fully_accepted INTEGER NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX task_runs_by_tag ON task_runs (tag, mode)",
]

# Version 2 ("one vocabulary"): every stored measurement is the additive counts of
# specchat.metrics.Counts, plain decoding is called "baseline" everywhere, and an answer
# remembers which characters of its text came from accepted draft tokens.
_V2_REAL = {"prefill_s", "decode_s", "draft_s", "verify_s", "overhead_s"}
_V2_NEW_TASK_RUN_COLUMNS = ("decoded", "prompt_tokens", "reused_tokens", "rounds", "k_sum", "fallback_rounds",
                            "prefill_s", "draft_s", "verify_s", "overhead_s")


_V2_MAX_COUNT = (1 << 63) - 1  # SQLite's INTEGER


def v1_stats_to_v2(doc: dict) -> dict:
    """A schema-1 MessageStats document (counts and ratios side by side) as schema 2's.

    Counts schema 1 did not keep are rebuilt where its ratios allow it: K summed over the
    rounds with a draft from mean K, prefill time from prefill tok/s; the first token of
    an answer never counted for decode speed.  Others (fallback rounds) are 0: unknown.
    A value of the wrong type, negative, not finite (Python's json wrote NaN) or past what SQLite
    holds counts as unknown too (0), and so does anything rebuilt from one; a ``fallbacks`` that is
    not a list of text keeps its texts only.
    """
    def number(key: str) -> float:
        value = doc.get(key)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        return value if ok else 0  # type: ignore[return-value]

    def whole(value: float) -> int:
        return round(value) if math.isfinite(value) and 0 <= value <= _V2_MAX_COUNT else 0

    def seconds(value: float) -> float:
        return float(value) if math.isfinite(value) and value >= 0 else 0.0

    tokens = whole(number("tokens"))
    decode_s = seconds(number("decode_s"))
    prompt_tokens = whole(number("prompt_tokens"))
    prefill_tok_s = seconds(number("prefill_tok_s"))
    rounds_with_draft = whole(number("rounds_with_draft"))
    has_decode = tokens > 1 and decode_s > 0
    counts = {
        "tokens": tokens,
        "decoded": tokens - 1 if has_decode else 0,
        "prompt_tokens": prompt_tokens,
        "reused_tokens": 0,  # schema 1's prefill tok/s counted the whole prompt
        "drafted": whole(number("drafted")),
        "accepted": whole(number("accepted")),
        "rounds": whole(number("rounds")),
        "rounds_with_draft": rounds_with_draft,
        "rounds_fully_accepted": whole(number("rounds_fully_accepted")),
        "k_sum": whole(number("mean_k") * rounds_with_draft),
        "fallback_rounds": 0,
        "prefill_s": seconds(prompt_tokens / prefill_tok_s) if prompt_tokens > 0 and prefill_tok_s > 0 else 0.0,
        "decode_s": decode_s if has_decode else 0.0,
        "draft_s": seconds(number("draft_s")),
        "verify_s": seconds(number("verify_s")),
        "overhead_s": seconds(number("overhead_s")),
    }
    fallbacks = doc.get("fallbacks")
    return {
        "counts": counts,
        "mode": _v2_mode(doc.get("mode")),
        "stop_reason": _v2_text(doc.get("stop_reason")),
        "fallbacks": [f for f in fallbacks if isinstance(f, str)] if isinstance(fallbacks, list) else [],
        "error": _v2_text(doc.get("error")),
    }


def _v2_text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _v2_document(text: object) -> object:
    """A stored JSON document, nesting bounded (ValueError otherwise: the row is left as it is, and
    reading it later says so).  NaN reads: schema 1 wrote it (Python's json does); the numbers are
    checked where they are used."""
    if not isinstance(text, str):
        raise ValueError(f"not JSON text but {type(text).__name__}")
    return bounded_json.loads(text)


def _v2_mode(mode: object) -> str:
    text = mode.strip().lower() if isinstance(mode, str) else ""
    return "baseline" if text == "off" else text


def _v2_rewrite(conn: sqlite3.Connection) -> None:
    """Messages' stats into counts, "off" into "baseline", task runs' missing counts filled in."""
    counts_of: dict[int, dict] = {}
    unreadable: list[int] = []
    for row in conn.execute("SELECT id, stats FROM messages WHERE stats IS NOT NULL").fetchall():
        try:
            doc = _v2_document(row[1])
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError:  # left as it is: reading it gives "no stats", as it did before
            unreadable.append(row[0])
            continue
        new = v1_stats_to_v2(doc)
        counts_of[row[0]] = new["counts"]
        conn.execute("UPDATE messages SET stats = ? WHERE id = ?", (json.dumps(new, sort_keys=True), row[0]))
    if unreadable:  # one line for them all: each is a dialog at start-up
        log.warning("%d answer(s) had statistics that do not read (message %s); left as they were, shown "
                    "without statistics", len(unreadable), ", ".join(map(str, unreadable[:10]))
                    + (", …" if len(unreadable) > 10 else ""))

    for row in conn.execute("SELECT id, settings FROM chats").fetchall():
        try:
            settings = _v2_document(row[1])
        except ValueError:  # left as it is: reading it says so and gives the defaults
            continue
        speculation = settings.get("speculation") if isinstance(settings, dict) else None
        if isinstance(settings, dict) and isinstance(speculation, str) and _v2_mode(speculation) != speculation:
            settings["speculation"] = _v2_mode(settings["speculation"])
            conn.execute("UPDATE chats SET settings = ? WHERE id = ?", (json.dumps(settings, sort_keys=True), row[0]))

    conn.execute("UPDATE task_runs SET mode = 'baseline' WHERE mode = 'off'")
    # schema 1 recorded only answers with two tokens or more and decode time
    conn.execute("UPDATE task_runs SET decoded = max(tokens - 1, 0)")
    for run_id, message_id in conn.execute("SELECT id, message_id FROM task_runs").fetchall():
        counts = counts_of.get(message_id)
        if counts is not None:  # the answer is still there: take what its stats knew
            sets = ", ".join(f"{c} = ?" for c in _V2_NEW_TASK_RUN_COLUMNS if c != "decoded")
            conn.execute(f"UPDATE task_runs SET {sets} WHERE id = ?",
                         (*(counts[c] for c in _V2_NEW_TASK_RUN_COLUMNS if c != "decoded"), run_id))


_V2: list[Step] = [
    # run-length spans over content: "t12d5t3" = 12 characters the target wrote, 5 from accepted
    # draft tokens, 3 the target's (records.parse_spans); '' for answers written before
    "ALTER TABLE messages ADD COLUMN content_spans TEXT NOT NULL DEFAULT ''",
    *(f"ALTER TABLE task_runs ADD COLUMN {c} {'REAL' if c in _V2_REAL else 'INTEGER'} NOT NULL DEFAULT 0"
      for c in _V2_NEW_TASK_RUN_COLUMNS),
    _v2_rewrite,
]

# Version 3 ("phases"): an answer that reasoned leaves, beside its task run, the counts of its
# rounds inside the reasoning block and after it (metrics.PhaseSplit), so the per-task table
# can show acceptance and speed of the two apart.  Older runs have no phase rows.
_V3_INT = ("tokens", "decoded", "prompt_tokens", "reused_tokens", "drafted", "accepted", "rounds",
           "rounds_with_draft", "rounds_fully_accepted", "k_sum", "fallback_rounds")
_V3_REAL = ("prefill_s", "decode_s", "draft_s", "verify_s", "overhead_s")
_V3: list[Step] = [
    "CREATE TABLE task_phase_runs (\n"
    "    run_id INTEGER NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,\n"
    "    phase TEXT NOT NULL,\n"
    + "".join(f"    {c} INTEGER NOT NULL DEFAULT 0,\n" for c in _V3_INT)
    + "".join(f"    {c} REAL NOT NULL DEFAULT 0,\n" for c in _V3_REAL)
    + "    PRIMARY KEY (run_id, phase)\n)",
]

# Version 4 ("versions"): regenerate and edit keep what they replace.  A version belongs to a
# message (a user message, in the app) and holds that message's text and the messages that
# followed it (its tail) when it was replaced; the tail stays in ``messages``, with its ids (so
# task runs keep pointing at their answers), marked by ``version_id``.  ``version_id IS NULL``:
# the message is in the chat as shown, the conversation the next turn sends.  ``messages.version``
# is the shown version's number among its message's versions (1 for a message never replaced).
_V4: list[Step] = [
    """CREATE TABLE message_versions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
        message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        number INTEGER NOT NULL,             -- its place in the pager, 1 = the first text
        content TEXT NOT NULL,               -- the message's text in this version
        content_spans TEXT NOT NULL DEFAULT '',  -- its draft tint (an edited answer's), as messages'
        created_at REAL NOT NULL,
        UNIQUE (message_id, number)
    )""",
    "ALTER TABLE messages ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
    # NULL: shown; else the archived version whose tail holds it (deleting the version deletes it)
    "ALTER TABLE messages ADD COLUMN version_id INTEGER REFERENCES message_versions (id) ON DELETE CASCADE",
    "CREATE INDEX messages_by_version ON messages (version_id) WHERE version_id IS NOT NULL",
]

# Version 5 ("trash"): deleting a chat in the window moves it to the trash, so that it can be
# undone: ``trashed_at`` (seconds since the epoch; NULL for a chat in use).  A trashed chat keeps
# its messages and settings; list_chats and search leave it out; the app deletes it for good when
# it starts next (Store.purge_trash).  Older chats are all in use.
_V5: list[Step] = [
    "ALTER TABLE chats ADD COLUMN trashed_at REAL",
    "CREATE INDEX chats_trashed ON chats (trashed_at) WHERE trashed_at IS NOT NULL",
]

# Version 6 ("attachments"): files in a message.  A blob is the text a model reads of one file (a PDF's
# extracted text, a source file's own), stored once by the SHA-256 of its bytes however many messages
# hold it; an attachment links a message to a blob under the name and type the user gave it.  Deleting a
# message (or its chat: the cascade) deletes its links, and the last link of a blob deletes the blob.
_V6: list[Step] = [
    """CREATE TABLE blobs (
        sha256 TEXT PRIMARY KEY,             -- 64 lowercase hex digits of the SHA-256 of data
        size INTEGER NOT NULL,               -- len(data)
        data BLOB NOT NULL
    )""",
    """CREATE TABLE attachments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,           -- its place among the message's files, from 0
        name TEXT NOT NULL,                  -- the file's name (no folder)
        mime TEXT NOT NULL,                  -- the file's type, e.g. text/x-python, application/pdf
        sha256 TEXT NOT NULL REFERENCES blobs (sha256),
        size INTEGER NOT NULL,               -- bytes of the text (the blob's size)
        created_at REAL NOT NULL,
        UNIQUE (message_id, position)
    )""",
    "CREATE INDEX attachments_by_blob ON attachments (sha256)",
    """CREATE TRIGGER attachments_blob_gc AFTER DELETE ON attachments BEGIN
        DELETE FROM blobs WHERE sha256 = old.sha256
            AND NOT EXISTS (SELECT 1 FROM attachments WHERE sha256 = old.sha256);
    END""",
]

# Version 7 ("busy", issue 38): each task run keeps the machine's verdict while it was measured
# (engine/contention.py): 1 busy, 0 quiet, NULL not judged (every run stored before, a server's).  The task
# table and a pair's plain reference leave the busy runs out (and the table says how many); a value that is
# not 0 or 1 reads as not judged.
_V7: list[Step] = ["ALTER TABLE task_runs ADD COLUMN busy INTEGER"]

MIGRATIONS: dict[int, Migration] = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7}
