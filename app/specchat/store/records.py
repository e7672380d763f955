"""The records the store keeps: chat settings, messages and their statistics.

Frozen dataclasses, stored as rows and JSON.  Reading a stored document is checked, key by
key, before anything uses it: the JSON through :func:`specchat.bounded_json.loads` (nesting
bounded), then each known key for its declared type and its own rule
(:meth:`ChatSettings.validate`'s, a count's range; a number finite).  A key that fails takes its default and the
store says which in one line (``damaged``); an unknown key (a newer version's) is ignored.  So
a chat always opens, and nothing a row holds can raise past its reader.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from specchat import bounded_json, modes
from specchat.context_policy import POLICY_NAMES, ContextPolicy
from specchat.metrics import MAX_COUNT, Counts, CountsView, PhaseSplit
from specchat.sampling_settings import SamplingSettings, StructuredOutput

log = logging.getLogger(__name__)

# The mode names (specchat/modes.py, the leaf the engine's Mode comes from too).
PLAIN_MODE = modes.PLAIN_MODE  # plain decoding, no drafter
SPECULATION_MODES = modes.MODE_NAMES
_LEGACY_MODES = modes.LEGACY_MODES
TASK_TAGS = ("code", "edit", "chat", "json", "summary", "creative")  # the built-in tags; any other text is allowed
_SAMPLING_FIELDS = frozenset(f.name for f in fields(SamplingSettings))
_SAMPLING_FLAT = _SAMPLING_FIELDS - {"structured"}  # stored as they are; the structured output as two keys
ROLES = ("user", "assistant", "system")
ANSWER_STATES = ("streaming", "done", "stopped", "error")
FINAL_STATES = ("done", "stopped", "error")


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """Everything that decides how a chat is answered; saved with the chat.

    ``sampling`` is the one sampling type the engine takes too
    (:class:`specchat.sampling_settings.SamplingSettings`, with the structured output).
    Stored as JSON so that a new field needs no migration: a missing key takes the
    default, an unknown key (from a newer version) is ignored.  The JSON stays flat, as
    every version wrote it: the sampling fields at the top, the structured output as
    ``structured_kind`` and ``structured_text``.
    """

    target: Path | None = None  # target model file
    draft: Path | None = None  # draft model file, None: no draft model
    speculation: str = "auto"  # one of SPECULATION_MODES ("off", the old name of "baseline", is read as it)
    reasoning: bool = True  # let models that can think do so
    system_prompt: str = ""
    sampling: SamplingSettings = SamplingSettings()  # temperature, top-k/p, min-p, repeat, seed, schema or grammar
    max_tokens: int = 2048
    task: str = "chat"  # one of TASK_TAGS or the user's own text
    backend: str = ""  # "": this machine's engine (Local); "llama-server": one SpecChat starts for this
    # chat's pair; else the name of a server in Settings → Servers
    server_spec_type: str = "draft-simple"  # the managed llama-server's --spec-type
    # what is sent once the chat outgrows the context (specchat/context_policy.py); the store keeps everything
    context_policy: str = ContextPolicy.STOP.value

    def __post_init__(self) -> None:
        # Normalise what users and config files type, so equal settings compare equal.
        for name in ("target", "draft"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value) if str(value) else None)
        object.__setattr__(self, "speculation", normalize_mode(self.speculation))
        object.__setattr__(self, "task", normalize_task_tag(self.task))
        policy = self.context_policy
        object.__setattr__(self, "context_policy", str(getattr(policy, "value", policy) or "").strip().lower())

    def validate(self) -> None:
        """Raise ValueError naming the first bad field: its stored type (what :meth:`read` takes
        back), then its rule."""
        for key, value in self._flat().items():
            try:
                _SETTINGS_KEYS[key](value)
            except ValueError as exc:
                raise ValueError(f"{key} {exc}") from None
        if self.speculation not in SPECULATION_MODES:
            raise ValueError(f"speculation must be one of {', '.join(SPECULATION_MODES)}")
        self.sampling.validate()  # the engine's own checks (GrammarError, a ValueError, for the structured output)
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.context_policy not in POLICY_NAMES:
            raise ValueError(f"context_policy must be one of {', '.join(POLICY_NAMES)}")

    def replaced(self, **change: Any) -> ChatSettings:
        """These settings with ``change``: fields of the chat or of its sampling, by name
        (``temperature=0.7, max_tokens=77``)."""
        sampling = {k: change.pop(k) for k in list(change) if k in _SAMPLING_FIELDS}
        if sampling:
            change["sampling"] = replace(change.get("sampling", self.sampling), **sampling)
        return replace(self, **change)

    def _flat(self) -> dict[str, object]:
        """The stored document's keys and values (flat: the sampling fields at the top)."""
        doc: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sampling"}
        doc["target"] = str(self.target) if self.target else None
        doc["draft"] = str(self.draft) if self.draft else None
        sampling = {k: getattr(self.sampling, k) for k in _SAMPLING_FLAT}
        structured = self.sampling.structured
        return doc | sampling | {"structured_kind": structured.kind, "structured_text": structured.text}

    def to_json(self) -> str:
        return json.dumps(self._flat(), sort_keys=True)

    @classmethod
    def read(cls, text: str | None) -> tuple[ChatSettings, list[str]]:
        """The settings a stored document holds, and what was wrong in it (a few words per key).

        Each known key is checked for its type and, alone over the defaults, for its own rule
        (:meth:`validate`: a number finite and in range); a key that fails keeps its default.
        ValueError (one line) for a document that is not a JSON object or nests too deep.
        """
        doc = _document(text)
        good: dict[str, object] = {}
        bad: list[str] = []
        for keys in _SETTINGS_UNITS:
            present = {k: doc[k] for k in keys if k in doc and (doc[k] is not None or k in _NULLABLE)}
            if not present:
                continue
            try:
                values = {k: _SETTINGS_KEYS[k](v) for k, v in present.items()}
                _settings_of(values).validate()
            except ValueError as exc:
                bad.append(f"{'/'.join(present)}: {_brief(exc)}")
                continue
            good |= values
        settings = _settings_of(good)
        settings.validate()  # rules between keys (none today) refuse the whole document
        return settings, bad

    @classmethod
    def from_json(cls, text: str | None, damaged: Callable[[str], None] | None = None) -> ChatSettings:
        """Never raises: the keys that read (see :meth:`read`), the defaults for the others, and one
        line to ``damaged`` (default: a warning in the log) naming what was replaced.

        A chat must always open, even if its settings were written by a newer version
        or edited by hand; the user can fix the settings from the window.
        """
        tell = damaged or _log_damage
        try:
            settings, bad = cls.read(text)
        except ValueError as exc:
            tell(f"chat settings unreadable ({_brief(exc)}); using the defaults")
            return cls()
        if bad:
            tell(f"chat settings: {'; '.join(bad)}; using the default{'s' if len(bad) > 1 else ''} there")
        return settings


def _log_damage(line: str) -> None:
    log.warning("%s", line)


def _brief(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 120 else text[:119] + "…"


def _document(text: str | None) -> dict[str, object]:
    """A stored JSON object (empty for no text), or ValueError: not JSON, not an object, or nested
    past :data:`specchat.bounded_json.MAX_DEPTH`."""
    if not text:
        return {}
    if not isinstance(text, str):  # a BLOB or a number where the column holds JSON text
        raise ValueError(f"not JSON text but {type(text).__name__}")
    doc = bounded_json.loads(text)  # NaN or an infinity fails the key that holds it, not the document
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    return doc


# -- what each stored key may hold: its JSON type, checked before any value is used -----------------

def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be text, got {_shown(value)}")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {_shown(value)}")
    return value


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be a whole number, got {_shown(value)}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {_shown(value)}")
    return float(value)


def _optional_path(value: object) -> str | None:
    return None if value is None else _text(value)


def _count(value: object) -> int:
    value = _whole(value)
    if not 0 <= value <= MAX_COUNT:
        raise ValueError(f"must be from 0 to {MAX_COUNT}, got {_shown(value)}")
    return value


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"must be a list of text, got {_shown(value)}")
    return tuple(_text(v) for v in value)


def _drafter_rows(value: object) -> tuple[tuple[str, int, int], ...]:
    if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 3 for v in value):
        raise ValueError(f"must be a list of [name, drafted, accepted], got {_shown(value)}")
    return tuple((_text(n), _count(d), _count(a)) for n, d, a in value)


def _ordered_pair(value: object, first_name: str, last_name: str, order: str) -> tuple[int, int]:
    """Two counts from 1, the first not above the last (``order`` says it in the error's words)."""
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"must be [{first_name}, {last_name}], got {_shown(value)}")
    first, last = _count(value[0]), _count(value[1])
    if not 1 <= first <= last:
        raise ValueError(f"must be [{first_name}, {last_name}] from 1, {order}, got {_shown(value)}")
    return first, last


def _id_span(value: object) -> tuple[int, int]:
    return _ordered_pair(value, "first id", "last id", "first not after last")


def _thread_pair(value: object) -> tuple[int, int]:
    return _ordered_pair(value, "fewest", "most", "fewest not above most")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# The reader of each field's declared type (``ChatSettings`` and ``SamplingSettings`` annotations);
# tests/store/test_stored_rows.py fails when a new field has a type with no reader here.
TYPE_READERS: dict[str, Callable[[object], object]] = {
    "str": _text, "bool": _flag, "int": _whole, "float": _number, "Path | None": _optional_path,
}
_SETTINGS_KEYS: dict[str, Callable[[object], object]] = {
    **{f.name: TYPE_READERS[str(f.type)] for f in fields(ChatSettings) if f.name != "sampling"},
    **{f.name: TYPE_READERS[str(f.type)] for f in fields(SamplingSettings) if f.name != "structured"},
    "structured_kind": _text, "structured_text": _text,
}
_NULLABLE = frozenset({"target", "draft"})  # null is a value there (no model); elsewhere it is "not set"
# keys checked together: a structured output's kind means nothing without its text
_SETTINGS_UNITS: tuple[tuple[str, ...], ...] = (
    *((k,) for k in _SETTINGS_KEYS if not k.startswith("structured_")), ("structured_kind", "structured_text"))


def _settings_of(flat: Mapping[str, object]) -> ChatSettings:
    """ChatSettings from the flat stored keys (checked ones: every value has its declared type)."""
    structured = StructuredOutput(str(flat.get("structured_kind") or ""), str(flat.get("structured_text") or ""))
    sampling = SamplingSettings(**{k: v for k, v in flat.items() if k in _SAMPLING_FLAT},  # type: ignore[arg-type]
                                structured=structured)
    own = {k: v for k, v in flat.items() if k in _CHAT_FIELDS}
    return ChatSettings(**own, sampling=sampling)  # type: ignore[arg-type]


_CHAT_FIELDS = frozenset(f.name for f in fields(ChatSettings)) - {"sampling"}


def normalize_mode(mode: object) -> str:
    """A mode name as the engine spells it: trimmed, lower case, "off" read as "baseline"."""
    text = str(getattr(mode, "value", mode) or "").strip().lower()
    return _LEGACY_MODES.get(text, text)


def normalize_task_tag(tag: object) -> str:
    """Built-in tags are matched case-insensitively; other text is kept, trimmed; empty -> "chat"."""
    text = str(tag or "").strip()
    if not text:
        return "chat"
    return text.casefold() if text.casefold() in TASK_TAGS else text


@dataclass(frozen=True, slots=True)
class MessageStats(CountsView):
    """What one finished answer measured: its counts (:class:`specchat.metrics.Counts`),
    the mode it ran in, why it stopped and the fallbacks it declared.

    Stored as counts, never as ratios, so that answers add up exactly (task_stats.py);
    the flat names (``tokens``, ``decode_tok_s`` ...) read the counts.
    """

    counts: Counts = Counts()
    mode: str = ""
    stop_reason: str = ""
    fallbacks: tuple[str, ...] = ()
    error: str = ""  # the message shown to the user when the answer ended in an error
    phases: PhaseSplit = PhaseSplit()  # its rounds inside the reasoning block and after it
    structured: str = ""  # "json_schema" or "grammar" when the answer was held to one (its acceptance is under it)
    # the drafters that drafted, as (name, drafted, accepted), most drafted first ("model", "lookup")
    drafters: tuple[tuple[str, int, int], ...] = ()
    notes: tuple[str, ...] = ()  # why a drafter did not run, in a few words each (the stats line)
    n_ctx: int = 0  # the context it was answered in (0: not known, a server that does not say, an older answer)
    left_out: int = 0  # messages of the chat its context policy did not send (nothing is deleted)
    # the ids of the first and the last stored message not sent (those between them, shown then, were not
    # either): the transcript's "not sent" marks; None where nothing was left out, or an answer before them
    left_out_span: tuple[int, int] | None = None
    # the machine's verdict while it was measured (engine/contention.py): True busy, False quiet, None not
    # judged (an older answer, a server's); a busy run's figures are left out of the task table
    busy: bool | None = None
    busy_why: str = ""  # what made it busy, in a few words
    past_context: bool = False  # the error was a prompt past the context under "Stop at the limit" (its remedy is offered)
    # the fewest decode threads it ran on, of the most it could: fewer when other work held cores
    # (engine/threads.py); None where not fitted (a count the user chose, a server's answer, an older one)
    threads: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", normalize_mode(self.mode))
        object.__setattr__(self, "fallbacks", tuple(self.fallbacks))
        object.__setattr__(self, "drafters", tuple((str(n), int(d), int(a)) for n, d, a in self.drafters))
        object.__setattr__(self, "notes", tuple(self.notes))
        if self.left_out_span is not None:
            first, last = self.left_out_span
            object.__setattr__(self, "left_out_span", (int(first), int(last)))
        if self.threads is not None:
            fewest, most = self.threads
            object.__setattr__(self, "threads", (int(fewest), int(most)) if fewest and most else None)

    def to_json(self) -> str:
        doc: dict[str, Any] = {"counts": self.counts.to_dict(), "mode": self.mode, "stop_reason": self.stop_reason,
               "fallbacks": list(self.fallbacks), "error": self.error}
        if self.structured:
            doc["structured"] = self.structured
        if self.phases.has_reasoning:
            doc["phases"] = self.phases.to_dict()
        if self.drafters:
            doc["drafters"] = [list(d) for d in self.drafters]
        if self.notes:
            doc["notes"] = list(self.notes)
        if self.n_ctx:
            doc["n_ctx"] = self.n_ctx
        if self.left_out:
            doc["left_out"] = self.left_out
        if self.left_out_span is not None:
            doc["left_out_span"] = list(self.left_out_span)
        if self.busy is not None:
            doc["busy"] = self.busy
        if self.busy_why:
            doc["busy_why"] = self.busy_why
        if self.past_context:
            doc["past_context"] = True
        if self.threads is not None:
            doc["threads"] = list(self.threads)
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def read(cls, text: str | None) -> tuple[MessageStats | None, list[str]]:
        """The statistics a stored document holds (None for no text), and what was wrong in it.

        Each known key is checked for its type and range (a count from 0, a time finite); a key
        that fails keeps its default.  ValueError (one line) for a document that is not a JSON
        object, nests too deep, or whose counts do not read.
        """
        if not text:
            return None, []
        doc = _document(text)
        good: dict[str, object] = {}
        bad: list[str] = []
        for key, read in _STATS_KEYS.items():
            if doc.get(key) is None:
                continue
            try:
                good[key] = read(doc[key])
            except ValueError as exc:
                if key == "counts":  # what every figure is made of: without them there are no statistics
                    raise ValueError(f"counts: {_brief(exc)}") from None
                bad.append(f"{key}: {_brief(exc)}")
        return cls(**good), bad  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, text: str | None, damaged: Callable[[str], None] | None = None) -> MessageStats | None:
        """Never raises: the keys that read (see :meth:`read`), defaults for the others; None for no
        text or a document that does not read at all; one line to ``damaged`` (default: the log)."""
        tell = damaged or _log_damage
        try:
            stats, bad = cls.read(text)
        except ValueError as exc:
            tell(f"answer statistics unreadable ({_brief(exc)}); not shown")
            return None
        if bad:
            tell(f"answer statistics: {'; '.join(bad)}; left out")
        return stats

    @classmethod
    def from_generation(cls, stats: Any, stop_reason: object = "", error: str = "") -> MessageStats:
        """Build from the engine's ``GenerationStats`` (its ``counts``, ``mode`` and ``fallbacks``).

        Duck-typed so the store does not depend on the engine package.
        """
        return cls(counts=stats.counts, mode=str(stats.mode),
                   stop_reason=str(getattr(stop_reason, "value", stop_reason)),
                   fallbacks=tuple(getattr(stats, "fallbacks", ())), error=error,
                   phases=getattr(stats, "phases", PhaseSplit()),
                   structured=str(getattr(stats, "structured", "") or ""),
                   drafters=tuple(getattr(stats, "drafters", ())), notes=tuple(getattr(stats, "notes", ())),
                   threads=getattr(stats, "threads", None))


_STATS_KEYS: dict[str, Callable[[Any], object]] = {
    "counts": Counts.from_dict, "mode": _text, "stop_reason": _text, "fallbacks": _texts, "error": _text,
    "phases": PhaseSplit.from_dict, "structured": _text, "drafters": _drafter_rows, "notes": _texts,
    "n_ctx": _count, "left_out": _count, "left_out_span": _id_span, "busy": _flag, "busy_why": _text,
    "past_context": _flag, "threads": _thread_pair,
}


@dataclass(frozen=True, slots=True)
class Chat:
    id: int
    title: str
    created_at: float  # seconds since the epoch
    updated_at: float  # last activity (a message added or an answer finished)
    settings: ChatSettings = field(default_factory=ChatSettings)
    trashed_at: float | None = None  # deleted in the window: restorable until the app starts again


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    chat_id: int
    role: str  # "user" | "assistant" | "system"
    content: str
    reasoning: str  # the model's reasoning block, kept apart from the visible answer
    created_at: float
    state: str | None = None  # assistant only: "streaming" | "done" | "stopped" | "error"
    stats: MessageStats | None = None  # assistant only, once finished with stats
    origins: str = ""  # one char per emitted token: 'd' accepted draft, 't' target
    content_spans: str = ""  # run-length spans over ``content``, see content_segments(); "" before schema 2
    version: int = 1  # which of its versions is shown (Store.versions: the others); 1 if never replaced

    def content_segments(self) -> list[tuple[str, bool]]:
        """The visible text in runs of (text, from accepted draft tokens), for the tinted view.

        Rebuilt from ``content_spans``.  A message without spans (written before schema 2,
        a user message, an edited one) or whose spans do not cover its text exactly is
        one untinted run: a wrong tint would be worse than none.
        """
        if not self.content:
            return []
        runs = parse_spans(self.content_spans)
        if sum(n for n, _ in runs) != len(self.content):
            return [(self.content, False)]
        out: list[tuple[str, bool]] = []
        at = 0
        for n, draft in runs:
            out.append((self.content[at:at + n], draft))
            at += n
        return out


@dataclass(frozen=True, slots=True)
class MessageVersion:
    """A replaced version of a message: its text then; its tail (the messages that followed it) stays
    in the store, out of the shown chat, until :meth:`~specchat.store.Store.show_version` brings it back."""

    id: int
    message_id: int
    number: int  # its place among the message's versions, 1 = the first
    content: str
    created_at: float


# What one message may hold in files: the bytes of each file's text and of all of them together.  A
# file past these is refused whole with one line (never cut): no local context holds more anyway.
MAX_ATTACHMENT_BYTES = 1 << 20  # 1 MiB of text, about 250k tokens
MAX_MESSAGE_ATTACHMENT_BYTES = 4 << 20
MAX_ATTACHMENTS = 32  # files in one message
MAX_NAME_CHARS = 255
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class NewAttachment:
    """A file to attach: its name (no folder), its type and the text a model reads of it, as UTF-8 bytes
    (a PDF's extracted text; see :mod:`specchat.attachments` for reading files)."""

    name: str
    mime: str
    data: bytes

    def checked(self) -> NewAttachment:
        """This file with its name cleaned (the last path part, no control characters), or ValueError."""
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise ValueError(f"an attachment's data must be bytes, got {type(self.data).__name__}")
        data = bytes(self.data)
        name = clean_attachment_name(self.name)
        if len(data) > MAX_ATTACHMENT_BYTES:
            raise ValueError(f"{name} is {_size(len(data))}, {_size(len(data) - MAX_ATTACHMENT_BYTES)} over the "
                             f"{_size(MAX_ATTACHMENT_BYTES)} a file may hold")
        mime = " ".join(str(self.mime).split()).lower() or "text/plain"
        return NewAttachment(name, mime[:MAX_NAME_CHARS], data)


def clean_attachment_name(name: object) -> str:
    """A file name as stored and shown: its last path part, control characters and outer spaces gone,
    at most :data:`MAX_NAME_CHARS` characters; ValueError for nothing left."""
    text = re.sub(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]", "", str(name)).replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not text or text in (".", ".."):
        raise ValueError(f"an attachment needs a file name, got {_shown(name)}")
    return text[:MAX_NAME_CHARS]


def check_attachments(files: Iterable[NewAttachment]) -> list[NewAttachment]:
    """The files of one message, each checked (:meth:`NewAttachment.checked`), within the message's caps."""
    out = [f.checked() for f in files]
    if len(out) > MAX_ATTACHMENTS:
        raise ValueError(f"a message may hold at most {MAX_ATTACHMENTS} files, not {len(out)}")
    total = sum(len(f.data) for f in out)
    if total > MAX_MESSAGE_ATTACHMENT_BYTES:
        raise ValueError(f"the files come to {_size(total)}; a message may hold at most "
                         f"{_size(MAX_MESSAGE_ATTACHMENT_BYTES)}")
    return out


def _size(n: int) -> str:
    """Bytes in words: "812 bytes", "200 KiB", "1.5 MiB"."""
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def is_sha256(text: object) -> bool:
    return isinstance(text, str) and _SHA256.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file in a message, as stored: its blob's key (``sha256``) and size; the text is
    :meth:`specchat.store.Store.attachment_data` (read separately: a chat's list of files stays small)."""

    id: int
    message_id: int
    position: int  # its place among the message's files, from 0
    name: str
    mime: str
    sha256: str  # the blob's key: the SHA-256 of its bytes, 64 lowercase hex digits
    size: int  # bytes of text
    created_at: float


def origin_chars(origins: str | Iterable[object]) -> str:
    """Compress token origins to 'd'/'t' chars.

    Takes a ready 'd'/'t' string or an iterable of origins such as the engine's
    ``TokenOrigin`` values ("draft" / "target").
    """
    if isinstance(origins, str):
        if origins.strip("dt"):
            raise ValueError(f"origins string may hold only 'd' and 't', got {origins!r}")
        return origins
    out = []
    for origin in origins:
        value = str(getattr(origin, "value", origin))
        if value in ("d", "draft"):
            out.append("d")
        elif value in ("t", "target"):
            out.append("t")
        else:
            raise ValueError(f"unknown token origin {origin!r}")
    return "".join(out)


# -- content spans: which characters of an answer came from accepted draft tokens ------------------
#
# A span string is runs of "d<n>" (n characters from accepted draft tokens) and "t<n>"
# (n characters the target sampled itself), in text order: "t12d5t3".  Appending two span
# strings is just concatenation (adjacent runs of one kind are merged when read), which is
# what lets a streaming answer append them in SQL as it appends its text.

_SPAN = re.compile(r"([dt])(\d+)")


def is_draft_text(origins: str | Iterable[object]) -> bool:
    """Whether a chunk of visible text counts as accepted draft text.

    The engine emits one event per origin, so a chunk is "draft" when it has origins and
    all of them are draft; text without origins (held back and flushed, or parsed out
    of the stream) counts as the target's.
    """
    chars = origin_chars(origins)
    return bool(chars) and not chars.strip("d")


def format_spans(runs: Iterable[tuple[int, bool]]) -> str:
    """(characters, from draft) runs as a span string."""
    return "".join(f"{'d' if draft else 't'}{n}" for n, draft in runs if n)


def parse_spans(spans: str) -> list[tuple[int, bool]]:
    """(characters, from draft) runs, adjacent runs of one kind merged; [] for a damaged string."""
    runs: list[tuple[int, bool]] = []
    at = 0
    for m in _SPAN.finditer(spans or ""):
        if m.start() != at:
            return []
        at = m.end()
        n, draft = int(m.group(2)), m.group(1) == "d"
        if runs and runs[-1][1] == draft:
            runs[-1] = (runs[-1][0] + n, draft)
        elif n:
            runs.append((n, draft))
    return runs if at == len(spans or "") else []


def not_sent(messages: Sequence[Message]) -> frozenset[int]:
    """The ids of the shown ``messages`` (a chat's, in order) that the latest finished answer's prompt left
    out: its stored ``left_out_span``, the very messages its context policy did not send.  Empty when it
    left none out, or is an answer from before spans were stored (its footer still says how many)."""
    last = next((m for m in reversed(messages) if m.role == "assistant" and m.stats is not None), None)
    if last is None or last.stats is None or last.stats.left_out_span is None:
        return frozenset()
    first, end = last.stats.left_out_span
    return frozenset(m.id for m in messages if first <= m.id <= end and m.id < last.id and m.role != "system")
