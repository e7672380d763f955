"""Qt-free speculative decoding engine over llama-cpp-python.

Public surface: load a :class:`SpeculativePair`, call ``generate`` and consume
the frozen events of :mod:`specchat.engine.events`.
"""

from collections.abc import Callable

from .events import (
    Done,
    Error,
    Event,
    Fallback,
    GenerationStats,
    Prefilled,
    RoundStats,
    StopReason,
    TokenOrigin,
    TokensEmitted,
)
from .settings import ControllerSettings, Drafter, Mode, SamplingSettings, StructuredOutput


def check_structured(structured: StructuredOutput, cancelled: Callable[[], bool] | None = None) -> None:
    """:func:`specchat.engine.grammar.check_structured`: a JSON schema or GBNF grammar parsed and
    exercised by llama.cpp in a bounded child process (no model), killed when ``cancelled()``
    turns true; :class:`~specchat.engine.settings.GrammarError` in one line if it fails.
    Imported when called, so that the settings and events stay free of llama.cpp."""
    from .grammar import check_structured as check

    check(structured, cancelled)


__all__ = [
    "ControllerSettings", "Done", "Drafter", "Error", "Event", "Fallback", "GenerationStats", "Mode", "Prefilled",
    "RoundStats", "SamplingSettings", "StopReason", "StructuredOutput", "TokenOrigin", "TokensEmitted",
    "check_structured",
]
