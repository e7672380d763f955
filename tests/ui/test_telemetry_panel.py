"""The telemetry dock fed a recorded event stream: what the plots and numbers hold."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.event_streams import R, answer_events
from specchat.engine.events import Fallback
from specchat.telemetry import TelemetryRecorder
from specchat.telemetry.samplers import NO_GPU, RamSampler
from specchat.ui.telemetry_panel import TelemetryPanel


@pytest.fixture
def panel(qtbot):
    recorder = TelemetryRecorder()
    p = TelemetryPanel(recorder, RamSampler(description=NO_GPU))
    qtbot.addWidget(p)
    p.show()
    return p


def feed(panel, events, request_id=1, chat_id=7):
    t = 1000.0
    for ev in events:
        t += 0.05
        panel.recorder.feed(request_id, chat_id, ev, now=t)
    panel.repaint_now()


def test_plots_and_numbers_follow_the_stream(panel):
    rounds = [R(4, 4, 3)] * 10 + [R(4, 4, 0, fallback_after=(Fallback("token acceptance 0% < 50%"),))]
    rounds += [R(0, 0, 0, plain_by_fallback=True)] * 3
    feed(panel, answer_events(rounds))
    k = panel.c_k.yData  # the full series (getData() is what survives clip-to-view)
    assert list(k) == [4] * 11 + [0] * 3
    acc = panel.c_tok_acc.yData
    assert acc[9] == pytest.approx(0.75)  # 3 of 4 drafted tokens accepted, every round
    tok_s = panel.c_speed.yData
    assert tok_s[0] == pytest.approx(4 / 0.042)  # emitted / round wall time
    spots = panel.s_fallback.data
    assert len(spots) == 1 and spots[0]["data"] == "token acceptance 0% < 50%" and spots[0]["y"] == 4
    total = panel.c_total.yData
    assert total[0] == pytest.approx(42.0)  # draft + verify + overhead, in ms
    text = panel.numbers.text()
    assert "45</b> tokens" in text and "fallback <b>21%</b>" in text  # 1 + 10 x 4 + 1 + 3 x 1; 3 of 14 rounds
    assert panel.tok_rail.value() == 0.5 and panel.seq_rail.value() == 0.6


def test_plain_rate_draws_the_reference_line_and_the_multiplier(panel):
    panel.recorder.set_plain_rate(25.0)
    feed(panel, answer_events([R(4, 4, 4)] * 5))
    assert panel.plain_line.isVisible() and panel.plain_line.value() == 25.0
    assert "4.71×</b> vs plain" in panel.numbers.text()  # 117.9 tok/s / 25


def test_pause_freezes_the_plots(panel):
    feed(panel, answer_events([R(2, 2, 2)] * 3))
    panel.pause_button.click()
    feed(panel, answer_events([R(2, 2, 2)] * 3), request_id=2)
    assert len(panel.c_k.yData) == 3
    panel.pause_button.click()
    assert len(panel.c_k.yData) == 6


def test_without_nvml_the_panel_says_so_and_shows_ram(panel):
    panel.sample_memory()
    panel.repaint_now()
    assert panel.memory_label.text().startswith(NO_GPU) and "RSS" in panel.memory_label.text()
    rss = panel.c_rss.yData
    assert rss is not None and np.all(rss > 0)


def test_save_png(panel, tmp_path):
    feed(panel, answer_events([R(2, 2, 1)] * 4))
    out = tmp_path / "plots.png"
    panel.save_png(str(out))
    assert out.stat().st_size > 1000


def test_memory_label_shows_the_estimated_split_of_the_loaded_pair(panel):
    from specchat.telemetry.samplers import MemoryShare

    panel.set_memory_shares([MemoryShare("target weights", 3 * 1024**3, 0.75),
                             MemoryShare("KV caches", 1024**3, 0.25)])
    text = panel.memory_label.text()
    assert "target weights 3.00 GiB (75%)" in text and "KV caches 1.00 GiB (25%)" in text


def test_a_tick_refreshes_one_plot_and_every_plot_in_turn(panel):
    """The event loop is never held by a paint of all five plots: one per tick, round-robin."""
    panel.recorder.begin(1, 7, mode="draft")
    t = 1000.0
    for ev in answer_events([R(4, 4, 2)] * 6):
        t += 0.05
        panel.recorder.feed(1, 7, ev, now=t)
    panel._frame()
    assert len(panel.c_speed.yData) == 6 and panel.c_k.yData is None  # only the first plot so far
    for _ in range(3):
        panel._frame()
    assert len(panel.c_k.yData) == 6 and len(panel.c_total.yData) == 6


def test_axis_ranges_step_so_ticks_are_not_rebuilt_every_round():
    from specchat.ui.telemetry_panel import nice_ceiling, stepped_window

    assert [nice_ceiling(v) for v in (0.7, 1.0, 1.2, 23, 95, 101)] == [0.8, 1.0, 1.5, 30, 100, 150]
    windows = {stepped_window(0, last, 20) for last in range(0, 101)}
    assert len(windows) <= 8  # 101 rounds, a handful of distinct x ranges (not 101)
    assert all(lo <= 0 and hi >= 100 for lo, hi in [stepped_window(0, 100, 20)])


def _server_info(**caps):
    from specchat.backends.remote import RemoteBackend
    from specchat.remote.client import Capabilities

    base = dict(engine="vllm", models=("Qwen/Qwen3-8B",), model="Qwen/Qwen3-8B", n_ctx=32768,
                notes=("live acceptance: vLLM's /metrics counters, which cover the whole server, not this chat",
                       "GPU memory: servers do not report it; give the box's dcgm-exporter URL to see it"))
    backend = RemoteBackend(client=None, caps=Capabilities(**(base | caps)),  # type: ignore[arg-type]
                            label="gpu-box (http://gpu-box:8000)")
    return backend.info


def _local_info():
    from specchat.workers.generation import PairInfo

    return PairInfo(target="t.gguf", draft="d.gguf", backend="CPU", n_ctx=4096, supports_reasoning_switch=True,
                    speculation_blocked="", verify_ms={}, draft_ms=None, target_bytes=1, draft_bytes=1)


def test_a_server_backend_hides_the_memory_plot_and_says_what_it_cannot_feed(panel):
    assert panel.memory_plot_shown and not panel.backend_notes.isVisible()
    panel.set_backend(_server_info())
    assert not panel.memory_plot_shown  # this machine's memory says nothing of the server's
    notes = panel.backend_notes.text()
    assert panel.backend_notes.isVisible() and "vllm serving Qwen/Qwen3-8B" in notes
    assert "cover the whole server" in notes and "dcgm-exporter" in notes
    feed(panel, answer_events([R(3, 3, 2)] * 4))  # remote rounds still fill the round plots
    assert len(panel.c_k.yData) == 4
    panel.set_backend(_local_info())
    assert panel.memory_plot_shown and not panel.backend_notes.isVisible() and panel.remote is None
    panel.sample_memory()
    panel.repaint_now()
    assert panel.c_rss.yData is not None and len(panel.c_rss.yData) >= 1


def test_a_server_whose_gpu_exporter_answered_keeps_the_memory_plot(panel):
    panel.set_backend(_server_info(vram=True, notes=("live acceptance: vLLM's /metrics counters",)))
    assert panel.memory_plot_shown and "dcgm" not in panel.backend_notes.text()


def test_a_model_id_is_shown_as_text_not_markup(panel):
    panel.set_backend(_server_info(model="<img src=x>", models=("<img src=x>",)))
    assert "&lt;img src=x&gt;" in panel.backend_notes.text()


def test_a_plot_spec_added_to_the_list_is_built_and_painted(qtbot, monkeypatch):
    from specchat.ui import telemetry_panel
    from specchat.ui.plots import PLOTS, PlotSpec, Series

    extra = PlotSpec("draft_ms", ("draft seconds per round:", ("draft", "draft")), "ms",
                     (Series("c_draft_ms", "draft", lambda s: s.rounds.draft_s * 1e3),),
                     lambda s: (0.0, 20.0))
    monkeypatch.setattr(telemetry_panel, "PLOTS", (*PLOTS[:-1], extra, PLOTS[-1]))  # above the memory plot
    p = TelemetryPanel(TelemetryRecorder(), RamSampler(description=NO_GPU))
    qtbot.addWidget(p)
    p.show()
    feed(p, answer_events([R(4, 4, 3, draft_s=0.012)] * 3))
    assert list(p.c_draft_ms.yData) == pytest.approx([12.0] * 3)
    assert "draft seconds per round" in p.p_draft_ms.titleLabel.text
    assert p.p_draft_ms.viewRange()[1] == [0.0, 20.0]  # its range rule
    # it is the lowest round plot now: the shared "round" axis moved under it
    assert p.p_draft_ms.getAxis("bottom").isVisible() and not p.p_time.getAxis("bottom").isVisible()


def _k(panel) -> list[float]:
    return [] if panel.c_k.yData is None else list(panel.c_k.yData)


def _feed_unpainted(panel, events, request_id):
    """Feed an answer without painting it: only the panel's own timers may paint it."""
    t = 2000.0 + 100 * request_id
    for ev in events:
        t += 0.05
        panel.recorder.feed(request_id, 7, ev, now=t)


@pytest.mark.parametrize("hide", ["close button", "View menu"])
def test_hidden_and_shown_again_the_panel_paints_the_new_answer(qtbot, panel, hide):
    """Issue 25: closing the dock stopped its timers for good; it kept showing the previous answer."""
    _feed_unpainted(panel, answer_events([R(2, 2, 2)] * 3), request_id=1)
    qtbot.waitUntil(lambda: len(_k(panel)) == 3, timeout=5_000)
    if hide == "close button":
        panel.close()  # what the dock's [x] does
    else:
        panel.toggleViewAction().trigger()
    assert not panel.isVisible() and not panel.live
    panel.toggleViewAction().trigger()  # View → Telemetry panel
    assert panel.isVisible() and panel.live
    _feed_unpainted(panel, answer_events([R(3, 3, 1)] * 5), request_id=2)
    qtbot.waitUntil(lambda: len(_k(panel)) == 8, timeout=5_000)  # painted by its timer, no repaint_now
    assert _k(panel)[-5:] == [3] * 5
    qtbot.waitUntil(lambda: "<b>11</b> tokens" in panel.numbers.text(), timeout=5_000)  # 1 + 5 x (1 accepted + 1)


def test_a_panel_never_shown_runs_no_timer(qtbot):
    p = TelemetryPanel(TelemetryRecorder(), RamSampler(description=NO_GPU))
    qtbot.addWidget(p)
    assert not p.live
    p.show()
    assert p.live
