"""Qt-free core of the live telemetry panel: what speculation is doing, as numbers and plot series.

The GUI thread feeds the engine's events to one :class:`TelemetryRecorder` as the
generation worker delivers them, adds a :class:`MemorySample` from a
:class:`MemorySampler` about once a second, and a timer (10 to 30 Hz) reads an
immutable :class:`TelemetrySnapshot` to repaint the plots; nothing here repaints per
token.  :mod:`.export` writes the round-level records as CSV or JSON.  Per-task-type
totals are the store's job (:func:`specchat.store.task_table`), not repeated here.
"""

from .export import (
    ExportError,
    export_csv,
    export_json,
    export_rounds,
    telemetry_document,
    write_export,
    write_rounds_csv,
)
from .recorder import ALL_CHATS, TelemetryRecorder
from .records import (
    METRIC_DEFINITIONS,
    ROUND_FIELDS,
    AnswerRecord,
    FallbackMarker,
    MemorySeries,
    RoundRecord,
    RoundSeries,
    RunningNumbers,
    TelemetrySnapshot,
)
from .ring import RingBuffer
from .samplers import (
    NO_GPU,
    GpuMemory,
    MemorySample,
    MemorySampler,
    MemoryShare,
    NvmlSampler,
    RamSampler,
    default_sampler,
    estimated_shares,
)

__all__ = [
    "ALL_CHATS", "METRIC_DEFINITIONS", "NO_GPU", "ROUND_FIELDS", "AnswerRecord", "ExportError", "FallbackMarker",
    "GpuMemory", "MemorySample", "MemorySampler", "MemorySeries", "MemoryShare", "NvmlSampler", "RamSampler",
    "RingBuffer", "RoundRecord", "RoundSeries", "RunningNumbers", "TelemetryRecorder", "TelemetrySnapshot",
    "default_sampler", "estimated_shares", "export_csv", "export_json", "export_rounds", "telemetry_document",
    "write_export", "write_rounds_csv",
]
