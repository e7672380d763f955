"""Measure, once per machine and model file, what a decode costs.

The controller needs the target's cost for a batch of n tokens (n = 1 .. K+1)
and the draft's cost per token.  A few throw-away decodes when a pair loads
give both; the result is cached (keyed by model file, size, mtime, threads and
GPU layers) so later loads start from the right K at once.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from .controller import CostModel
from .runtime import LoadCancelled, LoadedModel

CALIBRATION_VERSION = 3
PREFIX_TOKENS = 32  # decode at a realistic position, not at an empty cache


def _key(model: LoadedModel, what: str) -> str:
    st = model.path.stat()
    raw = f"{CALIBRATION_VERSION}|{what}|{model.path.resolve()}|{st.st_size}|{st.st_mtime_ns}|" \
          f"{model.n_threads}|{model.options.n_gpu_layers}|{model.options.flash_attn}"
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def _sizes(k_max: int) -> list[int]:
    return sorted({1, 2, 3, 5, k_max + 1} | ({9} if k_max + 1 > 9 else set()))


def _time_decode(model: LoadedModel, n: int, filler: int, logits: str) -> float:
    base = len(model.tokens)
    t0 = time.perf_counter()
    model.decode([filler] * n, logits=logits)
    model.logits(-1)  # reading logits waits for the computation
    dt = time.perf_counter() - t0
    model.trim(base)
    return dt


def measure(target: LoadedModel, draft: LoadedModel | None, k_max: int,
            cancelled: Callable[[], bool] | None = None) -> CostModel:
    """``cancelled`` is checked between decodes (a 30B target takes seconds to calibrate)."""
    filler = 198  # any ordinary token id works; the cost does not depend on it
    costs = CostModel()

    def timed(model: LoadedModel, n: int, logits: str) -> float:
        if cancelled is not None and cancelled():
            raise LoadCancelled("calibration was cancelled")
        return _time_decode(model, n, filler, logits)

    for m in (target, draft):
        if m is not None:
            m.clear()
            m.decode([filler] * PREFIX_TOKENS, logits="none")
    timed(target, 1, "all")  # warm-up: first decode allocates buffers
    # the minimum of a few repeats: a shared machine only ever adds time; one token is the
    # reference every decision compares against, so it gets the most repeats
    for n in _sizes(k_max):
        reps = 4 if n == 1 else 2 if n <= 3 else 1
        costs.verify_s[n] = min(timed(target, n, "all") for _ in range(reps))
    if draft is not None:
        timed(draft, 1, "last")
        costs.draft_s["model"] = min(timed(draft, 1, "last") for _ in range(3))
    costs.draft_s["lookup"] = 0.0
    for m in (target, draft):
        if m is not None:
            m.clear()
    return costs


def calibrate(target: LoadedModel, draft: LoadedModel | None, k_max: int, cache_file: Path | None,
              cancelled: Callable[[], bool] | None = None) -> CostModel:
    """Costs from the cache when this exact setup was measured before, else measured now."""
    key = _key(target, "target") + (_key(draft, "draft") if draft is not None else "")
    cache: dict = {}
    if cache_file is not None and cache_file.exists():
        try:
            cache = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            cache = {}
    hit = cache.get(key)
    if hit and all(str(n) in hit["verify_s"] for n in _sizes(k_max)):
        return CostModel({int(n): v for n, v in hit["verify_s"].items()}, hit["draft_s"])
    costs = measure(target, draft, k_max, cancelled)
    if cache_file is not None:
        cache[key] = {"verify_s": costs.verify_s, "draft_s": costs.draft_s, "measured": time.time()}
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(cache, indent=1))
            tmp.replace(cache_file)
        except OSError:
            pass  # a cache that cannot be written only costs a re-measure next time
    return costs
