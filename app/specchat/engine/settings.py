"""Settings the engine takes: sampling (with structured output) and the draft-length controller.

Plain frozen dataclasses with defaults; the UI and the config file build them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specchat.errors import UserError
from specchat.modes import Drafter, Mode  # the names live in one leaf (specchat/modes.py)

__all__ = ["MAX_STRUCTURED_BYTES", "STRUCTURED_LABELS", "ControllerSettings", "Drafter", "GrammarError", "Mode",
           "SamplingSettings", "Structured",
           "StructuredOutput"]


class GrammarError(UserError, ValueError):
    """A JSON schema or GBNF grammar that cannot be used; the message is one line naming it."""


class Structured(StrEnum):
    """What constrains an answer's text (stored with a chat as its ``structured_kind``)."""

    NONE = ""
    JSON_SCHEMA = "json_schema"
    GRAMMAR = "grammar"  # GBNF, llama.cpp's grammar language


STRUCTURED_LABELS = {Structured.NONE: "", Structured.JSON_SCHEMA: "JSON schema", Structured.GRAMMAR: "GBNF grammar"}
# The largest schema or grammar a user may give.  Real JSON schemas are a few KiB; llama.cpp
# parses a 256 KiB grammar in ~10 ms, and engine/grammar.py bounds what costs more than size.
MAX_STRUCTURED_BYTES = 256 << 10


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """A JSON schema or a GBNF grammar the answer must follow (``kind`` "" : none)."""

    kind: str = ""
    text: str = ""

    def __post_init__(self) -> None:
        kind = str(getattr(self.kind, "value", self.kind) or "").strip().lower()
        object.__setattr__(self, "kind", kind)

    @property
    def active(self) -> bool:
        return bool(self.kind)

    @property
    def label(self) -> str:
        """"JSON schema", "GBNF grammar" or "" (what a footer or an error names)."""
        return STRUCTURED_LABELS.get(Structured(self.kind), "") if self.kind in _KINDS else self.kind

    def validate(self) -> None:
        """The cheap checks (kind, size, text present); :func:`check_structured` parses it too."""
        if self.kind not in _KINDS:
            raise GrammarError(f"structured output must be one of: none, json_schema, grammar (not {self.kind!r})")
        if not self.active:
            return
        if not self.text.strip():
            raise GrammarError(f"the {self.label} is empty: give its text or choose no structured output")
        size = len(self.text.encode("utf-8", errors="surrogatepass"))
        if size > MAX_STRUCTURED_BYTES:
            raise GrammarError(f"the {self.label} is {size} bytes (at most {MAX_STRUCTURED_BYTES >> 10} KiB): "
                               "shorten it")


_KINDS = frozenset(k.value for k in Structured)


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int = 0xC0FFEE
    structured: StructuredOutput = field(default_factory=StructuredOutput)  # a JSON schema or grammar, or none

    @classmethod
    def from_chat(cls, chat: Any) -> SamplingSettings:
        """From a chat's settings (``specchat.store.ChatSettings``; duck-typed, the engine does not
        import the store): its sampling fields and its structured output."""
        return cls(temperature=chat.temperature, top_k=chat.top_k, top_p=chat.top_p, min_p=chat.min_p,
                   repeat_penalty=chat.repeat_penalty, seed=chat.seed,
                   structured=StructuredOutput(getattr(chat, "structured_kind", ""),
                                               getattr(chat, "structured_text", "")))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.min_p < 1:
            raise ValueError("min_p must be in [0, 1)")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0 (0 = off)")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat_penalty must be > 0")
        self.structured.validate()


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    k_max: int = 8  # longest draft
    k_min: int = 1  # shortest draft in the forced modes (draft, lookup)
    p_min: float = 0.6  # the draft stops early when its top probability is below this
    lookup_ngram: int = 3  # longest n-gram prompt lookup matches
    # longest prompt-lookup draft: behind a long match (a copy) most of 16 tokens are accepted, and on a
    # GPU a 16-token verify costs about what 8 do (H100: 2.4x one token for 8 to 16)
    lookup_k_max: int = 16
    window_rounds: int = 16  # rounds in the acceptance window of the guard rails
    min_token_acceptance: float = 0.5  # below this over the window: fall back
    min_sequence_acceptance: float = 0.6  # below this over the window: fall back
    cooldown_tokens: int = 64  # plain tokens after a fallback before trying again
    fallback_warning_share: float = 0.15  # warn when more rounds than this fell back
    probe_interval_tokens: int = 64  # auto: re-probe a drafter it has stopped using (x4 for a model)
    min_gain: float = 1.05  # auto speculates only if it expects this speed-up (lookup mode: up to 1.0; 0: always)
    explore_z: float = 1.0  # auto plans with the acceptance estimate plus this many standard deviations

    def validate(self) -> None:
        if not 1 <= self.k_min <= self.k_max <= 32:
            raise ValueError("need 1 <= k_min <= k_max <= 32")
        if not 1 <= self.lookup_k_max <= 32:
            raise ValueError("need 1 <= lookup_k_max <= 32")
        for name in ("p_min", "min_token_acceptance", "min_sequence_acceptance", "fallback_warning_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1]")
