"""The live telemetry dock: is speculation paying, right now?

Data arrives at token rate into a :class:`TelemetryRecorder` (fed by the main
window); this panel paints at frame rate: a timer takes an immutable snapshot
and calls ``setData`` on curve items made once (pyqtgraph's fast path, with
clip-to-view and downsampling).  Memory is sampled once a second.
"""

from __future__ import annotations

import time

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.export import export_csv, export_json
from specchat.telemetry.samplers import MemorySampler, default_sampler

REPAINT_MS = 100  # 10 Hz where painting is cheap (DESIGN: 10 to 30 Hz)
MAX_REPAINT_MS = 2000
PAINT_BUDGET = 0.03  # painting may take at most this share of the time (it competes with decoding)
MEMORY_MS = 1000
GIB = 1024**3


def _fmt(v: float | None, spec: str, none: str = "–") -> str:
    return none if v is None else format(v, spec)


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

    def __init__(self, recorder: TelemetryRecorder, sampler: MemorySampler | None = None, parent=None) -> None:
        super().__init__("Telemetry", parent)
        self.setObjectName("telemetry-dock")
        self.recorder = recorder
        self.sampler = sampler or default_sampler()
        self.paused = False
        self._version = -1
        body = QWidget()
        v = QVBoxLayout(body)
        v.setContentsMargins(4, 4, 4, 4)
        self.numbers = QLabel()
        self.numbers.setWordWrap(True)
        self.numbers.setTextFormat(Qt.TextFormat.RichText)
        # fixed heights: a label that changes its size hint every frame would re-lay out the whole
        # window, conversation included (measured: 100+ ms frames on two cores)
        self.numbers.setFixedHeight(4 * self.numbers.fontMetrics().lineSpacing())
        v.addWidget(self.numbers)
        pg.setConfigOptions(antialias=False, background="w", foreground="k")
        self.plots = _TimedPlots()
        self.plots.setMinimumWidth(420)
        v.addWidget(self.plots, 1)
        self.memory_label = QLabel()
        self.memory_label.setWordWrap(True)
        self.memory_label.setFixedHeight(3 * self.memory_label.fontMetrics().lineSpacing())
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
        self._timer = QTimer(self, interval=REPAINT_MS)
        self._timer.timeout.connect(self._frame)
        self._timer.start()
        self._mem_timer = QTimer(self, interval=MEMORY_MS)
        self._mem_timer.timeout.connect(self.sample_memory)
        self._mem_timer.start()
        self.sample_memory()

    # -- plots, made once ---------------------------------------------------------------

    def _plot(self, row: int, title: str, y_label: str) -> pg.PlotItem:
        p = self.plots.addPlot(row=row, col=0, title=title)
        p.setLabel("left", y_label)
        p.showGrid(x=True, y=True, alpha=0.2)
        p.setClipToView(True)
        p.setDownsampling(auto=True, mode="peak")
        return p

    def _build_plots(self) -> None:
        self.p_speed = self._plot(0, "Decode speed per round", "tok/s")
        self.c_speed = self.p_speed.plot(pen=pg.mkPen("#9ab", width=1), name="per round")
        self.c_smooth = self.p_speed.plot(pen=pg.mkPen("#1565c0", width=2), name="smoothed")
        self.plain_line = pg.InfiniteLine(angle=0, pen=pg.mkPen("#c62828", style=Qt.PenStyle.DashLine),
                                          label="plain", labelOpts={"position": 0.05})
        self.plain_line.hide()
        self.p_speed.addItem(self.plain_line)

        self.p_acc = self._plot(1, "Acceptance (rolling window)", "share")
        self.p_acc.setYRange(0, 1.05)
        self.c_tok_acc = self.p_acc.plot(pen=pg.mkPen("#2e7d32", width=2), name="token")
        self.c_seq_acc = self.p_acc.plot(pen=pg.mkPen("#ef6c00", width=2), name="sequence")
        self.tok_rail = pg.InfiniteLine(angle=0, pen=pg.mkPen("#2e7d32", style=Qt.PenStyle.DotLine))
        self.seq_rail = pg.InfiniteLine(angle=0, pen=pg.mkPen("#ef6c00", style=Qt.PenStyle.DotLine))
        self.p_acc.addItem(self.tok_rail)
        self.p_acc.addItem(self.seq_rail)

        self.p_k = self._plot(2, "Draft length K per round (red: fallback; hover for the reason)", "K")
        self.c_k = self.p_k.plot(pen=pg.mkPen("#6a1b9a", width=1), stepMode=None)
        self.s_fallback = pg.ScatterPlotItem(size=10, brush=pg.mkBrush("#c62828"), hoverable=True,
                                             tip=lambda x, y, data: str(data))
        self.p_k.addItem(self.s_fallback)

        self.p_time = self._plot(3, "Time per round: draft, verify, overhead", "ms")
        self.c_draft = self.p_time.plot(pen=pg.mkPen("#8e24aa"), fillLevel=0, brush=pg.mkBrush(142, 36, 170, 90))
        self.c_verify = self.p_time.plot(pen=pg.mkPen("#1e88e5"))
        self.c_total = self.p_time.plot(pen=pg.mkPen("#757575"))

        self.p_mem = self._plot(4, "Memory", "GiB")
        self.c_rss = self.p_mem.plot(pen=pg.mkPen("#455a64", width=2), name="process RSS")
        self.c_vram = self.p_mem.plot(pen=pg.mkPen("#d81b60", width=2), name="VRAM used (GPU 0)")
        self.c_pvram = self.p_mem.plot(pen=pg.mkPen("#f48fb1", width=1), name="VRAM, this process")
        for p in (self.p_acc, self.p_k, self.p_time):
            p.setXLink(self.p_speed)

    # -- painting --------------------------------------------------------------------------

    def _frame(self) -> None:
        """Timer tick: paint if shown, at a steady rate that keeps painting under PAINT_BUDGET.

        On a fast machine that is 10 Hz; where a paint of the five plots takes 30 ms (two
        software-rendering cores that llama.cpp keeps busy) it is about 1 Hz, because every
        millisecond the GUI thread paints is a millisecond a decode thread waits.
        """
        if self.paused or not self.isVisible():
            return
        t0 = time.perf_counter()
        self.repaint_now()
        cost = (time.perf_counter() - t0) + self.plots.paint_s
        self._timer.setInterval(int(min(MAX_REPAINT_MS, max(REPAINT_MS, 1e3 * cost / PAINT_BUDGET))))

    def repaint_now(self) -> None:
        if self.paused:
            return
        snap = self.recorder.snapshot()
        if snap.version == self._version:
            return
        self._version = snap.version
        r = snap.rounds
        x = r.seq.astype(float)
        self.c_speed.setData(x, r.tok_s)
        self.c_smooth.setData(x, r.tok_s_smooth)
        if snap.plain_rate:
            self.plain_line.setValue(snap.plain_rate)
            self.plain_line.show()
        else:
            self.plain_line.hide()
        self.c_tok_acc.setData(x, r.token_acceptance)
        self.c_seq_acc.setData(x, r.sequence_acceptance)
        self.tok_rail.setValue(snap.min_token_acceptance)
        self.seq_rail.setValue(snap.min_sequence_acceptance)
        self.c_k.setData(x, r.k)
        marks = [m for m in snap.markers if not m.permanent]
        self.s_fallback.setData([float(m.seq) for m in marks], [float(m.k) for m in marks],
                                data=[m.reason for m in marks])
        self.c_draft.setData(x, r.draft_s * 1e3)
        self.c_verify.setData(x, (r.draft_s + r.verify_s) * 1e3)
        self.c_total.setData(x, (r.draft_s + r.verify_s + r.overhead_s) * 1e3)
        m = snap.memory
        if len(m):
            tm = m.t - m.t[0]
            self.c_rss.setData(tm, m.rss / GIB)
            if m.vram_used.shape[1]:
                self.c_vram.setData(tm, m.vram_used[:, 0] / GIB)
                self.c_pvram.setData(tm, m.process_vram / GIB)
        self.numbers.setText(self._numbers_html(snap))

    def _numbers_html(self, snap) -> str:
        a = snap.answer
        if a is None:
            return "<i>No answer yet: numbers appear while the next answer streams.</i>"
        mult = _fmt(a.multiplier, ".2f") + "×" if a.multiplier is not None else "–"
        return (f"<b>{a.tokens}</b> tokens · <b>{_fmt(a.tok_s, '.1f')}</b> tok/s · "
                f"<b>{mult}</b> vs plain{'' if snap.plain_rate else ' (plain rate not known yet)'} · "
                f"acceptance <b>{_fmt(a.token_acceptance, '.0%')}</b> token / "
                f"<b>{_fmt(a.sequence_acceptance, '.0%')}</b> sequence · mean K <b>{_fmt(a.mean_k, '.1f')}</b> · "
                f"fallback <b>{_fmt(a.fallback_share, '.0%')}</b> of rounds")

    def sample_memory(self) -> None:
        s = self.sampler.sample()
        self.recorder.record_memory(s)
        parts = [f"RSS {s.rss / GIB:.2f} GiB", f"RAM free {s.ram_available / GIB:.1f} GiB"]
        for g in s.gpus:
            parts.append(f"{g.name}: {g.used / GIB:.1f}/{g.total / GIB:.1f} GiB"
                         + (f" (this process {g.process_used / GIB:.2f})" if g.process_used is not None else ""))
        self.memory_label.setText(f"{self.sampler.description}: " + " · ".join(parts))

    # -- buttons ---------------------------------------------------------------------------

    def _pause(self, on: bool) -> None:
        self.paused = on
        self.pause_button.setText("Resume" if on else "Pause")
        if not on:
            self._version = -1
            self.repaint_now()

    def save_png(self, path: str) -> None:
        self.plots.grab().save(path)

    def _save_png(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save plots", "specchat-telemetry.png", "PNG (*.png)")
        if path:
            self.save_png(path)

    def _export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export rounds since start", "specchat-rounds.csv",
                                              "CSV (*.csv);;JSON (*.json)")
        if path:
            (export_json if path.endswith(".json") else export_csv)(self.recorder, path)

    def closeEvent(self, event) -> None:
        self._timer.stop()
        self._mem_timer.stop()
        super().closeEvent(event)
