"""The catalog's "On this machine" column from the GGUF headers, not from file sizes.

For each pair the target and its first draft are estimated by :mod:`specchat.models.fit` from
their headers: a file already installed is read locally; one on the hub header-only
(:func:`hub_search.entry_facts`: range reads of its first megabytes).  What the estimate
needs from a header (:class:`fit.ModelFacts`, a few hundred bytes) is kept on disk, one
small JSON file per hub file, written atomically, so the dialog costs the network once:

- keyed by the file's sha256 when the catalog pins one (the content cannot change under it),
  else by repo, file name and revision, then trusted for :data:`UNPINNED_TTL_S` (a branch
  such as ``main`` may be re-uploaded);
- a cache file that is damaged, too large, of another version or of another key is ignored
  and written again: it is an optimisation, never a reason to fail.

A pair whose header cannot be read (offline, gated, a slow hub, a bad file) keeps the size
estimate of :func:`fit.fit_sizes`, marked ``estimated`` and with the reason at the end of its
summary.  The whole call is bounded by ``deadline_s``; ``cancel`` is looked at between
files (DownloadCancelled).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, fields, replace
from pathlib import Path

from specchat import bounded_json
from specchat.cancel import CancelToken
from specchat.files import read_capped, write_text_atomically

from .catalog import CatalogModel, CatalogPair
from .fit import (
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
    FitVerdict,
    ModelFacts,
    estimate_facts,
    fit_pair,
    fit_sizes,
    join_split,
    model_facts,
    read_split,
)
from .gguf_header import GGUFError
from .hub import DownloadCancelled, DownloadError
from .hub_names import HubNameError
from .hub_search import entry_facts, entry_of
from .remote import HEADER_DEADLINE_S

CACHE_VERSION = 1
CACHE_MAX_BYTES = 64 << 10  # one entry is ~400 bytes
UNPINNED_TTL_S = 7 * 24 * 3600.0
CATALOG_FIT_DEADLINE_S = 120.0
_FACT_MAX = 1 << 62


def catalog_fits(
    pairs: list[CatalogPair],
    *,
    free_vram: int | None,
    free_ram: int,
    n_ctx: int = 4096,
    cache_dir: Path,
    token: str | None = None,
    cancel: CancelToken | None = None,
    installed: Mapping[str, Path] | None = None,
    deadline_s: float = CATALOG_FIT_DEADLINE_S,
) -> dict[str, FitVerdict]:
    """Pair id -> verdict for its target and first draft at ``n_ctx`` tokens.  ``installed``:
    "owner/repo/file" -> local path of files already downloaded (read instead of the hub)."""
    end = time.monotonic() + deadline_s
    have = dict(installed or {})
    out: dict[str, FitVerdict] = {}
    for pair in pairs:
        files = pair.files()
        models, problem = [], ""
        for m in files:
            if cancel is not None and cancel.cancelled:
                raise DownloadCancelled("fit check cancelled")
            try:
                facts = _facts(m, cache_dir, token, have.get(m.ref), end)
            except (DownloadError, GGUFError, HubNameError) as exc:
                problem = str(exc)
                break
            models.append(estimate_facts(facts, n_ctx=n_ctx, name=Path(m.file).name))
        if problem:
            guess = fit_sizes([(m.file, m.size or 0) for m in files], free_vram=free_vram, free_ram=free_ram,
                              n_ctx=n_ctx)
            out[pair.id] = replace(guess, summary=f"{guess.summary}; estimated from file sizes, the header "
                                                  f"could not be read ({problem})")
        else:
            out[pair.id] = fit_pair(models, free_vram=free_vram, free_ram=free_ram)
    return out


def _facts(m: CatalogModel, cache_dir: Path, token: str | None, local: Path | None, end: float) -> ModelFacts:
    if local is not None and local.exists():
        return model_facts(join_split(read_split(local)))
    key = f"sha256:{m.sha256.lower()}" if m.sha256 else f"{m.repo}/{m.file}@main"
    path = cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"
    cached = _load(path, key, pinned=m.sha256 is not None)
    if cached is not None:
        return cached
    left = end - time.monotonic()
    if left <= 0:
        raise DownloadError("not read: the hub took too long for the whole catalog")
    got = entry_facts(entry_of(m.hub_file(), token=token), token=token, deadline_s=min(HEADER_DEADLINE_S, left))
    with contextlib.suppress(OSError):  # a read-only or full cache dir costs a second read next time, no more
        write_text_atomically(path, json.dumps({"version": CACHE_VERSION, "key": key, "etag": got.etag,
                                                "saved": time.time(), "facts": asdict(got.facts)}))
    return got.facts


def _load(path: Path, key: str, *, pinned: bool) -> ModelFacts | None:
    """The cached facts, or None when absent, stale or not exactly what this module writes."""
    try:
        raw, more = read_capped(path, CACHE_MAX_BYTES)
        doc = bounded_json.loads(raw) if not more else None  # a file nested too deep: damaged, not a crash
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION or doc.get("key") != key:
        return None
    saved = doc.get("saved")
    if not isinstance(saved, int | float) or not math.isfinite(saved):
        return None
    if not pinned and not 0 <= time.time() - saved <= UNPINNED_TTL_S:
        return None
    return _facts_from(doc.get("facts"))


def _facts_from(raw: object) -> ModelFacts | None:
    if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(ModelFacts)}:
        return None
    name = raw["name"]
    if not isinstance(name, str) or len(name) > 200:
        return None
    numbers = {k: v for k, v in raw.items() if k != "name"}
    # the bounds model_facts reads a header with: a damaged file cannot make the arithmetic explode
    hi = {"n_layers": MAX_LAYERS, "n_vocab": MAX_VOCAB, "weights": _FACT_MAX, "per_layer": _FACT_MAX,
          "repack": _FACT_MAX}
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi.get(k, MAX_WIDTH)
               for k, v in numbers.items()):
        return None
    return ModelFacts(name=name, **numbers)
