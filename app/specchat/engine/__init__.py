"""Qt-free speculative decoding engine over llama-cpp-python.

Public surface: load a :class:`SpeculativePair`, call ``generate`` and consume
the frozen events of :mod:`specchat.engine.events`.
"""

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
from .settings import ControllerSettings, Drafter, Mode, SamplingSettings

__all__ = [
    "ControllerSettings", "Done", "Drafter", "Error", "Event", "Fallback", "GenerationStats", "Mode", "Prefilled",
    "RoundStats", "SamplingSettings", "StopReason", "TokenOrigin", "TokensEmitted",
]
