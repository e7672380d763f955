"""What SpecChat's OpenAI-compatible server costs, measured on the real pair (issue 35's goals).

One process: the pair loaded once, its lane answering on a thread, uvicorn on another, the clients
(httpx2) on the main thread, as ``specchat serve`` runs them (server and engine share a process).

- **first byte**: the time from the engine handing over an answer's first text to the client reading
  its first content chunk (one clock: ``time.monotonic`` in one process);
- **overhead per token**: the same prompt answered directly (``backend.answer``, what ``specchat chat``
  runs) and through the server, alternated A B A B, compared as seconds per token;
- **flood**: ``--flood`` requests sent at once, ``--disconnects`` of them streamed and dropped after
  their first chunk; every other must be answered once, the dropped ones cancelled, and the process's
  memory after a second flood no higher than after the first.

    python scripts/measure_api.py [--target FILE --draft FILE] [--reps 6] [--tokens 64] [--flood 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import specchat  # noqa: F401,I001  (loads llama.cpp's library before numpy)
import test_models

import httpx2
import psutil

from specchat.backends.local import LocalBackend
from specchat.engine.answer import AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done, TokensEmitted
from specchat.engine.pair import PairConfig, SpeculativePair
from specchat.engine.runtime import ModelOptions
from specchat.engine.settings import Mode
from specchat.serve.http import Api, ApiServer
from specchat.serve.lane import BackendLane

PROMPT = "Write a Python function that checks whether a string is a palindrome, with a docstring."


class Stamped:
    """The backend, with the monotonic time of each answer's first text kept."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.first_text: list[float] = []
        self.ends: list[Done] = []

    @property
    def info(self):
        return self.backend.info

    def answer(self, request, cancel):
        first = True
        for ev in self.backend.answer(request, cancel):
            if first and isinstance(ev, TokensEmitted) and ev.answer:
                self.first_text.append(time.monotonic())
                first = False
            if isinstance(ev, Done):
                self.ends.append(ev)
            yield ev

    def close(self) -> None:
        self.backend.close()


def direct(backend: Stamped, mode: Mode, tokens: int) -> tuple[float, int]:
    done = None
    for ev in backend.backend.answer(AnswerRequest(({"role": "user", "content": PROMPT},), mode=mode,
                                                   max_tokens=tokens), CancelToken()):
        if isinstance(ev, Done):
            done = ev
    assert done is not None
    return done.stats.counts.decode_s, done.stats.counts.decoded


def through(url: str, mode: Mode, tokens: int, backend: Stamped) -> tuple[float, int, float]:
    """(decode seconds as the client saw them, tokens after the first, first-byte delay)."""
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens, "stream": True,
            "stream_options": {"include_usage": True}, "specchat": {"mode": mode.value}}
    first_seen = last_seen = None
    usage = None
    with httpx2.stream("POST", url + "/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                now = time.monotonic()
                first_seen = first_seen or now
                last_seen = now
    assert usage is not None and first_seen is not None and last_seen is not None
    delay = first_seen - backend.first_text[-1]
    return last_seen - first_seen, usage["completion_tokens"] - 1, delay


def flood(url: str, n: int, drop: int, tokens: int) -> dict:
    results: list[int] = []
    lock = threading.Lock()

    def ask(i: int) -> None:
        body = {"messages": [{"role": "user", "content": f"Say the number {i} in words."}], "max_tokens": tokens,
                "stream": i < drop}
        try:
            if i < drop:
                with httpx2.stream("POST", url + "/chat/completions", json=body, timeout=900) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: ") and '"content"' in line:
                            break  # first chunk read: vanish
                status = -1
            else:
                status = httpx2.post(url + "/chat/completions", json=body, timeout=900).status_code
        except httpx2.HTTPError:
            status = -2
        with lock:
            results.append(status)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"answered": results.count(200), "dropped": results.count(-1), "other": sorted(set(results) - {200, -1})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--flood", type=int, default=100)
    ap.add_argument("--disconnects", type=int, default=20)
    ap.add_argument("--flood-tokens", type=int, default=8)
    args = ap.parse_args()
    target = args.target or test_models.ensure("qwen-1.5b", quiet=True)
    draft = args.draft or test_models.ensure("qwen-0.5b", quiet=True)
    pair = SpeculativePair(PairConfig(target, draft, ModelOptions(n_ctx=2048)), CancelToken())
    backend = Stamped(LocalBackend(pair))
    lane = BackendLane(backend, waiting=max(args.flood, 32))  # type: ignore[arg-type]
    server = ApiServer(Api(lane), "127.0.0.1", 0)
    stop = threading.Event()
    worker = threading.Thread(target=lane.run, args=(stop,), daemon=True)
    worker.start()
    server.start()
    mode = Mode(args.mode)
    print(f"{target.name} + {draft.name}, mode {mode}, {args.tokens} tokens, {args.reps} reps A/B; "
          f"{psutil.cpu_count()} CPUs, load {psutil.getloadavg()[0]:.2f}", flush=True)
    try:
        through(server.url, mode, 8, backend)  # warm both paths
        direct(backend, mode, 8)
        per_token = {"direct": [], "server": []}
        delays = []
        for rep in range(args.reps):
            order = ("direct", "server") if rep % 2 == 0 else ("server", "direct")
            for way in order:
                if way == "direct":
                    s, n = direct(backend, mode, args.tokens)
                else:
                    s, n, delay = through(server.url, mode, args.tokens, backend)
                    delays.append(delay)
                per_token[way].append(s / n)
                print(f"  #{rep} {way:<6} {n / s:6.2f} tok/s", flush=True)
        d, v = statistics.median(per_token["direct"]), statistics.median(per_token["server"])
        print(f"\ndecode tok/s, median of {args.reps}: direct {1 / d:.2f}, through the server {1 / v:.2f} "
              f"(server/direct {d / v:.3f}x); per token: {(v - d) * 1e3:+.2f} ms ({(v - d) / d:+.1%} of a token)")
        print(f"first byte after the engine's first text: median {statistics.median(delays) * 1e3:.1f} ms, "
              f"worst {max(delays) * 1e3:.1f} ms")
        me = psutil.Process()
        rss = []
        for round_no in range(2):
            ends_before = len(backend.ends)
            t0 = time.perf_counter()
            got = flood(server.url, args.flood, args.disconnects, args.flood_tokens)
            deadline = time.monotonic() + 120
            while len(backend.ends) - ends_before < args.flood and time.monotonic() < deadline:
                time.sleep(0.05)
            ends = backend.ends[ends_before:]
            cancelled = sum(e.stop_reason.value == "cancelled" for e in ends)
            rss.append(me.memory_info().rss)
            print(f"flood {round_no + 1}: {args.flood} requests ({args.disconnects} dropped after their first "
                  f"chunk) in {time.perf_counter() - t0:.0f} s: {got['answered']} answered (200), "
                  f"{got['dropped']} dropped, other {got['other']}; the engine ended {len(ends)} answers, "
                  f"{cancelled} of them cancelled; RSS {rss[-1] / 2**20:.0f} MiB", flush=True)
        print(f"RSS after the second flood / after the first: {rss[1] / rss[0]:.3f}")
    finally:
        stop.set()
        server.stop()
        worker.join(30)
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
