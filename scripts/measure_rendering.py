"""What does painting a streaming answer cost, and does it grow with the answer's length?

No model: a synthetic answer (paragraphs, lists, fenced Python, a table; ~4 characters a
token) is streamed into the real window's conversation through the same path the answer
service takes (``ChatPane._paint_live`` then the conversation's frame timer), in rounds of
1 to 4 tokens like speculative rounds, at ``--rate`` tokens a second.  Meanwhile a 20 ms
timer measures how late the event loop is.  A short and a long answer stream in one run,
and for each the script prints the worst and 99th-percentile timer lateness, and the time
one update of the message widget takes against the answer's length.

``--compare REV`` streams the same answers, in the same run, into the message widget of
git revision REV too (its markdown.py and message_widget.py loaded from git), so the
figures before and after a change of the renderer come from one run.

    python scripts/measure_rendering.py [--short 200] [--long 4000] [--rate 60] [--compare HEAD~3]
                                        [--shot out.png]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]

SECTION = '''## Step {i}: the ledger

The account keeps every change as an entry, so the **balance** is a sum and never a stored
number that could drift. Call `deposit()` or `withdraw()`; each returns the new balance
and raises `ValueError` for an amount that is not positive.

- entries are immutable tuples of `(when, amount, note)`
- a withdrawal larger than the balance is refused, not clamped
- the history is kept in order, oldest first

```python
class Account{i}:
    """A bank account whose balance is the sum of its entries."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.entries: list[tuple[float, int, str]] = []

    def deposit(self, amount: int, note: str = "") -> int:
        if amount <= 0:
            raise ValueError(f"not a positive amount: {{amount}}")
        self.entries.append((time.time(), amount, note))
        return self.balance

    @property
    def balance(self) -> int:
        return sum(a for _, a, _ in self.entries)
```

| operation | entries | balance |
|-----------|---------|---------|
| deposit 100 | 1 | 100 |
| withdraw 30 | 2 | 70 |

'''


def synthetic_answer(tokens: int) -> list[str]:
    """``tokens`` pieces of a markdown answer, each at most 4 non-space characters (about a token)."""
    pieces: list[str] = []
    i = 1
    while len(pieces) < tokens:
        for word in re.findall(r"\s*\S+", SECTION.format(i=i)):
            lead = len(word) - len(word.lstrip())
            pieces.append(word[:lead + 4])
            pieces += [word[k:k + 4] for k in range(lead + 4, len(word), 4)]
        i += 1
    return pieces[:tokens]


def load_revision(rev: str) -> type:
    """The MessageWidget class of git revision ``rev`` (with that revision's markdown module)."""
    def source(path: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    markdown = types.ModuleType("specchat.ui._measured_markdown")
    sys.modules[markdown.__name__] = markdown  # before its code runs: a dataclass looks its module up there
    exec(compile(source("app/specchat/ui/markdown.py"), f"{rev}:markdown.py", "exec"), markdown.__dict__)
    widget_src = source("app/specchat/ui/message_widget.py").replace("from .markdown import",
                                                                     "from specchat.ui._measured_markdown import")
    widget = types.ModuleType("specchat.ui._measured_message_widget")
    widget.__dict__["__package__"] = "specchat.ui"
    sys.modules[widget.__name__] = widget
    exec(compile(widget_src, f"{rev}:message_widget.py", "exec"), widget.__dict__)
    return widget.MessageWidget


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[int(q * (len(s) - 1))] if s else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", type=int, default=200, help="tokens of the short answer")
    ap.add_argument("--long", type=int, default=4000, help="tokens of the long answer")
    ap.add_argument("--rate", type=float, default=60.0, help="tokens a second")
    ap.add_argument("--compare", default=None, metavar="REV", help="also measure the message widget of this git revision")
    ap.add_argument("--panel", choices=["hidden", "shown"], default="hidden",
                    help="the telemetry panel (hidden: its own paints, e.g. the memory plot's axis moving "
                         "every 60 s, are not rendering's)")
    ap.add_argument("--trace", type=float, default=0.0, metavar="MS",
                    help="print every event the GUI thread took longer than MS to handle, and GC pauses over it")
    ap.add_argument("--shot", type=Path, default=None, help="save a screenshot of the window after the long answer")
    args = ap.parse_args()

    from PySide6.QtCore import QEvent, QThread, QTimer
    from PySide6.QtWidgets import QApplication

    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.services.answers import LiveAnswer, Phase
    from specchat.store import ChatSettings, open_store
    from specchat.ui import conversation
    from specchat.ui.session import AppSession

    gui_thread = QThread.currentThread()

    class TracingApp(QApplication):
        def notify(self, receiver, event):  # noqa: N802 (Qt's name)
            if QThread.currentThread() is not gui_thread:
                return super().notify(receiver, event)
            t0 = time.perf_counter()
            try:
                return super().notify(receiver, event)
            finally:
                dt = time.perf_counter() - t0
                if dt * 1e3 > args.trace:
                    print(f"    slow: {dt * 1e3:.0f} ms {type(receiver).__name__} {event.type().name}", flush=True)

    gc_start = [0.0]

    def gc_pause(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        elif (dt := time.perf_counter() - gc_start[0]) * 1e3 > args.trace:
            print(f"    slow: {dt * 1e3:.0f} ms garbage collection of generation {info['generation']}", flush=True)

    if args.trace:
        gc.callbacks.append(gc_pause)
    app = TracingApp([]) if args.trace else QApplication([])
    profile = Profile.at(Path(tempfile.mkdtemp()))
    store = open_store(profile.database)
    store.create_chat("Rendering", ChatSettings())
    session = AppSession(store, AppConfig.defaults(), Registry(profile.registry), profile=profile, nice=0)
    window = session.window
    window.resize(1200, 800)
    window.telemetry.setVisible(args.panel == "shown")
    window.show()
    pane = window.pane
    builds = [("now", conversation.MessageWidget)]
    if args.compare:
        builds.insert(0, (args.compare, load_revision(args.compare)))

    def stream(widget_class: type, tokens: int) -> tuple[list[float], list[tuple[int, float]]]:
        """Stream one answer; (timer lateness in s, [(answer length in tokens, update time in s)])."""
        conversation.MessageWidget = widget_class
        pane.show_chat(pane.chat_id)
        pieces = synthetic_answer(tokens)
        live = LiveAnswer(pane.chat_id or 0, ChatSettings())  # the service's own live answer: every field a view reads
        live.phase = Phase.STREAMING
        sent = [0]
        updates: list[tuple[int, float]] = []
        lateness: list[float] = []
        view = pane.conversation
        original = view._repaint

        def timed_repaint() -> None:
            # the update, the layout it asks for and the paint, all now: what one frame costs
            t0 = time.perf_counter()
            had = view._dirty is not None
            original()
            QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
            view.viewport().repaint()
            if had:
                updates.append((sent[0], time.perf_counter() - t0))

        view._timer.timeout.disconnect()
        view._timer.timeout.connect(timed_repaint)
        rounds = [3, 1, 4, 2]  # tokens per speculative round, in turn
        n_round = [0]

        def emit() -> None:
            k = rounds[n_round[0] % len(rounds)]
            n_round[0] += 1
            chunk = pieces[sent[0]:sent[0] + k]
            sent[0] += len(chunk)
            live.add("".join(chunk), "")
            pane._paint_live(live)
            if sent[0] >= len(pieces):
                feeder.stop()
                QTimer.singleShot(300, app.quit)

        last = [time.perf_counter()]

        def tick() -> None:
            now = time.perf_counter()
            lateness.append(now - last[0] - 0.020)
            last[0] = now

        feeder = QTimer(interval=max(1, round(2500 / args.rate)))  # a mean round of 2.5 tokens
        feeder.timeout.connect(emit)
        probe = QTimer(interval=20)
        probe.timeout.connect(tick)
        feeder.start()
        probe.start()
        app.exec()
        probe.stop()
        view._timer.timeout.disconnect()
        view._timer.timeout.connect(original)
        view.flush()
        return lateness[5:], updates  # the first ticks include the chat being shown

    results: dict[tuple[str, int], tuple[list[float], list[tuple[int, float]]]] = {}
    for name, cls in builds:
        for n in (args.short, args.long):
            results[(name, n)] = stream(cls, n)
            late, upd = results[(name, n)]
            print(f"{name:>10} {n:5d} tokens: 20 ms timer worst {max(late) * 1e3:6.1f} ms late, "
                  f"p99 {percentile(late, 0.99) * 1e3:6.1f} ms; {len(upd)} updates, median "
                  f"{statistics.median(u for _, u in upd) * 1e3:.2f} ms, worst {max(u for _, u in upd) * 1e3:.2f} ms",
                  flush=True)
    if args.shot:
        window.grab().save(str(args.shot))
    for name, _cls in builds:
        short_late, _ = results[(name, args.short)]
        long_late, upd = results[(name, args.long)]
        # the long answer's last stretch, as many ticks as the short answer had: equal chances of a
        # rare stall (another process, a GC pass), the text 20 times longer
        end = long_late[-len(short_late):]
        print(f"\n{name}: long / short answer, worst lateness {max(long_late) / max(short_late):.2f}x "
              f"(in the long answer's last {len(end)} ticks: {max(end) * 1e3:.1f} vs {max(short_late) * 1e3:.1f} ms, "
              f"{max(end) / max(short_late):.2f}x), p99 {percentile(long_late, 0.99) * 1e3:.1f} vs "
              f"{percentile(short_late, 0.99) * 1e3:.1f} ms, "
              f"{percentile(long_late, 0.99) / max(percentile(short_late, 0.99), 1e-4):.2f}x")
        step = max(1, args.long // 8)
        print("  update time by answer length (tokens: median ms):")
        firsts = []
        for lo in range(0, args.long, step):
            sel = [u for t, u in upd if lo <= t < lo + step]
            if sel:
                firsts.append(statistics.median(sel))
                print(f"    {lo:5d}-{lo + step:5d}: {statistics.median(sel) * 1e3:7.2f}")
        if len(firsts) > 1:
            print(f"  last / first bucket: {firsts[-1] / firsts[0]:.2f}x")
    window.close()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
