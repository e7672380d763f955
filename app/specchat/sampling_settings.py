"""How an answer's tokens are chosen: sampling and structured output (a JSON schema or a GBNF grammar).

One type for the one set of settings: a chat stores its :class:`SamplingSettings` (the store's
``ChatSettings.sampling``), the engine samples with it, a server client sends it, and the
command line builds it from flags.  A Qt-free leaf every layer may import (the store does
not import the engine, so the type lives here; ``specchat.engine.settings`` re-exports it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from specchat.errors import UserError


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
        if not isinstance(self.text, str):
            raise GrammarError(f"the structured output's text must be text, not {type(self.text).__name__}")
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

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        """ValueError (one line naming the field) unless every number is of its declared type, finite and
        in its range, and the structured output is sound.  The one gate: the command line, a chat's stored
        settings, the settings dialog, the engine and a server's request all call it, so ``nan`` or
        ``inf`` (which no comparison below refuses: every one is False) never reaches a sampler."""
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, not {_shown(value)}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, not {value}")
        for name, (lo, hi, what) in _INT_FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number, not {_shown(value)}")
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be {what}, not {_shown(value)}")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.min_p < 1:
            raise ValueError("min_p must be in [0, 1)")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat_penalty must be > 0")
        if not isinstance(self.structured, StructuredOutput):
            raise ValueError(f"structured must be a StructuredOutput, not {_shown(self.structured)}")
        self.structured.validate()


_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "repeat_penalty")
INT32_MAX = (1 << 31) - 1  # llama.cpp takes top_k and the repeat window as int32_t
# (lowest, highest, the range in words): the seed is any 64-bit value (the engine takes its low 32 bits,
# a server its own width), so a chat stored with any seed a user typed still reads
_INT_FIELDS = {"top_k": (0, INT32_MAX, f"from 0 (off) to {INT32_MAX}"),
               "repeat_last_n": (-1, INT32_MAX, f"from -1 (the whole context) to {INT32_MAX}"),
               "seed": (-(1 << 63), (1 << 64) - 1, "a 64-bit whole number")}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
