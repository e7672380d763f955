"""The live telemetry dock: is speculation paying, right now?

Data arrives at token rate into a :class:`TelemetryRecorder` (fed by the main
window); this panel paints at frame rate: a timer takes an immutable snapshot
and calls ``setData`` on curve items made once (pyqtgraph's fast path, with
clip-to-view and downsampling).  Memory is sampled once a second.

Each tick refreshes one plot (round-robin over those whose data changed), so no
single tick holds the event loop for long, and the tick rate adapts so that
painting takes at most ``PAINT_BUDGET`` of the time: on two busy cores a paint
of all five plots took 50-100 ms, which froze typing and the streaming answer.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.engine.contention import PAUSED
from specchat.metrics import runs_phrase
from specchat.services.answers import API_CHAT
from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.export import ExportError, export_rounds, write_export
from specchat.telemetry.samplers import NO_GPU, MemorySampler, default_sampler

from .plots import PLOTS, PlotSpec, nice_ceiling
from .theme import Theme, controller, current

if TYPE_CHECKING:
    from specchat.backends.protocol import ServerReport
    from specchat.workers.generation import PairInfo

REPAINT_MS = 20  # one plot per tick: every plot at 10 Hz where painting is cheap (DESIGN: 10 to 30 Hz)
MAX_REPAINT_MS = 500
PAINT_BUDGET = 0.015  # painting may take at most this share of the time: on a CPU-only machine a GUI millisecond stalls both decode threads (measured: a 3% budget cost 2-5% decode speed)
MEMORY_MS = 1000
NUMBERS_S = 0.5  # the running numbers: twice a second is plenty to read, and each costs a rich-text layout
GIB = 1024**3
PLOTS_MIN_WIDTH = 360  # docked beside the chat, the window still fits a 1280 px screen (at most 1000 px wide)
# the running numbers' tooltip, in README's words ("What the numbers mean"); each plot's is its PlotSpec.help
NUMBERS_HELP = ("<b>The answer now</b>: tokens; <b>decode tok/s</b> (tokens after the first / decode time); "
                "<b>× vs plain</b>: speculative decode tok/s / plain decode tok/s for the same pair on this "
                "machine, above 1.00x speculation pays; <b>acceptance</b>: accepted draft tokens / drafted tokens "
                "(token) and rounds whose whole draft was accepted / rounds with a draft (sequence), higher is "
                "better; <b>mean K</b>: the average draft length the controller chose (0 means a plain round); "
                "<b>fallback</b>: rounds decoded plainly because acceptance fell below the thresholds, lower is "
                "better.")
__all__ = ["TelemetryPanel", "nice_ceiling", "stepped_window"]


def _fmt(v: float | None, spec: str, none: str = "–") -> str:
    return none if v is None else format(v, spec)


def _title(theme: Theme, *parts: str | tuple[str, str]) -> str:
    """A plot title whose coloured words are the legend (a LegendItem costs a paint of its own);
    a part (word, curve) takes the curve's colour in ``theme``."""
    return " ".join(p if isinstance(p, str) else f'<span style="color:{theme.curve(p[1])}">{p[0]}</span>'
                    for p in parts)


def stepped_window(first: float, last: float, minimum: float) -> tuple[float, float]:
    """An x range covering [first, last] whose ends move in coarse steps.

    Axes regenerate their ticks and text whenever their range changes; that was most of
    the cost of a paint, so a growing series gets a range that changes a few times per
    answer rather than every round.
    """
    span = nice_ceiling(max(last - first, minimum))
    lo = math.floor(first / (span / 5)) * (span / 5)
    if lo + span < last:
        span = nice_ceiling(last - lo)
    return lo, lo + span


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _TimedPlots(pg.GraphicsLayoutWidget):
    """The plot area, remembering how long its paints take (EMA, in seconds)."""

    paint_s = 0.0

    def paintEvent(self, event) -> None:
        t0 = time.perf_counter()
        super().paintEvent(event)
        dt = time.perf_counter() - t0
        self.paint_s = dt if not self.paint_s else 0.8 * self.paint_s + 0.2 * dt


class TelemetryPanel(QDockWidget):
    warning = Signal(str)  # what to tell the user in the status bar
    said = Signal(str)  # where an export or a saved image went, or why it could not (one line, the status bar)

    def __init__(self, recorder: TelemetryRecorder, sampler: MemorySampler | None = None, parent=None) -> None:
        super().__init__("Telemetry", parent)
        self.setObjectName("telemetry-dock")
        self.recorder = recorder
        self.sampler = sampler or default_sampler()
        self.paused = False
        self._version = -1
        self._numbers_at = 0.0
        self._shares: tuple = ()
        self.remote: ServerReport | None = None  # the loaded server's; None: this machine's pair
        body = QWidget()
        v = QVBoxLayout(body)
        v.setContentsMargins(4, 4, 4, 4)
        self.numbers = QLabel()
        self.numbers.setWordWrap(True)
        self.numbers.setTextFormat(Qt.TextFormat.RichText)
        # fixed heights: a label that changes its size hint every frame would re-lay out the whole
        # window, conversation included (measured: 100+ ms frames on two cores)
        self.numbers.setFixedHeight(4 * self.numbers.fontMetrics().lineSpacing())
        self.numbers.setToolTip(NUMBERS_HELP)
        v.addWidget(self.numbers)
        # what a server backend cannot feed, one line each; set when a backend loads, not per frame
        self.backend_notes = QLabel()
        self.backend_notes.setWordWrap(True)
        self.backend_notes.setTextFormat(Qt.TextFormat.RichText)
        self.backend_notes.hide()
        v.addWidget(self.backend_notes)
        theme = current()
        pg.setConfigOptions(antialias=False, background=theme.plot_bg, foreground=theme.plot_fg)
        self.plots = _TimedPlots()
        self.plots.setMinimumWidth(PLOTS_MIN_WIDTH)
        v.addWidget(self.plots, 1)
        self.memory_label = QLabel()
        self.memory_label.setWordWrap(True)
        self.memory_label.setTextFormat(Qt.TextFormat.RichText)
        self.memory_label.setFixedHeight(4 * self.memory_label.fontMetrics().lineSpacing())
        self.memory_label.setToolTip(next(spec.help for spec in PLOTS if spec.clock == "time"))
        v.addWidget(self.memory_label)
        row = QHBoxLayout()
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(self._pause)
        self.png_button = QPushButton("Save PNG…")
        self.png_button.clicked.connect(self._save_png)
        self.export_button = QPushButton("Export rounds…")
        self.export_button.clicked.connect(self._export)
        for b in (self.pause_button, self.png_button, self.export_button):
            row.addWidget(b)
        v.addLayout(row)
        self.setWidget(body)
        self._build_plots()
        self.set_theme(theme)
        controller().changed.connect(self.set_theme)
        # the timers start when the panel shows and stop when it hides (showEvent, hideEvent)
        self._timer = QTimer(self, interval=REPAINT_MS)
        self._timer.timeout.connect(self._frame)
        self._mem_timer = QTimer(self, interval=MEMORY_MS)
        self._mem_timer.timeout.connect(self.sample_memory)
        self.sample_memory()

    # -- plots, made once ---------------------------------------------------------------

    def _plot(self, row: int, y_label: str) -> pg.PlotItem:
        """A plot made once; its title (the legend) and colours come from set_theme."""
        p = self.plots.addPlot(row=row, col=0)
        p.setLabel("left", y_label)
        # a fixed axis width: ticks that grow a digit would otherwise re-lay out and repaint all plots
        p.getAxis("left").setWidth(52)
        p.getAxis("left").enableAutoSIPrefix(False)
        # no grid: the axes draw grid lines as part of their QPicture, and that replay was
        # 80% of a paint (61 ms vs 14 ms for the five plots, offscreen, idle machine)
        p.setMenuEnabled(False)  # five context menus cost 80+ ms to polish on first show; PNG has its button
        # live monitors: the panel sets the ranges (stepped, see stepped_window), no pan or zoom
        p.setMouseEnabled(x=False, y=False)
        p.hideButtons()
        p.disableAutoRange()
        p.setClipToView(True)
        p.setDownsampling(auto=True, mode="peak")
        return p

    def _set_range(self, plot: pg.PlotItem, x: tuple[float, float], y: tuple[float, float]) -> None:
        """Set a plot's range only when it changed: a new range means new ticks and text."""
        if self._ranges.get(id(plot)) != (x, y):
            self._ranges[id(plot)] = (x, y)
            plot.setRange(xRange=x, yRange=y, padding=0)

    @staticmethod
    def _rounds_window(snap) -> tuple[float, float]:
        seq = snap.rounds.seq
        return stepped_window(float(seq[0]), float(seq[-1]), 20) if len(seq) else (0.0, 20.0)

    def _build_plots(self) -> None:
        """Every plot of :data:`~.plots.PLOTS`, top to bottom, with its items made once (kept as
        attributes by the names the specs give: ``p_<key>``, the curves, lines and marks)."""
        self._ranges: dict[int, tuple] = {}
        gpu = self.sampler.description != NO_GPU
        self._specs: list[PlotSpec] = list(PLOTS)
        self._plot_items: list[pg.PlotItem] = []
        self._titles = [spec.title if gpu or spec.title_no_gpu is None else spec.title_no_gpu for spec in PLOTS]
        for row, spec in enumerate(PLOTS):
            p = self._plot(row, spec.y_label)
            p.setToolTip(spec.help)  # hovering the plot says what it shows and what good looks like
            for s in spec.series:
                opts: dict = {"stepMode": None} if s.step else {"fillLevel": 0} if s.fill else {}
                setattr(self, s.attr, p.plot(**({"name": s.name} if s.name else {}), **opts))
            for th in spec.thresholds:
                line = pg.InfiniteLine(angle=0, **({"label": th.label, "labelOpts": {"position": 0.05}}
                                                   if th.label else {}))
                if th.hidden_at_first:
                    line.hide()
                p.addItem(line)
                setattr(self, th.attr, line)
            for mk in spec.marks:
                spots = pg.ScatterPlotItem(size=10, hoverable=True, tip=lambda x, y, data: str(data))
                p.addItem(spots)
                setattr(self, mk.attr, spots)
            setattr(self, f"p_{spec.key}", p)
            self._plot_items.append(p)
        # the round plots share one x axis (rounds), drawn once under the lowest of them
        rounds = [p for p, spec in zip(self._plot_items, PLOTS, strict=True) if spec.clock == "rounds"]
        for p in rounds[:-1]:
            p.hideAxis("bottom")
        if rounds:
            rounds[-1].setLabel("bottom", "round")
        for p, spec in zip(self._plot_items, PLOTS, strict=True):
            if spec.clock == "time":
                p.setLabel("bottom", "s")
        self.p_mem: pg.PlotItem = next(p for p, spec in zip(self._plot_items, PLOTS, strict=True)
                                       if spec.clock == "time")
        for p in self._plot_items:
            self._set_range(p, (0.0, 20.0), (0.0, 1.0))
        # not x-linked: a link makes every plot repaint when one's range grows
        self._painted: list[object] = [None] * len(self._specs)  # what each plot last showed
        self._next = 0

    def set_theme(self, theme: Theme) -> None:
        """Colour the plots made once (background, axes, titles, curves) for ``theme``; adds no item."""
        self.plots.setBackground(theme.plot_bg)
        for plot, parts in zip(self._plot_items, self._titles, strict=True):
            plot.setTitle(_title(theme, *parts), color=theme.plot_fg, size="9pt")
            for side in ("left", "bottom"):
                plot.getAxis(side).setPen(theme.plot_fg)
                plot.getAxis(side).setTextPen(theme.plot_fg)
        for spec in self._specs:
            for s in spec.series:
                curve = getattr(self, s.attr)
                curve.setPen(pg.mkPen(theme.curve(s.role), width=s.width))
                if s.fill:
                    fill = pg.mkColor(theme.curve(s.role))
                    fill.setAlpha(90)
                    curve.setBrush(pg.mkBrush(fill))
            for th in spec.thresholds:
                line = getattr(self, th.attr)
                line.setPen(pg.mkPen(theme.curve(th.role), style=th.style))
                if th.label:
                    line.label.setColor(theme.curve(th.role))
            for mk in spec.marks:
                getattr(self, mk.attr).setBrush(pg.mkBrush(theme.curve(mk.role)))
        self._painted = [None] * len(self._specs)  # repaint every plot with the new colours

    # -- painting --------------------------------------------------------------------------

    def _frame(self) -> None:
        """Timer tick: refresh the next plot whose data changed, and the numbers.

        The interval keeps painting under PAINT_BUDGET of the time: every millisecond the
        GUI thread paints is one a decode thread may wait for a core (or for the GIL).
        """
        if self.paused or not self.isVisible():
            return
        t0 = time.perf_counter()
        snap = self.recorder.snapshot()
        if snap.version != self._version and t0 - self._numbers_at >= NUMBERS_S:
            self._version = snap.version
            self._numbers_at = t0
            self.numbers.setText(self._numbers_html(snap))
        n = len(self._specs)
        for step in range(n):
            i = (self._next + step) % n
            key = self._data_key(i, snap)
            if self._painted[i] != key:
                self._paint(i, snap)
                self._painted[i] = key
                self._next = (i + 1) % n
                break
        cost = (time.perf_counter() - t0) + self.plots.paint_s
        self._timer.setInterval(int(min(MAX_REPAINT_MS, max(REPAINT_MS, 1e3 * cost / PAINT_BUDGET))))

    def repaint_now(self) -> None:
        """Bring every plot and number up to date at once (resume, tests, Save PNG)."""
        if self.paused:
            return
        snap = self.recorder.snapshot()
        self._version = snap.version
        for i in range(len(self._specs)):
            self._paint(i, snap)
            self._painted[i] = self._data_key(i, snap)
        self.numbers.setText(self._numbers_html(snap))

    def _data_key(self, group: int, snap) -> tuple:
        """What a plot shows, in brief: a memory sample does not repaint the round plots."""
        if self._specs[group].clock == "time":
            m = snap.memory
            return (len(m), float(m.t[-1]) if len(m) else None)
        r = snap.rounds
        return (len(r), int(r.seq[-1]) if len(r) else None, snap.plain_rate, len(snap.markers),
                snap.min_token_acceptance, snap.min_sequence_acceptance)

    def _paint(self, group: int, snap) -> None:
        """One plot from the snapshot, as its spec says: curves, lines, marks, then its range."""
        spec, plot = self._specs[group], self._plot_items[group]
        if spec.clock == "time":
            m = snap.memory
            if not len(m) or plot.scene() is None:  # nothing sampled yet, or hidden (a server backend)
                return
            x = m.t - m.t[0]
            x_range = stepped_window(0.0, float(x[-1]), 60)
        else:
            x = snap.rounds.seq.astype(float)
            x_range = self._rounds_window(snap)
        for s in spec.series:
            y = s.y(snap)
            if y is not None:
                getattr(self, s.attr).setData(x, y)
        for th in spec.thresholds:
            line, value = getattr(self, th.attr), th.value(snap)
            if value is None:
                line.hide()
            else:
                line.setValue(value)
                if th.hidden_at_first:
                    line.show()
        for mk in spec.marks:
            xs, ys, tips = mk.spots(snap)
            getattr(self, mk.attr).setData(xs, ys, data=tips)
        self._set_range(plot, x_range, spec.y_range(snap))

    def _numbers_html(self, snap) -> str:
        a = snap.answer
        if a is None:
            return "<i>No answer yet: numbers appear while the next answer streams.</i>"
        mult = _fmt(a.multiplier, ".2f") + "×" if a.multiplier is not None else "–"
        whose = "<b>API request</b> · " if snap.answer_chat_id == API_CHAT else ""
        return (f"{whose}<b>{a.tokens}</b> tokens · <b>{_fmt(a.tok_s, '.1f')}</b> tok/s · "
                f"<b>{mult}</b> vs plain{_plain_note(snap)} · "
                f"acceptance <b>{_fmt(a.token_acceptance, '.0%')}</b> token / "
                f"<b>{_fmt(a.sequence_acceptance, '.0%')}</b> sequence · mean K <b>{_fmt(a.mean_k, '.1f')}</b> · "
                f"fallback <b>{_fmt(a.fallback_share, '.0%')}</b> of rounds" + _phases_html(a.phases))

    def sample_memory(self) -> None:
        s = self.sampler.sample()
        self.recorder.record_memory(s)
        parts = [f"RSS {s.rss / GIB:.2f} GiB", f"RAM free {s.ram_available / GIB:.1f} GiB"]
        for g in s.gpus:
            parts.append(f"{g.name}: {g.used / GIB:.1f}/{g.total / GIB:.1f} GiB"
                         + (f" (this process {g.process_used / GIB:.2f})" if g.process_used is not None else ""))
        text = f"{self.sampler.description}: " + " · ".join(parts)
        if self.remote is not None:
            text = "this machine (the app; the server's memory is its own): " + text
        if self._shares:
            text += "<br>estimate: " + " · ".join(f"{sh.label} {sh.bytes / GIB:.2f} GiB ({sh.share:.0%})"
                                                  for sh in self._shares)
        self.memory_label.setText(text)

    def set_memory_shares(self, shares) -> None:
        """The loaded pair's estimated memory, split into target/draft weights, KV caches, buffers."""
        self._shares = tuple(shares)
        self.sample_memory()

    @property
    def memory_plot_shown(self) -> bool:
        return self.p_mem.scene() is not None

    def set_backend(self, info: PairInfo | None) -> None:
        """The loaded backend (None: none is, since a load failed): a server hides what it cannot feed
        and says so; a local pair, or none, restores it all.

        This machine's memory says nothing of a server's, so the memory plot shows only where
        the server's box reports its GPU memory (a dcgm-exporter URL that answered).
        """
        server = info.server if info is not None else None
        self.remote = server
        self._show_memory_plot(server is None or server.gpu_memory)
        self.sample_memory()  # the memory line says whose memory it is
        if server is None:
            self.backend_notes.clear()
            self.backend_notes.hide()
            return
        lines = [f"<b>On a server</b>: {_esc(server.summary)}"]
        lines += [f"· {_esc(n)}" for n in server.notes]
        self.backend_notes.setText("<br>".join(lines))
        # a height fixed per backend (not per frame): each line may wrap once in the dock's width
        self.backend_notes.setFixedHeight(min(12, 2 * len(lines)) * self.backend_notes.fontMetrics().lineSpacing())
        self.backend_notes.show()

    def _show_memory_plot(self, show: bool) -> None:
        """Take the memory plot out of the layout (the round plots get its room), or put it back."""
        if show == self.memory_plot_shown:
            return
        if show:
            row = self._plot_items.index(self.p_mem)
            self.plots.addItem(self.p_mem, row=row, col=0)
            self._painted[row] = None  # repaint it with what it missed
        else:
            self.plots.removeItem(self.p_mem)

    # -- buttons ---------------------------------------------------------------------------

    def _pause(self, on: bool) -> None:
        self.paused = on
        self.pause_button.setText("Resume" if on else "Pause")
        if not on:
            self.repaint_now()

    def save_png(self, path: str) -> str:
        """The plots as a PNG at ``path`` (a regular file only, written atomically); the line that says
        where it went or why not, also emitted as :attr:`said`."""
        self.repaint_now()
        image = QByteArray()
        buffer = QBuffer(image)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        self.plots.grab().save(buffer, "PNG")
        buffer.close()
        return self._tell(lambda: f"saved the plots to {write_export(path, bytes(image.data()))}")

    def export_rounds(self, path: str) -> str:
        """Every round since start to ``path`` (JSON for a ``.json`` name, else CSV); the line that says
        where they went or why not, also emitted as :attr:`said`."""
        return self._tell(lambda: export_rounds(self.recorder, path))

    def _tell(self, do) -> str:  # noqa: ANN001 (the export, returning its line)
        try:
            line = do()
        except ExportError as exc:
            line = str(exc)
        self.said.emit(line)
        return line

    def _save_png(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save plots", "specchat-telemetry.png", "PNG (*.png)")
        if path:
            self.save_png(path)

    def _export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export rounds since start", "specchat-rounds.csv",
                                              "CSV (*.csv);;JSON (*.json)")
        if path:
            self.export_rounds(path)

    # -- shown or hidden ----------------------------------------------------------------------
    # The timers run while the panel is shown and stop while it is hidden, whatever shows or hides
    # it: View → Telemetry panel, the dock's close button (a close is a hide), a saved layout, the
    # window closing.  Stopping them in closeEvent alone left them stopped for good after the close
    # button: the panel came back showing the previous answer as if it were current.

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._timer.isActive():
            self._timer.setInterval(REPAINT_MS)
            self._timer.start()
            self._mem_timer.start()
            self.sample_memory()
            self.repaint_now()  # what it missed while hidden, at once

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self._timer.stop()
        self._mem_timer.stop()

    @property
    def live(self) -> bool:
        """Whether the panel refreshes itself (its timers run)."""
        return self._timer.isActive() and self._mem_timer.isActive()


def _plain_note(snap) -> str:
    """Why there is no multiplier: the machine is busy (figures paused), or too few plain runs of
    this pair (said as everywhere else: "2 of 3 plain runs")."""
    if snap.busy:
        return f" (<b>{PAUSED}</b>: {snap.busy})"
    if snap.plain_rate:
        return ""
    return f" ({runs_phrase(snap.plain_answers)})"


def _phases_html(phases) -> str:
    """' · reasoning 41% / answer 83% accepted · 17.9 / 25.1 tok/s' when the answer reasoned (it lowers acceptance)."""
    if not phases.has_reasoning:
        return ""
    r, a = phases.reasoning, phases.answer
    return (f" · <b>reasoning</b> {_fmt(r.token_acceptance, '.0%')} accepted, {_fmt(r.decode_tok_s, '.1f')} tok/s"
            f" / <b>answer</b> {_fmt(a.token_acceptance, '.0%')} accepted, {_fmt(a.decode_tok_s, '.1f')} tok/s")
