"""The records the store keeps: chat settings, messages and their statistics.

Frozen dataclasses, stored as rows and JSON; lenient when reading (a chat must
always open, even with settings written by a newer version).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from specchat import modes
from specchat.context_policy import POLICY_NAMES, ContextPolicy
from specchat.metrics import Counts, CountsView, PhaseSplit
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
        """Raise ValueError naming the first bad field."""
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

    def to_json(self) -> str:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sampling"}
        doc["target"] = str(self.target) if self.target else None
        doc["draft"] = str(self.draft) if self.draft else None
        sampling = {k: getattr(self.sampling, k) for k in _SAMPLING_FLAT}
        structured = self.sampling.structured
        doc |= sampling | {"structured_kind": structured.kind, "structured_text": structured.text}
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> ChatSettings:
        """Lenient: unknown keys are dropped; a damaged document gives the defaults.

        A chat must always open, even if its settings were written by a newer version
        or edited by hand; the user can fix the settings from the window.
        """
        try:
            doc = json.loads(text) if text else {}
            known = {f.name for f in fields(cls)} - {"sampling"}
            sampling = SamplingSettings(
                **{k: v for k, v in doc.items() if k in _SAMPLING_FLAT},
                structured=StructuredOutput(doc.get("structured_kind") or "", doc.get("structured_text") or ""))
            settings = cls(**{k: v for k, v in doc.items() if k in known}, sampling=sampling)
            settings.validate()
            return settings
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("chat settings unreadable (%s); using defaults", exc)
            return cls()


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", normalize_mode(self.mode))
        object.__setattr__(self, "fallbacks", tuple(self.fallbacks))
        object.__setattr__(self, "drafters", tuple((str(n), int(d), int(a)) for n, d, a in self.drafters))
        object.__setattr__(self, "notes", tuple(self.notes))

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
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> MessageStats | None:
        """Lenient: missing keys take their defaults, unknown ones are ignored; unreadable is None."""
        if not text:
            return None
        try:
            doc = json.loads(text)
            return cls(
                counts=Counts.from_dict(doc.get("counts") or {}),
                mode=str(doc.get("mode") or ""),
                stop_reason=str(doc.get("stop_reason") or ""),
                fallbacks=tuple(str(f) for f in doc.get("fallbacks") or ()),
                error=str(doc.get("error") or ""),
                phases=PhaseSplit.from_dict(doc.get("phases")),
                structured=str(doc.get("structured") or ""),
                drafters=tuple((str(n), int(d), int(a)) for n, d, a in doc.get("drafters") or ()),
                notes=tuple(str(n) for n in doc.get("notes") or ()),
                n_ctx=max(0, int(doc.get("n_ctx") or 0)),
                left_out=max(0, int(doc.get("left_out") or 0)),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("message stats unreadable (%s)", exc)
            return None

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
                   drafters=tuple(getattr(stats, "drafters", ())), notes=tuple(getattr(stats, "notes", ())))


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
