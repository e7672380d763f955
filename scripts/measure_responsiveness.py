"""How responsive is the window, and what does the telemetry panel cost, while the real pair generates?

Opens the real window offscreen on a throw-away database, sends the same prompt to the
pinned Qwen pair ``--answers`` times, alternating the telemetry panel hidden and shown
(ABBA order, so drift hits both alike), and meanwhile runs a 20 ms timer.  Prints, per
condition, the median decode speed and the worst and 99th-percentile lateness of the
timer, and the ratio shown/hidden: all measured in this one run.

    python scripts/measure_responsiveness.py [--tokens 200] [--mode auto] [--answers 4]
                                              [--shot out.png] [--mid-shot out.png]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def flood_client(url: str, n: int, drop: int) -> None:
    """``--flood-client URL N DROP``: N requests at once from threads of this process, DROP of them streamed
    and dropped after their first chunk; prints what each got, as JSON."""
    import json
    import threading

    import httpx2

    results: list = []

    def ask(i: int) -> None:
        body = {"messages": [{"role": "user", "content": f"Say the number {i} in words."}], "max_tokens": 8,
                "stream": i < drop}
        try:
            if i < drop:
                with httpx2.stream("POST", url + "/chat/completions", json=body, timeout=900) as r:
                    for line in r.iter_lines():
                        if '"content"' in line:
                            break
                results.append("dropped")
            else:
                results.append(httpx2.post(url + "/chat/completions", json=body, timeout=900).status_code)
        except httpx2.HTTPError as exc:
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results))


def main() -> int:
    if sys.argv[1:2] == ["--flood-client"]:
        flood_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--mode", default="auto", choices=["auto", "draft", "lookup", "baseline"])
    ap.add_argument("--prompt", default="Write a Python class for a bank account with deposit, withdraw and "
                                        "a transaction history, with docstrings.")
    ap.add_argument("--answers", type=int, default=1, help="answers to generate")
    ap.add_argument("--panel", choices=["alternate", "hidden", "shown"], default="alternate",
                    help="telemetry panel during the answers (alternate: hidden, shown, shown, hidden, ...)")
    ap.add_argument("--shot", type=Path, default=None, help="save a screenshot of the window at the end")
    ap.add_argument("--mid-shot", type=Path, default=None, help="save a screenshot half-way through the last answer")
    ap.add_argument("--nice", type=int, default=2, help="the decode_nice setting (default 2, the app default)")
    ap.add_argument("--plain-first", action="store_true",
                    help="answer 3 times (MIN_PLAIN_RUNS) with speculation off first (not counted), so the panel "
                         "knows the plain rate (it learns one from that many)")
    ap.add_argument("--trace", type=float, default=0.0, metavar="MS",
                    help="print every event the GUI thread took longer than MS to handle (receiver, event type)")
    ap.add_argument("--switch-interval", type=float, default=None, metavar="S",
                    help="sys.setswitchinterval for this run (default: what the app sets)")
    ap.add_argument("--api-flood", type=int, default=0, metavar="N",
                    help="instead of chat answers: serve the API from the window and send N requests at once "
                         "(--api-drop of them streamed and dropped after their first chunk), twice; the timer's "
                         "lateness while the API answers, what each request got, and the RSS after each flood")
    ap.add_argument("--api-drop", type=int, default=20)
    ap.add_argument("--verbose", action="store_true", help="with --api-flood: one line per request")
    args = ap.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)

    from PySide6.QtCore import QThread, QTimer
    from PySide6.QtWidgets import QApplication

    import test_models
    from specchat.config import AppConfig
    from specchat.metrics import MIN_PLAIN_RUNS
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.ui.session import AppSession

    target, draft = test_models.ensure("qwen-1.5b"), test_models.ensure("qwen-0.5b")
    tmp = Path(tempfile.mkdtemp())
    slow: list[tuple[float, str]] = []
    gui_thread = QThread.currentThread()
    t_start = [time.perf_counter()]

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
                    name = receiver.objectName() or type(receiver).__name__
                    parent = receiver.parent() if hasattr(receiver, "parent") else None
                    where = f"{type(parent).__name__}/" if parent is not None else ""
                    slow.append((dt, f"{where}{name} {event.type().name}"))
                    if dt > 0.05:
                        print(f"    slow: {dt * 1e3:.0f} ms {where}{name} {event.type().name} at "
                              f"{t0 - t_start[0]:.2f} s, generating={window.pane.generating}", flush=True)

    app = TracingApp([]) if args.trace else QApplication([])
    profile = Profile.at(tmp)
    store = open_store(profile.database)
    store.create_chat("New chat", ChatSettings(target=target, draft=draft,
                                               speculation="baseline" if args.plain_first else args.mode,
                                               max_tokens=args.tokens))
    config = AppConfig.defaults().replaced({"default_mode": args.mode})  # every new chat in the mode asked for
    session = AppSession(store, config, Registry(profile.registry), profile=profile, nice=args.nice)
    window = session.window
    window.resize(1200, 800)
    window.show()
    runs: list[tuple[bool, float, list[float]]] = []  # (panel shown, decode tok/s, timer lateness)
    plan = [(i % 4) in (1, 2) if args.panel == "alternate" else args.panel == "shown" for i in range(args.answers)]
    first = MIN_PLAIN_RUNS if args.plain_first else 1  # the answers asked in the first chat
    if args.plain_first:
        plan[:0] = [True] * MIN_PLAIN_RUNS
    lateness: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        if window.pane.generating or (args.api_flood and session.answers.external is not None):
            lateness.append(now - last[0] - 0.020)
        last[0] = now

    timer = QTimer(interval=20)
    timer.timeout.connect(tick)
    timer.start()

    flood_state: dict = {"round": 0, "rss": []}

    def flood() -> None:
        """The requests come from another process (as outside clients do: no client thread shares the
        window's interpreter); wait for it and for every answer to end."""
        import subprocess

        flood_state["proc"] = subprocess.Popen(
            [sys.executable, __file__, "--flood-client", session.api.url, str(args.api_flood), str(args.api_drop)],
            stdout=subprocess.PIPE, text=True)
        flood_state["t0"] = time.perf_counter()
        lateness.clear()
        QTimer.singleShot(100, flood_wait)

    def flood_wait() -> None:
        import psutil

        if flood_state["proc"].poll() is None or session.answers.external is not None \
                or session.answers.external_waiting:
            QTimer.singleShot(100, flood_wait)
            return
        import json

        res = json.loads(flood_state["proc"].stdout.read())
        late = sorted(lateness)
        p99 = late[int(0.99 * (len(late) - 1))] if late else 0.0
        flood_state["rss"].append(psutil.Process().memory_info().rss)
        print(f"flood {flood_state['round'] + 1}: {args.api_flood} requests ({args.api_drop} dropped after the first "
              f"chunk) in {time.perf_counter() - flood_state['t0']:.0f} s: {res.count(200)} answered (200), "
              f"{res.count('dropped')} dropped, other {sorted({str(r) for r in res} - {'200', 'dropped'})}; "
              f"API requests the window logged: {len(window_records)}; 20 ms timer while the API answered: "
              f"worst {max(late, default=0) * 1e3:.1f} ms late, p99 {p99 * 1e3:.1f} ms; "
              f"RSS {flood_state['rss'][-1] / 2**20:.0f} MiB", flush=True)
        if args.verbose:
            for r in window_records[-len(res):]:
                print(f"    #{r.number} {r.status} {r.seconds:.2f} s {r.tokens} tok {r.tok_s:.1f} tok/s {r.mode} "
                      f"{r.stop}", flush=True)
        flood_state["round"] += 1
        if flood_state["round"] < 2:
            QTimer.singleShot(0, flood)
        else:
            print(f"RSS after the second flood / after the first: {flood_state['rss'][1] / flood_state['rss'][0]:.3f}")
            app.quit()

    window_records: list = []

    def start() -> None:
        if session.answers.pair_info is None:
            QTimer.singleShot(100, start)
            return
        if args.api_flood:
            session.api.record.connect(window_records.append)
            problem = session.api.start(port=0)
            if problem:
                print(f"the API did not start: {problem}")
                app.quit()
                return
            QTimer.singleShot(0, flood)
            return
        if len(runs) == len(plan):
            if args.plain_first:
                del runs[:MIN_PLAIN_RUNS]
            if args.shot:
                window.grab().save(str(args.shot))
            app.quit()
            return
        window.telemetry.setVisible(plan[len(runs)])
        if len(runs) >= first:
            window.new_chat()
        lateness.clear()
        window.pane.composer.setPlainText(args.prompt)
        t_start[0] = time.perf_counter()
        window.pane.send()
        QTimer.singleShot(100, wait)
        if args.mid_shot and len(runs) == len(plan) - 1:
            QTimer.singleShot(int(args.tokens / 2 / 12 * 1000), lambda: window.grab().save(str(args.mid_shot)))

    def wait() -> None:
        if window.pane.generating:
            QTimer.singleShot(100, wait)
            return
        stats = store.messages(window.chat_id)[-1].stats
        runs.append((plan[len(runs)], stats.decode_tok_s, sorted(lateness)))
        print(f"  panel {'shown ' if runs[-1][0] else 'hidden'}: {stats.tokens} tokens at "
              f"{stats.decode_tok_s:.1f} tok/s, timer worst {max(lateness, default=0) * 1e3:.1f} ms late",
              flush=True)
        QTimer.singleShot(0, start)

    QTimer.singleShot(0, start)
    app.exec()
    window.close()
    session.close()
    for shown in (False, True):
        sel = [r for r in runs if r[0] == shown]
        if not sel:
            continue
        late = sorted(x for r in sel for x in r[2])
        p99 = late[int(0.99 * (len(late) - 1))] if late else 0.0
        rate = statistics.median(r[1] for r in sel)
        print(f"panel {'shown' if shown else 'hidden'} ({args.mode}, {len(sel)} answers): median {rate:.1f} tok/s; "
              f"20 ms timer worst {max(late, default=0) * 1e3:.1f} ms late, p99 {p99 * 1e3:.1f} ms")
    if args.trace:
        from collections import Counter
        worst: dict[str, float] = {}
        for dt, what in slow:
            worst[what] = max(worst.get(what, 0.0), dt)
        counts = Counter(what for _, what in slow)
        print(f"events handled in over {args.trace:g} ms (count, worst):")
        for what, n in counts.most_common(25):
            times = sorted(dt for dt, w in slow if w == what)
            print(f"  {n:5d}  median {times[len(times) // 2] * 1e3:7.1f} ms  worst {worst[what] * 1e3:7.1f} ms  {what}")
    shown = [r[1] for r in runs if r[0]]
    hidden = [r[1] for r in runs if not r[0]]
    if shown and hidden:
        print(f"panel shown / hidden decode speed: {statistics.median(shown) / statistics.median(hidden):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
