"""How responsive is the window while the real pair generates?  (issue 4's event-loop check)

Opens the real window offscreen on a throw-away database, sends one prompt to the
pinned Qwen pair, and meanwhile runs a 20 ms timer; prints the worst and the 99th
percentile lateness of that timer, and the answer's decode speed.

    python scripts/measure_responsiveness.py [--tokens 200] [--mode auto] [--shot out.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--mode", default="auto", choices=["auto", "draft", "lookup", "off"])
    ap.add_argument("--prompt", default="Write a Python class for a bank account with deposit, withdraw and "
                                        "a transaction history, with docstrings.")
    ap.add_argument("--shot", type=Path, default=None, help="save a screenshot of the window at the end")
    args = ap.parse_args()

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    import test_models
    from specchat.models.registry import Registry
    from specchat.store import ChatSettings, open_store
    from specchat.ui.main_window import MainWindow
    from specchat.workers.generation import GenerationService

    target, draft = test_models.ensure("qwen-1.5b"), test_models.ensure("qwen-0.5b")
    tmp = Path(tempfile.mkdtemp())
    app = QApplication([])
    store = open_store(tmp / "db.sqlite3")
    store.create_chat("New chat", ChatSettings(target=target, draft=draft, speculation=args.mode,
                                               max_tokens=args.tokens))
    service = GenerationService()
    window = MainWindow(store, service, registry=Registry(tmp / "registry.json"))
    window.resize(1200, 800)
    window.show()
    lateness: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        if window.generating:
            lateness.append(now - last[0] - 0.020)
        last[0] = now

    timer = QTimer(interval=20)
    timer.timeout.connect(tick)
    timer.start()

    def start() -> None:
        if window.pair_info is None:
            QTimer.singleShot(100, start)
            return
        window.composer.setPlainText(args.prompt)
        window.send()
        QTimer.singleShot(100, wait)

    def wait() -> None:
        if window.generating:
            QTimer.singleShot(100, wait)
            return
        if args.shot:
            window.grab().save(str(args.shot))
        app.quit()

    QTimer.singleShot(0, start)
    app.exec()
    service.shutdown()
    stats = store.messages(window.chat_id)[-1].stats
    lateness.sort()
    p99 = lateness[int(0.99 * (len(lateness) - 1))] if lateness else 0.0
    print(f"{stats.tokens} tokens at {stats.decode_tok_s:.1f} tok/s ({args.mode}); 20 ms timer during "
          f"generation: {len(lateness)} ticks, worst {max(lateness, default=0) * 1e3:.1f} ms late, "
          f"p99 {p99 * 1e3:.1f} ms late")
    return 0


if __name__ == "__main__":
    sys.exit(main())
