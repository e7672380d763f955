"""The records the store keeps: chat settings, messages and their statistics.

Frozen dataclasses, stored as rows and JSON; lenient when reading (a chat must
always open, even with settings written by a newer version).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .task_stats import TASK_TAGS

log = logging.getLogger(__name__)

SPECULATION_MODES = ("off", "draft", "lookup", "auto")
ROLES = ("user", "assistant", "system")
ANSWER_STATES = ("streaming", "done", "stopped", "error")
FINAL_STATES = ("done", "stopped", "error")


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """Everything that decides how a chat is answered; saved with the chat.

    Stored as JSON so that a new field needs no migration: a missing key takes the
    default, an unknown key (from a newer version) is ignored.
    """

    target: Path | None = None  # target model file
    draft: Path | None = None  # draft model file, None: no draft model
    speculation: str = "auto"  # "off" | "draft" | "lookup" | "auto"
    reasoning: bool = True  # let models that can think do so
    system_prompt: str = ""
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int = 0xC0FFEE
    max_tokens: int = 2048
    task: str = "chat"  # one of TASK_TAGS or the user's own text

    def __post_init__(self) -> None:
        # Normalise what users and config files type, so equal settings compare equal.
        for name in ("target", "draft"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value) if str(value) else None)
        object.__setattr__(self, "speculation", str(self.speculation).strip().lower())
        object.__setattr__(self, "task", normalize_task_tag(self.task))

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if self.speculation not in SPECULATION_MODES:
            raise ValueError(f"speculation must be one of {', '.join(SPECULATION_MODES)}")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0 (0 = off)")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.min_p < 1:
            raise ValueError("min_p must be in [0, 1)")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat_penalty must be > 0")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")

    def to_json(self) -> str:
        doc = asdict(self)
        doc["target"] = str(self.target) if self.target else None
        doc["draft"] = str(self.draft) if self.draft else None
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> ChatSettings:
        """Lenient: unknown keys are dropped; a damaged document gives the defaults.

        A chat must always open, even if its settings were written by a newer version
        or edited by hand; the user can fix the settings from the window.
        """
        try:
            doc = json.loads(text) if text else {}
            known = {f.name for f in fields(cls)}
            settings = cls(**{k: v for k, v in doc.items() if k in known})
            settings.validate()
            return settings
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("chat settings unreadable (%s); using defaults", exc)
            return cls()


def normalize_task_tag(tag: object) -> str:
    """Built-in tags are matched case-insensitively; other text is kept, trimmed; empty -> "chat"."""
    text = str(tag or "").strip()
    if not text:
        return "chat"
    return text.casefold() if text.casefold() in TASK_TAGS else text


@dataclass(frozen=True, slots=True)
class MessageStats:
    """Totals of one finished answer, with DESIGN.md's metric definitions.

    The round-level counts (rounds_with_draft, rounds_fully_accepted, decode_s) are kept
    next to the ratios so that answers can be summed exactly (see task_stats.py).
    """

    tokens: int = 0
    decode_tok_s: float = 0.0
    prefill_tok_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    token_acceptance: float | None = None
    sequence_acceptance: float | None = None
    mean_k: float = 0.0
    mode: str = ""
    stop_reason: str = ""
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    decode_s: float = 0.0
    prompt_tokens: int = 0
    rounds: int = 0
    rounds_with_draft: int = 0
    rounds_fully_accepted: int = 0
    fallbacks: tuple[str, ...] = ()
    error: str = ""  # the message shown to the user when the answer ended in an error

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> MessageStats | None:
        if not text:
            return None
        try:
            doc = json.loads(text)
            known = {f.name for f in fields(cls)}
            doc = {k: v for k, v in doc.items() if k in known}
            if "fallbacks" in doc:
                doc["fallbacks"] = tuple(doc["fallbacks"] or ())
            return cls(**doc)
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("message stats unreadable (%s)", exc)
            return None

    @classmethod
    def from_generation(cls, stats: Any, stop_reason: object = "", error: str = "") -> MessageStats:
        """Build from the engine's ``GenerationStats`` (read by attribute name).

        Duck-typed so the store does not depend on the engine package.
        """
        return cls(
            tokens=stats.tokens,
            decode_tok_s=stats.decode_tok_s,
            prefill_tok_s=stats.prefill_tok_s,
            drafted=stats.drafted,
            accepted=stats.accepted,
            token_acceptance=stats.token_acceptance,
            sequence_acceptance=stats.sequence_acceptance,
            mean_k=stats.mean_k,
            mode=str(stats.mode),
            stop_reason=str(stop_reason),
            draft_s=stats.draft_s,
            verify_s=stats.verify_s,
            overhead_s=stats.overhead_s,
            decode_s=stats.decode_s,
            prompt_tokens=stats.prompt_tokens,
            rounds=stats.rounds,
            rounds_with_draft=stats.rounds_with_draft,
            rounds_fully_accepted=stats.rounds_fully_accepted,
            fallbacks=tuple(getattr(stats, "fallbacks", ())),
            error=error,
        )


@dataclass(frozen=True, slots=True)
class Chat:
    id: int
    title: str
    created_at: float  # seconds since the epoch
    updated_at: float  # last activity (a message added or an answer finished)
    settings: ChatSettings = field(default_factory=ChatSettings)


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
