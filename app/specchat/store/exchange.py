"""Chats out of the store and into it: SpecChat's own JSON format, Markdown, and the imports.

Qt-free.  Three ways out and in:

- **SpecChat JSON** (``{"format": "specchat-chats", "version": N, "chats": [...]}``) holds everything
  the store holds of a chat: its title, times and settings; every message, shown or in a version that
  is paged away (``in_version``), with its reasoning, state, token origins, draft tint and the
  answer's statistics (speed, acceptance, drafters); every version (``versions``); the attachments
  (``attachments``: name, type and text).  Importing it gives back the same chat, as a new
  one.  Messages and versions are named by ``key`` (their place in the file, not the database id).
- **Markdown**: a readable transcript (roles as headings, the reasoning as a collapsed ``<details>``
  block or left out, code fences kept as written, attachments named).  One way only.
- **Imports** of other apps' exports (:mod:`specchat.store.foreign`: ChatGPT's ``conversations.json``,
  Open WebUI's export) become the same document, so one checker and one writer take them all.

Import never overwrites: every chat is new.  A file is read whole under :data:`MAX_FILE_BYTES`,
nesting bounded (``bounded_json``), counted (:data:`MAX_CHATS`, :data:`MAX_MESSAGES`,
:data:`MAX_TEXT_CHARS`) and checked whole before the first write; then every chat goes in in one
transaction.  A file refused is one :class:`ExchangeError` line, and nothing of it is stored.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat import bounded_json
from specchat.errors import UserError
from specchat.files import NotARegularFile, write_text_atomically

from .chats import Store, _inserted_id
from .db import transaction
from .records import (
    ANSWER_STATES,
    ROLES,
    Chat,
    ChatSettings,
    Message,
    MessageStats,
    NewAttachment,
    check_attachments,
    parse_spans,
)

FORMAT = "specchat-chats"
FORMAT_VERSION = 1  # what this SpecChat writes; it reads every version from 1 up to this
MAX_FILE_BYTES = 512 * 1024 * 1024  # a ChatGPT export of years of chats is a few hundred MB
MAX_CHATS = 100_000
MAX_MESSAGES = 1_000_000  # in one file, every chat together
MAX_TEXT_CHARS = 16 * 1024 * 1024  # one message's text or reasoning
MAX_DEPTH = bounded_json.MAX_DEPTH
# A message's files: {"name", "mime", "created_at", "text"} (their text as the model reads it; "base64" instead
# for bytes that are not UTF-8).  Another app's attachment without its text (ChatGPT's images) is named in
# the message's record but cannot be stored: SpecChat keeps a file's text, and there is none.
ATTACHMENTS = "attachments"


class ExchangeError(UserError):
    """A file that cannot be exported to, or read, or imported: one line naming it and why."""


# -- the document: what a chat is in SpecChat's JSON -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    key: int
    role: str
    content: str
    reasoning: str = ""
    created_at: float = 0.0
    state: str | None = None
    stats: MessageStats | None = None
    origins: str = ""
    content_spans: str = ""
    version: int = 1
    in_version: int | None = None  # the key of the paged-away version whose tail holds it; None: shown
    attachments: tuple[NewAttachment, ...] = ()
    attached_at: tuple[float, ...] = ()  # each file's time


@dataclass(frozen=True, slots=True)
class ImportedVersion:
    key: int
    message: int  # the key of the message it is a version of
    number: int
    content: str
    content_spans: str = ""
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class ImportedChat:
    title: str
    created_at: float
    updated_at: float
    settings: ChatSettings
    messages: tuple[ImportedMessage, ...]
    versions: tuple[ImportedVersion, ...] = ()


def chat_document(store: Store, chat_id: int) -> dict[str, Any]:
    """One chat as SpecChat's JSON holds it (every message and version, shown or not)."""
    chat = store.get_chat(chat_id)
    conn = store.connection
    rows = conn.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)).fetchall()
    version_rows = conn.execute("SELECT * FROM message_versions WHERE chat_id = ? ORDER BY id",
                                (chat_id,)).fetchall()
    message_key = {row["id"]: i + 1 for i, row in enumerate(rows)}
    version_key = {row["id"]: i + 1 for i, row in enumerate(version_rows)}
    messages = []
    for row in rows:
        m = store._message(row)
        doc: dict[str, Any] = {"key": message_key[m.id], "role": m.role, "content": m.content,
                               "created_at": m.created_at}
        if m.reasoning:
            doc["reasoning"] = m.reasoning
        if m.state is not None:
            doc["state"] = m.state
        if m.stats is not None:
            doc["stats"] = json.loads(m.stats.to_json())
        if m.origins:
            doc["origins"] = m.origins
        if m.content_spans:
            doc["content_spans"] = m.content_spans
        if m.version != 1:
            doc["version"] = m.version
        if row["version_id"] is not None and row["version_id"] in version_key:
            doc["in_version"] = version_key[row["version_id"]]
        files = _attachment_records(store, m.id)
        if files:
            doc[ATTACHMENTS] = files
        messages.append(doc)
    versions = []
    for row in version_rows:
        if row["message_id"] not in message_key:
            continue
        v = store._version(row)
        versions.append({"key": version_key[row["id"]], "message": message_key[row["message_id"]],
                         "number": v.number, "content": v.content, "created_at": v.created_at}
                        | ({"content_spans": row["content_spans"]}
                           if isinstance(row["content_spans"], str) and row["content_spans"] else {}))
    return {"title": chat.title, "created_at": chat.created_at, "updated_at": chat.updated_at,
            "settings": json.loads(chat.settings.to_json()), "messages": messages, "versions": versions}


def _attachment_records(store: Store, message_id: int) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for a in store.attachments(message_id):
        data = store.attachment_data(a)
        record: dict[str, object] = {"name": a.name, "mime": a.mime, "created_at": a.created_at}
        try:
            record["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            record["base64"] = base64.b64encode(data).decode("ascii")
        records.append(record)
    return records


def chat_ids(store: Store, chat_id: int | None) -> list[int]:
    """The chats an export covers: ``chat_id``, or every chat not in the trash (None), oldest first."""
    if chat_id is not None:
        try:
            store.get_chat(chat_id)
        except KeyError:
            raise ExchangeError(f"no chat {chat_id} ('specchat chats list' lists them)") from None
        return [chat_id]
    return [c.id for c in reversed(store.list_chats())]


def export_document(store: Store, ids: Iterable[int], now: Callable[[], float] = time.time) -> dict[str, Any]:
    return {"format": FORMAT, "version": FORMAT_VERSION, "exported_at": now(),
            "chats": [chat_document(store, i) for i in ids]}


def export_json(store: Store, ids: Iterable[int], path: Path) -> int:
    """Write the chats to ``path`` as SpecChat JSON (atomically); how many chats."""
    doc = export_document(store, ids)
    _write(path, json.dumps(doc, ensure_ascii=False, indent=1, allow_nan=False) + "\n")
    return len(doc["chats"])


def export_markdown(store: Store, ids: Iterable[int], path: Path, *, reasoning: bool = True) -> int:
    """Write the chats to ``path`` as Markdown (atomically); how many chats."""
    ids = list(ids)
    _write(path, markdown(store, ids, reasoning=reasoning))
    return len(ids)


def _write(path: Path, text: str) -> None:
    try:
        write_text_atomically(Path(path), text)
    except NotARegularFile as exc:
        raise ExchangeError(f"cannot export to {path}: {exc.strerror}") from None
    except OSError as exc:
        raise ExchangeError(f"cannot export to {path}: {exc.strerror or exc}") from None


# -- Markdown ----------------------------------------------------------------------------------------------


_ROLE_HEADINGS = {"user": "User", "assistant": "Assistant", "system": "System"}


def markdown(store: Store, ids: Sequence[int], *, reasoning: bool = True) -> str:
    """The shown conversation of each chat, readable: a heading per chat and per message, the reasoning
    as a collapsed block (or left out), the text as written (an unclosed code fence is closed, so the
    next heading stays a heading), attachments named, each answer's figures in one line."""
    out: list[str] = []
    for chat_id in ids:
        chat = store.get_chat(chat_id)
        out.append(f"# {_one_line(chat.title)}\n\n_{_date(chat.created_at)}_\n")
        for m in store.messages(chat_id):
            out.append(_markdown_message(store, m, reasoning))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _markdown_message(store: Store, m: Message, reasoning: bool) -> str:
    parts = [f"## {_ROLE_HEADINGS.get(m.role, m.role)}\n"]
    if reasoning and m.reasoning.strip():
        parts.append(f"<details>\n<summary>Reasoning</summary>\n\n{_closed_fences(m.reasoning.strip())}\n\n"
                     "</details>\n")
    if m.content:
        parts.append(_closed_fences(m.content.rstrip("\n")) + "\n")
    for a in store.attachments(m.id):
        parts.append(f"- Attachment: `{_one_line(a.name)}` ({a.mime}, {a.size} bytes)\n")
    if m.state in ("stopped", "error"):
        parts.append(f"_({m.state}{': ' + _one_line(m.stats.error) if m.stats and m.stats.error else ''})_\n")
    if m.stats is not None and m.role == "assistant":
        parts.append(f"_{_figures(m.stats)}_\n")
    return "\n".join(parts)


def _figures(stats: MessageStats) -> str:
    bits = [f"{stats.mode or 'plain'}", f"{stats.tokens} tokens"]
    if stats.decode_tok_s:
        bits.append(f"{stats.decode_tok_s:.1f} tok/s")
    if stats.drafted:
        bits.append(f"accepted {stats.accepted} of {stats.drafted} drafted")
    return " · ".join(bits)


def _closed_fences(text: str) -> str:
    """``text`` as written, with a closing fence added when a code fence is left open."""
    fence = ""
    for line in text.split("\n"):
        stripped = line.lstrip()
        if not fence:
            if stripped.startswith("```") or stripped.startswith("~~~"):
                char = stripped[0]
                fence = char * (len(stripped) - len(stripped.lstrip(char)))
        elif stripped.startswith(fence) and not stripped.strip(fence[0]).strip():
            fence = ""
    return text + f"\n{fence}" if fence else text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _date(t: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return "unknown date"


# -- reading a file ------------------------------------------------------------------------------------


def read_document(path: Path) -> object:
    """The JSON of ``path``: at most :data:`MAX_FILE_BYTES`, nesting bounded; one line otherwise."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise ExchangeError(f"cannot import {path}: a folder, not a file") from None
    except OSError as exc:
        raise ExchangeError(f"cannot import {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ExchangeError(f"cannot import {path}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ExchangeError(f"cannot import {path}: not UTF-8 text (SpecChat, ChatGPT and Open WebUI exports "
                            "are JSON)") from None
    try:
        return bounded_json.loads(text, max_depth=MAX_DEPTH)
    except bounded_json.TooDeep as exc:
        raise ExchangeError(f"cannot import {path}: {exc}") from None
    except ValueError as exc:
        raise ExchangeError(f"cannot import {path}: not JSON ({str(exc).splitlines()[0][:120]})") from None


def parse(doc: object) -> tuple[str, list[ImportedChat]]:
    """The chats a document holds, checked whole, and the name of its format; ValueError (one line)
    for anything refused."""
    from . import foreign

    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        return "SpecChat", specchat_chats(doc)
    kind = foreign.kind_of(doc)
    if kind == "chatgpt":
        return "ChatGPT", _counted([specchat_chat(d, i) for i, d in enumerate(foreign.chatgpt_chats(doc))])
    if kind == "openwebui":
        return "Open WebUI", _counted([specchat_chat(d, i) for i, d in enumerate(foreign.openwebui_chats(doc))])
    raise ValueError("not a SpecChat, ChatGPT (conversations.json) or Open WebUI chat export")


def read_file(path: Path) -> tuple[str, list[ImportedChat]]:
    """The chats of ``path``, checked whole, and its format's name; touches no store (any thread may)."""
    doc = read_document(path)
    try:
        kind, chats = parse(doc)
    except ValueError as exc:
        raise ExchangeError(f"cannot import {path}: {exc}") from None
    if not chats:
        raise ExchangeError(f"cannot import {path}: it holds no chats")
    return kind, chats


def import_file(store: Store, path: Path) -> tuple[str, list[Chat]]:
    """Import every chat of ``path`` as new chats, all or none; (the format's name, the new chats)."""
    kind, chats = read_file(path)
    return kind, import_chats(store, chats)


def import_chats(store: Store, chats: Sequence[ImportedChat]) -> list[Chat]:
    """Store ``chats`` as new chats in one transaction (a refused write stores none of them)."""
    ids = []
    with transaction(store.connection) as conn:
        for chat in chats:
            ids.append(_write_chat(conn, chat))
    return [store.get_chat(i) for i in ids]


def _write_chat(conn: Any, chat: ImportedChat) -> int:
    chat_id = _inserted_id(conn.execute(
        "INSERT INTO chats (title, created_at, updated_at, settings) VALUES (?, ?, ?, ?)",
        (chat.title, chat.created_at, chat.updated_at, chat.settings.to_json())))
    message_id: dict[int, int] = {}
    for m in chat.messages:
        message_id[m.key] = _inserted_id(conn.execute(
            "INSERT INTO messages (chat_id, role, content, reasoning, origins, state, stats, created_at,"
            " content_spans, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (chat_id, m.role, m.content, m.reasoning, m.origins, m.state,
             m.stats.to_json() if m.stats is not None else None, m.created_at, m.content_spans, m.version)))
        for position, (file, at) in enumerate(zip(m.attachments, m.attached_at, strict=True)):
            Store._link(conn, message_id[m.key], position, file, at)
    version_id: dict[int, int] = {}
    for v in chat.versions:
        version_id[v.key] = _inserted_id(conn.execute(
            "INSERT INTO message_versions (chat_id, message_id, number, content, content_spans, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (chat_id, message_id[v.message], v.number, v.content, v.content_spans, v.created_at)))
    for m in chat.messages:
        if m.in_version is not None:
            conn.execute("UPDATE messages SET version_id = ? WHERE id = ?",
                         (version_id[m.in_version], message_id[m.key]))
    return chat_id


# -- checking a document ---------------------------------------------------------------------------------


def specchat_chats(doc: Mapping[str, object]) -> list[ImportedChat]:
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError("a SpecChat export without a format version")
    if version > FORMAT_VERSION:
        raise ValueError(f"written by a newer SpecChat (format version {version}; this one reads up to "
                         f"{FORMAT_VERSION})")
    chats = doc.get("chats")
    if not isinstance(chats, list):
        raise ValueError("'chats' is not a list")
    if len(chats) > MAX_CHATS:
        raise ValueError(f"more than {MAX_CHATS} chats")
    return _counted([specchat_chat(c, i) for i, c in enumerate(chats)])


def _counted(chats: list[ImportedChat]) -> list[ImportedChat]:
    if len(chats) > MAX_CHATS:
        raise ValueError(f"more than {MAX_CHATS} chats")
    if sum(len(c.messages) + len(c.versions) for c in chats) > MAX_MESSAGES:
        raise ValueError(f"more than {MAX_MESSAGES} messages")
    return chats


def specchat_chat(doc: object, index: int) -> ImportedChat:
    """One chat of SpecChat's JSON, every field checked (ValueError naming the chat and the field)."""
    where = f"chat {index + 1}"
    if not isinstance(doc, dict):
        raise ValueError(f"{where} is not an object")
    title = " ".join(_text(doc.get("title", ""), f"{where}: title").split())[:500] or "Imported chat"
    where = f"chat {index + 1} ({title[:40]})"
    created = _time(doc.get("created_at", 0.0), f"{where}: created_at")
    updated = _time(doc.get("updated_at", created), f"{where}: updated_at")
    settings_doc = doc.get("settings", {})
    if not isinstance(settings_doc, dict):
        raise ValueError(f"{where}: settings is not an object")
    try:
        settings, _bad = ChatSettings.read(json.dumps(settings_doc, allow_nan=False))
    except ValueError:  # NaN, or a rule between keys: the defaults are a chat that opens
        settings = ChatSettings()
    messages_doc = doc.get("messages", [])
    versions_doc = doc.get("versions", [])
    if not isinstance(messages_doc, list) or not isinstance(versions_doc, list):
        raise ValueError(f"{where}: messages and versions must be lists")
    if len(messages_doc) + len(versions_doc) > MAX_MESSAGES:
        raise ValueError(f"{where}: more than {MAX_MESSAGES} messages")
    messages = [_message(m, f"{where}, message {i + 1}") for i, m in enumerate(messages_doc)]
    versions = [_version(v, f"{where}, version {i + 1}") for i, v in enumerate(versions_doc)]
    _check_links(messages, versions, where)
    return ImportedChat(title, created, updated, settings, tuple(messages), tuple(versions))


def _message(doc: object, where: str) -> ImportedMessage:
    if not isinstance(doc, dict):
        raise ValueError(f"{where} is not an object")
    role = doc.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}: role must be one of {', '.join(ROLES)}")
    state = doc.get("state")
    if state is not None and state not in ANSWER_STATES:
        raise ValueError(f"{where}: state must be one of {', '.join(ANSWER_STATES)}")
    if state == "streaming":
        state = "stopped"  # an answer exported mid-stream is not streaming here
    stats_doc = doc.get("stats")
    stats = None
    if stats_doc is not None:
        if not isinstance(stats_doc, dict):
            raise ValueError(f"{where}: stats is not an object")
        try:
            stats, _bad = MessageStats.read(json.dumps(stats_doc, allow_nan=False))
        except ValueError as exc:
            raise ValueError(f"{where}: stats: {str(exc)[:120]}") from None
    content = _text(doc.get("content", ""), f"{where}: content")
    spans = _text(doc.get("content_spans", ""), f"{where}: content_spans")
    if spans and sum(n for n, _ in parse_spans(spans)) != len(content):
        spans = ""  # a tint that does not cover the text is none (Message.content_segments)
    origins = _text(doc.get("origins", ""), f"{where}: origins")
    if origins.strip("dt"):
        raise ValueError(f"{where}: origins holds other letters than d and t")
    attachments = _attachments(doc.get(ATTACHMENTS, []), where)
    return ImportedMessage(
        key=_whole(doc.get("key"), f"{where}: key", 1),
        role=str(role), content=content,
        reasoning=_text(doc.get("reasoning", ""), f"{where}: reasoning"),
        created_at=_time(doc.get("created_at", 0.0), f"{where}: created_at"),
        state=state if role == "assistant" else None,
        stats=stats, origins=origins, content_spans=spans,
        version=_whole(doc.get("version", 1), f"{where}: version", 1),
        in_version=None if doc.get("in_version") is None else _whole(doc["in_version"], f"{where}: in_version", 1),
        attachments=tuple(a for a, _ in attachments), attached_at=tuple(t for _, t in attachments),
    )


def _attachments(value: object, where: str) -> list[tuple[NewAttachment, float]]:
    """A message's files as the store takes them (its caps: check_attachments); a record without text (another
    app's image) is left out."""
    if not isinstance(value, list) or not all(isinstance(a, dict) for a in value):
        raise ValueError(f"{where}: attachments is not a list of objects")
    files = []
    for i, a in enumerate(value):
        at = f"{where}, attachment {i + 1}"
        name = _text(a.get("name", ""), f"{at}: name")
        if "text" in a:
            data = _text(a["text"], f"{at}: text").encode("utf-8")
        elif "base64" in a:
            try:
                data = base64.b64decode(_text(a["base64"], f"{at}: base64"), validate=True)
            except ValueError:
                raise ValueError(f"{at}: base64 is not base64") from None
        else:
            continue
        mime = _text(a.get("mime", ""), f"{at}: mime")
        files.append((NewAttachment(name, mime, data), _time(a.get("created_at", 0.0), f"{at}: created_at")))
    try:
        checked = check_attachments(f for f, _ in files)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return [(c, t) for c, (_, t) in zip(checked, files, strict=True)]


def _version(doc: object, where: str) -> ImportedVersion:
    if not isinstance(doc, dict):
        raise ValueError(f"{where} is not an object")
    content = _text(doc.get("content", ""), f"{where}: content")
    spans = _text(doc.get("content_spans", ""), f"{where}: content_spans")
    if spans and sum(n for n, _ in parse_spans(spans)) != len(content):
        spans = ""
    return ImportedVersion(key=_whole(doc.get("key"), f"{where}: key", 1),
                           message=_whole(doc.get("message"), f"{where}: message", 1),
                           number=_whole(doc.get("number"), f"{where}: number", 1), content=content,
                           content_spans=spans, created_at=_time(doc.get("created_at", 0.0), f"{where}: created_at"))


def _check_links(messages: Sequence[ImportedMessage], versions: Sequence[ImportedVersion], where: str) -> None:
    """What the store relies on: keys unique, in increasing order; a version belongs to a message before
    every message of its tail (so no version holds its own message); numbers unique per message."""
    keys = [m.key for m in messages]
    if keys != sorted(set(keys)):
        raise ValueError(f"{where}: message keys must be unique and increasing")
    known = set(keys)
    owner: dict[int, int] = {}
    numbers: set[tuple[int, int]] = set()
    for v in versions:
        if v.key in owner:
            raise ValueError(f"{where}: version key {v.key} twice")
        if v.message not in known:
            raise ValueError(f"{where}: version {v.key} belongs to no message")
        if (v.message, v.number) in numbers:
            raise ValueError(f"{where}: message {v.message} has two versions numbered {v.number}")
        numbers.add((v.message, v.number))
        owner[v.key] = v.message
    for m in messages:
        if (m.key, m.version) in numbers:
            raise ValueError(f"{where}: message {m.key} shows version {m.version}, which is also kept apart")
        if m.in_version is not None:
            if m.in_version not in owner:
                raise ValueError(f"{where}: message {m.key} is in no known version")
            if owner[m.in_version] >= m.key:
                raise ValueError(f"{where}: message {m.key} is in the tail of a later message's version")


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} is not text")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{where} is longer than {MAX_TEXT_CHARS} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where} holds text that is not Unicode (a lone surrogate)") from None
    return value.replace("\x00", "")


def _time(value: object, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
            and 0 <= value < 1e11:
        return float(value)
    if value is None:
        return 0.0
    raise ValueError(f"{where} is not a time")


def _whole(value: object, where: str, low: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value < 1 << 62:
        return value
    raise ValueError(f"{where} is not a whole number from {low}")
