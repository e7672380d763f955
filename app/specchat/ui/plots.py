"""The telemetry plots, one :class:`PlotSpec` each: what the panel builds and paints, top to bottom.

The panel (:mod:`.telemetry_panel`) loops over :data:`PLOTS`: it makes each plot's items once
(curves, threshold lines, markers), colours them from the theme by role name
(``Theme.curve(role)``), and at each tick paints one plot from the recorder's snapshot
(:class:`~specchat.telemetry.records.TelemetrySnapshot`).  A new plot is one ``PlotSpec`` and
its line in :data:`PLOTS` (a new colour, if it needs one, is a role in ``theme.py``).

Plots on the ``rounds`` clock share one x axis (the round), drawn once under the lowest of
them; the ``time`` clock is the memory plot's (seconds), which a server backend may hide.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from PySide6.QtCore import Qt

from specchat.telemetry.records import TelemetrySnapshot

GIB = 1024**3

Part = str | tuple[str, str]  # a title word, or (word, colour role): the coloured words are the legend


def nice_ceiling(v: float) -> float:
    """The smallest of 1, 1.5, 2, 3, 4, 5, 6, 8 x 10^n at or above ``v``: an axis end that moves rarely."""
    if not math.isfinite(v) or v <= 0:
        return 1.0
    e = 10.0 ** math.floor(math.log10(v))
    return next(m * e for m in (1, 1.5, 2, 3, 4, 5, 6, 8, 10) if v <= m * e * (1 + 1e-9))


@dataclass(frozen=True, slots=True)
class Series:
    """One curve: its panel attribute, colour role, pen width, and its y data from a snapshot
    (None: nothing to draw now, e.g. VRAM without NVML)."""

    attr: str
    role: str
    y: Callable[[TelemetrySnapshot], np.ndarray | None]
    width: int = 1
    name: str | None = None  # pyqtgraph's item name
    fill: bool = False  # filled down to 0 in its colour (alpha 90)
    step: bool = False  # drawn as given (stepMode=None), as the K curve


@dataclass(frozen=True, slots=True)
class Threshold:
    """A horizontal line (dashed or dotted) at a value from the snapshot (None: hidden)."""

    attr: str
    role: str
    style: Qt.PenStyle
    value: Callable[[TelemetrySnapshot], float | None]
    label: str = ""  # a label on the line, in its colour
    hidden_at_first: bool = False


@dataclass(frozen=True, slots=True)
class Marks:
    """Hoverable spots (x, y, tip) from the snapshot, filled in the role's colour."""

    attr: str
    role: str
    spots: Callable[[TelemetrySnapshot], tuple[list[float], list[float], list[str]]]


@dataclass(frozen=True, slots=True)
class PlotSpec:
    key: str  # the panel keeps the plot as ``p_<key>``
    title: tuple[Part, ...]
    y_label: str
    series: tuple[Series, ...]
    y_range: Callable[[TelemetrySnapshot], tuple[float, float]]
    thresholds: tuple[Threshold, ...] = ()
    marks: tuple[Marks, ...] = ()
    clock: Literal["rounds", "time"] = "rounds"
    title_no_gpu: tuple[Part, ...] | None = None  # the title where no NVIDIA GPU is sampled
    help: str = ""  # the plot's tooltip: what it shows and what a good value looks like (README's words)


def _top(values: np.ndarray) -> float:
    return float(np.nanmax(values)) if len(values) else 0.0


def _speed_range(snap: TelemetrySnapshot) -> tuple[float, float]:
    return 0.0, nice_ceiling(1.05 * max(_top(snap.rounds.tok_s), snap.plain_rate or 0.0))


def _round_total_ms(snap: TelemetrySnapshot) -> np.ndarray:
    r = snap.rounds
    return (r.draft_s + r.verify_s + r.overhead_s) * 1e3


def _fallback_spots(snap: TelemetrySnapshot) -> tuple[list[float], list[float], list[str]]:
    marks = [m for m in snap.markers if not m.permanent]
    return [float(m.seq) for m in marks], [float(m.k) for m in marks], [m.reason for m in marks]


def _vram(snap: TelemetrySnapshot) -> np.ndarray | None:
    m = snap.memory
    return m.vram_used[:, 0] / GIB if m.vram_used.shape[1] else None


def _process_vram(snap: TelemetrySnapshot) -> np.ndarray | None:
    m = snap.memory
    return m.process_vram / GIB if m.vram_used.shape[1] else None


def _memory_range(snap: TelemetrySnapshot) -> tuple[float, float]:
    m = snap.memory
    top = float(m.rss.max())
    if m.vram_used.shape[1]:
        top = max(top, float(m.vram_used[:, 0].max()))
    return 0.0, nice_ceiling(1.05 * top / GIB)


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("speed", ("tok/s:", ("per round", "speed"), ("smoothed", "smooth"), ("plain", "plain")), "tok/s",
             (Series("c_speed", "speed", lambda s: s.rounds.tok_s, name="per round"),
              Series("c_smooth", "smooth", lambda s: s.rounds.tok_s_smooth, width=2, name="smoothed")),
             _speed_range,
             thresholds=(Threshold("plain_line", "plain", Qt.PenStyle.DashLine, lambda s: s.plain_rate or None,
                                   label="plain", hidden_at_first=True),),
             help=("<b>Decode tok/s</b> of each round (thin) and smoothed (thick): tokens after the first / decode "
                   "time. The dashed line is this pair's <b>plain</b> rate, learned from your answers with "
                   "speculation off once there are three of them.<br><b>Good:</b> above the dashed line, "
                   "where speculation pays (a multiplier above 1.00x).")),
    PlotSpec("acc", ("acceptance:", ("token", "token"), ("sequence", "sequence"), "· dotted: fallback"), "share",
             (Series("c_tok_acc", "token", lambda s: s.rounds.token_acceptance, width=2, name="token"),
              Series("c_seq_acc", "sequence", lambda s: s.rounds.sequence_acceptance, width=2, name="sequence")),
             lambda s: (0.0, 1.05),
             thresholds=(Threshold("tok_rail", "token", Qt.PenStyle.DotLine, lambda s: s.min_token_acceptance),
                         Threshold("seq_rail", "sequence", Qt.PenStyle.DotLine,
                                   lambda s: s.min_sequence_acceptance)),
             help=("<b>Token acceptance</b>: accepted draft tokens / drafted tokens. <b>Sequence acceptance</b>: "
                   "rounds whose whole draft was accepted / rounds with a draft; when it is high, the controller "
                   "drafts longer. Dotted: the fallback thresholds.<br><b>Good:</b> high and above the dotted "
                   "lines: at acceptance <i>a</i> a round yields (1 - a<sup>K+1</sup>) / (1 - a) tokens on "
                   "average; below them rounds are decoded plainly.")),
    PlotSpec("k", ("draft length K ·", ("fallback", "fallback"), "(hover)"), "K",
             (Series("c_k", "k", lambda s: s.rounds.k, step=True),),
             lambda s: (0.0, max(8.0, float(s.rounds.k.max()) if len(s.rounds) else 0.0) + 0.5),
             marks=(Marks("s_fallback", "fallback", _fallback_spots),),
             help=("<b>Draft length K</b>: how many tokens the draft proposed each round, as the controller "
                   "chose (0 means a plain round). A round yields 1 to K+1 tokens for about one target step plus "
                   "K draft steps. The marks are <b>fallbacks</b>: rounds decoded plainly because acceptance fell "
                   "below the thresholds (hover one for why).<br><b>Good:</b> K held up, few marks.")),
    PlotSpec("time", ("per round:", ("draft", "draft"), ("+ verify", "verify"), ("+ overhead", "overhead")), "ms",
             (Series("c_draft", "draft", lambda s: s.rounds.draft_s * 1e3, fill=True),
              Series("c_verify", "verify", lambda s: (s.rounds.draft_s + s.rounds.verify_s) * 1e3),
              Series("c_total", "overhead", _round_total_ms)),
             lambda s: (0.0, nice_ceiling(1.05 * _top(_round_total_ms(s)))),
             help=("<b>Time per round</b>, stacked: the draft proposing K tokens (filled), + the target verifying "
                   "them in one batch, + overhead.<br><b>Good:</b> verify costs little more than one plain target "
                   "step and the draft is a small part: then a round's extra tokens come almost free.")),
    PlotSpec("mem", ("memory:", ("RSS", "rss"), ("VRAM GPU 0", "vram"), ("this process", "pvram")), "GiB",
             (Series("c_rss", "rss", lambda s: s.memory.rss / GIB, width=2, name="process RSS"),
              Series("c_vram", "vram", _vram, width=2, name="VRAM used (GPU 0)"),
              Series("c_pvram", "pvram", _process_vram, name="VRAM, this process")),
             _memory_range, clock="time",
             title_no_gpu=("memory:", ("process RSS", "rss"), "(no NVIDIA GPU)"),
             help=("<b>Memory</b> over time (seconds): this process's RSS, and with an NVIDIA GPU the VRAM used on "
                   "GPU 0 and by this process (NVML). The lines below split it into target weights, draft "
                   "weights, KV caches and buffers.<br><b>Good:</b> flat while answering, with room left on the "
                   "machine.")),
)
