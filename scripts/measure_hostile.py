"""Measure SpecChat against hostile servers: each class's exit code, line, wall time and peak memory,
and how long Stop and close take whatever the server does.

Runs the hostile server of the test suite (tests/helpers/hostile_server.py) on 127.0.0.1:

    python scripts/measure_hostile.py                       # this tree
    PYTHONPATH=OLD/app python scripts/measure_hostile.py    # another tree's app, the same servers

A CLI run is a child process (``specchat chat --server URL --max-tokens 8 hi``), killed after
``--limit`` seconds; its resident memory is sampled every 20 ms (psutil) for the peak.  Stop and
close are timed in this process: the answer runs in a thread, the request reaches the server,
then the answer's token is cancelled (Stop) or the backend closed (close).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy: the package's own order)
from helpers.hostile_server import HostileServer, ask_chat  # noqa: E402

CLI_MODES = ("no_headers", "trickle_headers", "endless_line", "huge_counts", "huge_error", "past_max_tokens")
STOP_MODES = ("no_headers", "trickle_headers", "endless_line", "past_max_tokens")
CHECK_MODES = ("deep_json", "slow_models")


def run_child(args: list[str], limit: float, max_mib: int) -> dict:
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "specchat", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    peak = 0
    proc = psutil.Process(child.pid)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(child.stderr.read() if child.stderr else ""), daemon=True)
    reader.start()
    too_big = False
    while child.poll() is None and time.monotonic() - t0 < limit:
        try:
            peak = max(peak, proc.memory_info().rss)
        except psutil.Error:
            break
        if peak > max_mib << 20:
            too_big = True
            break
        time.sleep(0.02)
    killed = child.poll() is None
    if killed:
        child.kill()
    child.wait()
    reader.join(5)
    lines = [line for line in "".join(err).splitlines() if line.startswith("specchat:")]
    return {"rc": ("killed past " + (f"{max_mib} MiB" if too_big else f"{limit:g} s")) if killed else child.returncode, "wall_s": round(time.monotonic() - t0, 2),
            "peak_mib": round(peak / 2**20), "line": (lines[-1] if lines else "")[:160]}


def time_stop(mode: str, how: str, limit: float) -> float | str:
    from specchat.backends.remote import RemoteBackend, RemoteConfig
    from specchat.engine.answer import AnswerRequest
    from specchat.engine.pair import CancelToken
    from specchat.remote.servers import ServerConfig

    class NoKey:
        def get(self, name: str) -> str:
            return ""

    with HostileServer(mode) as server:
        backend = RemoteBackend.connect(RemoteConfig(ServerConfig("hostile", server.url)), keychain=NoKey())  # type: ignore[arg-type]
        cancel = CancelToken()
        request = AnswerRequest(({"role": "user", "content": "hi"},), max_tokens=1_000_000)
        t = threading.Thread(target=lambda: list(backend.answer(request, cancel)), daemon=True)
        t.start()
        server.requested.wait(10)
        time.sleep(0.3)
        t0 = time.monotonic()
        if how == "stop":
            cancel.cancel()
        else:
            backend.close()
        t.join(limit)
        took = time.monotonic() - t0
        if how == "stop":
            threading.Thread(target=backend.close, daemon=True).start()
        return round(took, 2) if not t.is_alive() else f">{limit:g} (still waiting)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=60.0, help="seconds before a run is killed or a wait given up")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--only", choices=("cli", "stop"), help="only the CLI runs, or only Stop and close")
    ap.add_argument("--max-mib", type=int, default=2048, help="kill a CLI run whose memory passes this")
    ap.add_argument("--stop-modes", default=",".join(STOP_MODES),
                    help="the modes to time Stop and close in (in this process: leave out what grows memory without bound)")
    args = ap.parse_args()
    out: dict[str, dict] = {}
    for mode in CLI_MODES if args.only != "stop" else ():
        with HostileServer(mode) as server:
            out[f"chat {mode}"] = run_child(ask_chat(server.url, "--max-tokens", "8"), args.limit, args.max_mib)
        print(f"chat {mode:16} {json.dumps(out[f'chat {mode}'])}", flush=True)
    for mode in CHECK_MODES if args.only != "stop" else ():
        with HostileServer(mode) as server:
            out[f"servers check {mode}"] = run_child(["servers", "check", server.url], args.limit, args.max_mib)
        print(f"servers check {mode:9} {json.dumps(out[f'servers check {mode}'])}", flush=True)
    for mode in [m for m in args.stop_modes.split(",") if m] if args.only != "cli" else []:
        for how in ("stop", "close"):
            out[f"{how} {mode}"] = {"seconds": time_stop(mode, how, args.limit)}
            print(f"{how:5} {mode:16} {out[f'{how} {mode}']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
