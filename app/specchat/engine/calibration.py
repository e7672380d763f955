"""Measure, once per machine and model file, what a decode costs.

The controller needs the target's cost for a batch of n tokens (n = 1 .. K+1)
and the draft's cost per token.  A few throw-away decodes when a pair loads
give both; the result is cached (keyed by model file, size, mtime, threads and
GPU layers) so later loads start from the right K at once.

The cache is only a cache: an entry of the wrong shape (a cost that is not a finite
positive number, a batch size that is not a number, a size missing) is ignored and
measured again; a file that is not a JSON object at all is moved aside
(``calibration.json.corrupt-TIME``) with one warning.  Writes re-read the file and
merge under its lock, atomically (:mod:`specchat.files`), so processes calibrating at
once keep each other's entries; a cache that cannot be written costs a re-measure.

Timings taken on a busy machine are judged (:mod:`.contention`, when the caller passes a
``watch``): other work on the cores or stolen CPU time while measuring, a verify curve that
falls as the batch grows, or repeats that disagree make the costs noisy.  Noisy costs are
measured once more, after waiting a bounded time for a quieter machine (:func:`.contention.wait_for_quiet`,
up to :data:`~.contention.QUIET_WAIT_S`, told through ``waiting`` and cancelled as the load is); still noisy, they are used but marked (``CostModel.noise``: no claim is
made from them) and never cached, so the next load measures again.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path

from specchat import files

from .contention import QUIET_WAIT_S, MachineWatch, timings_verdict, wait_for_quiet
from .controller import CostModel
from .runtime import LoadCancelled, LoadedModel
from .shapes import CALLS_PER_CHANGE, RECAPTURE_S

CALIBRATION_VERSION = 4  # 4: verify sizes timed steady where shapes matter (CUDA graphs)
PREFIX_TOKENS = 32  # decode at a realistic position, not at an empty cache
# An entry is ~300 bytes: 4 MiB is far more than MAX_ENTRIES; a larger file is damaged.
MAX_CACHE_BYTES = 4 << 20
MAX_ENTRIES = 256  # the newest are kept: every model file changed or re-downloaded adds one
MAX_COST_S = 3600.0  # one decode slower than an hour is not a measurement
_BATCH = re.compile(r"[1-9][0-9]{0,3}")  # the batch sizes measured: 1 .. K+1, K <= 32


def _key(model: LoadedModel, what: str) -> str:
    st = model.path.stat()
    raw = f"{CALIBRATION_VERSION}|{what}|{model.path.resolve()}|{st.st_size}|{st.st_mtime_ns}|" \
          f"{model.threads_now}|{model.options.n_gpu_layers}|{model.options.flash_attn}"  # the threads it ran on
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def batch_sizes(k_max: int) -> list[int]:
    """The target batch sizes a calibration measures for drafts up to ``k_max``."""
    return sorted({1, 2, 3, 5, k_max + 1} | ({9} if k_max + 1 > 9 else set()))


def _time_decode(model: LoadedModel, n: int, filler: int, logits: str) -> float:
    base = len(model.tokens)
    t0 = time.perf_counter()
    model.decode([filler] * n, logits=logits)
    model.logits(-1)  # reading logits waits for the computation
    dt = time.perf_counter() - t0
    model.trim(base)
    return dt


def _repeats(n: int) -> int:
    # the minimum of a few repeats: a shared machine only ever adds time; one token is the
    # reference every decision compares against, so it gets the most repeats
    return 4 if n == 1 else 2 if n <= 3 else 1


def timed_decodes(k_max: int, *, shape_sensitive: bool, draft: bool) -> int:
    """How many timed decodes :func:`measure` makes (its progress counts them)."""
    per_size = [CALLS_PER_CHANGE + max(_repeats(n), 2) if shape_sensitive else _repeats(n)
                for n in batch_sizes(k_max)]
    return 1 + sum(per_size) + (4 if draft else 0)


def measure(target: LoadedModel, draft: LoadedModel | None, k_max: int,
            cancelled: Callable[[], bool] | None = None,
            progress: Callable[[float, float], None] | None = None,
            watch: MachineWatch | None = None) -> CostModel:
    """``cancelled`` is checked between decodes (a 30B target takes seconds to calibrate);
    ``progress(i, n)`` is told after each of the ``n`` timed decodes.  With a ``watch`` the
    timings are judged (the machine while they ran, the curve, the repeats): ``noise`` says
    why they cannot be believed ("" when they can)."""
    filler = 198  # any ordinary token id works; the cost does not depend on it
    costs = CostModel()
    mark = watch.mark() if watch is not None else None
    repeats: dict[int, list[float]] = {}
    total = timed_decodes(k_max, shape_sensitive=target.shape_sensitive, draft=draft is not None)
    done = 0

    def timed(model: LoadedModel, n: int, logits: str) -> float:
        nonlocal done
        if cancelled is not None and cancelled():
            raise LoadCancelled("calibration was cancelled")
        seconds = _time_decode(model, n, filler, logits)
        done += 1
        if progress is not None:
            progress(done, total)
        return seconds

    for m in (target, draft):
        if m is not None:
            m.clear()
            m.decode([filler] * PREFIX_TOKENS, logits="none")
    timed(target, 1, "all")  # warm-up: first decode allocates buffers
    fresh: list[float] = []  # where shapes matter: what each size's first calls paid over its steady cost
    for n in batch_sizes(k_max):
        reps = _repeats(n)
        if target.shape_sensitive:
            # a size is replayed from its third call on (engine/shapes.py): time it steady, the way
            # the loop pays it, and learn what its first calls cost on top (the kit measured a
            # 4-token verify at 1.59 ms steady and 3.1 ms changing size at every call)
            first = [timed(target, n, "all") for _ in range(CALLS_PER_CHANGE)]
            repeats[n] = [timed(target, n, "all") for _ in range(max(reps, 2))]
            costs.verify_s[n] = min(repeats[n])
            fresh += [t - costs.verify_s[n] for t in first]
        else:
            repeats[n] = [timed(target, n, "all") for _ in range(reps)]
            costs.verify_s[n] = min(repeats[n])
    if fresh:
        costs.recapture_s = max(sorted(fresh)[len(fresh) // 2], 0.0)  # the median: one slow call is noise
    if draft is not None:
        timed(draft, 1, "last")
        costs.draft_s["model"] = min(timed(draft, 1, "last") for _ in range(3))
    costs.draft_s["lookup"] = 0.0
    for m in (target, draft):
        if m is not None:
            m.clear()
    if watch is not None:
        costs.noise = watch.judge(mark).also(timings_verdict(costs.verify_s, repeats)).why
    return costs


def cache_key(target: LoadedModel, draft: LoadedModel | None) -> str:
    """The cache entry of this exact setup (files, sizes, mtimes, threads, GPU layers)."""
    return _key(target, "target") + (_key(draft, "draft") if draft is not None else "")


def calibrate(target: LoadedModel, draft: LoadedModel | None, k_max: int, cache_file: Path | None,
              cancelled: Callable[[], bool] | None = None,
              progress: Callable[[float, float], None] | None = None,
              watch: MachineWatch | None = None,
              waiting: Callable[[float, float], None] | None = None,
              quiet_wait_s: float = QUIET_WAIT_S) -> CostModel:
    """Costs from the cache when this exact setup was measured before (no progress then), else
    measured now.  With a ``watch``, noisy timings are measured once more, after waiting up to
    ``quiet_wait_s`` for a quieter machine (``waiting(seconds, quiet_wait_s)`` hears the wait;
    ``cancelled`` ends it: :class:`LoadCancelled`); still noisy, they are returned marked
    (``noise``) and not cached."""
    key = cache_key(target, draft)
    hit = None
    if cache_file is not None:
        hit = cached_costs(cache_file, key, k_max)
    costs = hit if hit is not None else measure(target, draft, k_max, cancelled, progress, watch)
    if hit is None and costs.noise and watch is not None:
        # once more, on a quieter machine if one comes soon: a burst may pass (bounded: the load goes on
        # after quiet_wait_s whatever the machine does; its decodes are not counted again: n of n stays)
        wait_for_quiet(watch, max_s=quiet_wait_s, cancelled=cancelled, progress=waiting)
        if cancelled is not None and cancelled():
            raise LoadCancelled("calibration was cancelled")
        if progress is not None:  # the line is the calibration's again while it measures once more
            total = timed_decodes(k_max, shape_sensitive=target.shape_sensitive, draft=draft is not None)
            progress(total, total)
        costs = measure(target, draft, k_max, cancelled, None, watch)
    if hit is None and cache_file is not None and not costs.noise:
        store_costs(cache_file, key, costs)
    if target.shape_sensitive and costs.recapture_s <= 0.0:
        costs.recapture_s = RECAPTURE_S  # until the rounds measure it (an entry from before it was measured)
    return costs


def _number(v: object) -> float | None:
    """A JSON number as a finite float, or None (a bool, text, NaN, infinity, an int beyond floats)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _is_cost(v: object, *, zero_ok: bool = False) -> bool:
    f = _number(v)
    return f is not None and (0.0 if zero_ok else 1e-12) <= f <= MAX_COST_S


def entry_costs(entry: object, k_max: int = 0) -> CostModel | None:
    """The costs a cache entry holds when every part is usable and the sizes up to ``k_max`` + 1
    were measured; None otherwise (measure again)."""
    if not isinstance(entry, dict):
        return None
    verify, draft = entry.get("verify_s"), entry.get("draft_s")
    if not isinstance(verify, dict) or not isinstance(draft, dict) or not verify:
        return None
    if not all(isinstance(n, str) and _BATCH.fullmatch(n) and _is_cost(v) for n, v in verify.items()):
        return None
    # the prompt-lookup drafter costs nothing by definition; a model drafter always costs something
    if not all(isinstance(d, str) and _is_cost(v, zero_ok=d != "model") for d, v in draft.items()):
        return None
    if k_max > 0 and any(str(n) not in verify for n in batch_sizes(k_max)):
        return None
    costs = CostModel({int(n): float(v) for n, v in verify.items()}, {d: float(v) for d, v in draft.items()})
    recapture = entry.get("recapture_s", 0.0)
    if _is_cost(recapture, zero_ok=True):
        costs.recapture_s = float(recapture)
    return costs


def _measured(entry: dict) -> float:
    return _number(entry.get("measured")) or 0.0


def _read(cache_file: Path) -> tuple[dict, str | None]:
    """The cache's entries and what is wrong with the file as a whole (None: nothing)."""
    try:
        raw, more = files.read_capped(cache_file, MAX_CACHE_BYTES)
    except FileNotFoundError:
        return {}, None
    except OSError:
        return {}, None  # unreadable (permissions, a directory): measure, never crash or move it
    if more:
        return {}, f"larger than {MAX_CACHE_BYTES >> 20} MiB"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return {}, f"not UTF-8 at byte {exc.start}"
    except RecursionError:
        return {}, "not JSON: nested too deeply"
    except ValueError as exc:
        return {}, f"not JSON: {exc}"
    if not isinstance(doc, dict):
        return {}, "not a JSON object"
    return doc, None


def _read_repairing(cache_file: Path) -> dict:
    """The entries; a damaged file is moved aside with one warning.  The caller holds the lock."""
    doc, why = _read(cache_file)
    if why is not None:
        try:
            aside = files.move_aside(cache_file)
        except OSError:
            return {}
        files.warn(f"{cache_file}: damaged calibration cache ({why}): moved aside to {aside}; "
                   "the models are measured again")
    return doc


def cached_costs(cache_file: Path, key: str, k_max: int) -> CostModel | None:
    """The cached costs of ``key``, or None (not there, of the wrong shape, or the file is damaged)."""
    doc, why = _read(cache_file)
    if why is not None:
        try:
            with files.locked(cache_file):  # repair once, whichever process gets here first
                doc = _read_repairing(cache_file)
        except (files.FileBusyError, OSError):
            return None
    return entry_costs(doc.get(key), k_max)


def store_costs(cache_file: Path, key: str, costs: CostModel) -> None:
    """Add one entry: re-read, merge, write atomically, under the lock.  Entries of the wrong
    shape are dropped, and only the newest MAX_ENTRIES kept.  A cache that cannot be written
    only costs a re-measure next time, so failures are ignored."""
    entry = {"verify_s": {str(n): v for n, v in costs.verify_s.items()}, "draft_s": dict(costs.draft_s),
             "measured": time.time(), **({"recapture_s": costs.recapture_s} if costs.recapture_s else {})}
    try:
        with files.locked(cache_file):
            doc = _read_repairing(cache_file)
            kept = {k: e for k, e in doc.items() if isinstance(e, dict) and entry_costs(e) is not None}
            kept[key] = entry
            newest = sorted(kept, key=lambda k: _measured(kept[k]), reverse=True)[:MAX_ENTRIES]
            files.write_text_atomically(cache_file, json.dumps({k: kept[k] for k in newest}, indent=1))
    except (files.FileBusyError, OSError):
        pass
