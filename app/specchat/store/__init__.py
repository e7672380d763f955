"""Persistence: chats, their settings, messages with stats, app settings, task statistics.

Qt-free (stdlib sqlite3).  The GUI thread opens the one :class:`Store` with
:func:`open_store` and is its only user; the generation worker hands its events to the
GUI thread, which streams an answer into the database through an :class:`AnswerWriter`
(committed twice a second, so a crash or a kill loses at most about half a second of
tokens).  At the next open, an answer that was interrupted is marked "stopped" and keeps
its text.
"""

from .chats import AnswerWriter, Store, open_store
from .db import SCHEMA_VERSION, StoreError, StoreWriteError, default_path, fts5_available
from .records import (
    ANSWER_STATES,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    MAX_MESSAGE_ATTACHMENT_BYTES,
    PLAIN_MODE,
    SPECULATION_MODES,
    TASK_TAGS,
    Attachment,
    Chat,
    ChatSettings,
    Message,
    MessageStats,
    MessageVersion,
    NewAttachment,
    normalize_mode,
    normalize_task_tag,
    not_sent,
    origin_chars,
)
from .task_stats import MIN_PLAIN_RUNS, PlainReference, TaskRow, plain_reference, reset_task_stats, task_table

__all__ = [
    "ANSWER_STATES",
    "MAX_ATTACHMENTS",
    "MAX_ATTACHMENT_BYTES",
    "MAX_MESSAGE_ATTACHMENT_BYTES",
    "MIN_PLAIN_RUNS",
    "PLAIN_MODE",
    "SCHEMA_VERSION",
    "SPECULATION_MODES",
    "TASK_TAGS",
    "AnswerWriter",
    "Attachment",
    "Chat",
    "ChatSettings",
    "Message",
    "MessageStats",
    "MessageVersion",
    "NewAttachment",
    "PlainReference",
    "Store",
    "StoreError",
    "StoreWriteError",
    "TaskRow",
    "default_path",
    "fts5_available",
    "normalize_mode",
    "normalize_task_tag",
    "not_sent",
    "open_store",
    "origin_chars",
    "plain_reference",
    "reset_task_stats",
    "task_table",
]
