"""Which pair to load, and how: one answer for the window and the command line.  Qt-free.

- :func:`resolve_pair` turns a pair id (a catalog pair that was pulled, or an installed
  model's name) into files;
- :func:`default_pair` is the pair used when none is named: the config's target and
  draft, else the last pair loaded (``Registry.last_pair``);
- :func:`pair_config` builds the engine's :class:`PairConfig` from the settings, the
  profile and the caller's overrides (command-line flags);
- :func:`fit_problem` says, before anything is loaded, when the pair clearly cannot fit
  in free memory (the header-only estimate of :mod:`specchat.models.fit`).

Errors are one line: :class:`PairError` here, ``RegistryError`` / ``CatalogError`` for a
damaged registry or user catalog, ``ConfigError`` for a bad override.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specchat.config import BY_KEY, AppConfig, as_int
from specchat.engine.pair import PairConfig
from specchat.engine.runtime import ModelOptions
from specchat.errors import UserError
from specchat.profile import Profile

OVERRIDES = ("n_ctx", "threads", "gpu_layers", "draft_gpu_layers", "k_max")


class PairError(UserError, ValueError):
    """The pair cannot be found or loaded as named; one line saying what to do."""


# -- which files --------------------------------------------------------------------


def resolve_pair(pair_id: str, profile: Profile) -> tuple[Path, Path | None]:
    """(target, draft or None) for ``pair_id``: a catalog pair (or single model) whose files were
    pulled, found by the hub ``source`` the registry keeps for every download; else an installed
    model whose registry name or file name (without '.gguf') is ``pair_id``, alone."""
    from specchat.models.catalog import load_catalog
    from specchat.models.registry import Registry

    registry = Registry(profile.registry)
    pair = next((p for p in load_catalog(profile.user_catalog) if p.id == pair_id), None)
    if pair is not None:

        def installed(ref: str) -> Path | None:
            found = [m for m in registry.by_source(ref) if m.is_current()]
            return Path(found[0].path) if found else None

        pull = f"run 'specchat models pull {pair_id}'"
        target = installed(pair.target.ref)
        if target is None:
            raise PairError(f"pair '{pair_id}' is not downloaded: {pull}")
        if not pair.drafts:
            return target, None
        for d in pair.drafts:
            draft = installed(d.ref)
            if draft is not None:
                return target, draft
        raise PairError(f"pair '{pair_id}': its draft model is not downloaded: {pull}")
    found = {m.path: m for m in registry.find(pair_id) if m.is_current()}
    if len(found) == 1:
        return Path(next(iter(found))), None
    if len(found) > 1:
        raise PairError(f"'{pair_id}' names {len(found)} installed models ({', '.join(sorted(found))}): "
                        "give the file with --target")
    raise PairError(f"no pair or installed model '{pair_id}' (see 'specchat models list')")


def default_pair(config: AppConfig, profile: Profile) -> tuple[Path, Path | None] | None:
    """The config's target and draft; without a target there, the last pair loaded; else None.

    The registry is read only when the config names no target (RegistryError when damaged).
    """
    target = config.model_path("target")
    if target is not None:
        return target, config.model_path("draft")
    from specchat.models.registry import Registry

    return Registry(profile.registry).last_pair()


def record_last_pair(profile: Profile, target: Path, draft: Path | None) -> None:
    """Remember the pair that loaded (the default next time); RegistryError when the registry is damaged."""
    from specchat.models.registry import Registry

    Registry(profile.registry).set_last_pair(target, draft)


# -- how to load them ---------------------------------------------------------------


def pair_config(config: AppConfig, profile: Profile, target: Path, draft: Path | None = None,
                **overrides: int | None) -> PairConfig:
    """The engine's settings for this pair: model options for target and draft from the config's
    n_ctx, gpu_layers, draft_gpu_layers and threads, the controller from ``config.controller()``,
    the profile's calibration cache.

    ``overrides`` (keys of :data:`OVERRIDES`; None: the config's value) win over the config and
    are checked like it (ConfigError, one line).  A ``k_max`` below the config's k_min lowers
    k_min with it.  A missing file is a :class:`PairError` naming it.
    """
    unknown = set(overrides) - set(OVERRIDES)
    if unknown:
        raise TypeError(f"pair_config: unknown override(s) {sorted(unknown)}")
    for path in (target, draft):
        if path is not None and not Path(path).expanduser().is_file():
            raise PairError(f"{path}: no such file")
    v = {k: config[k] for k in OVERRIDES}
    for key, value in overrides.items():
        if value is not None:
            v[key] = BY_KEY[key].check(value)
    controller = config.controller()
    if v["k_max"] != controller.k_max:
        k_max = as_int(v["k_max"])
        controller = replace(controller, k_max=k_max, k_min=min(controller.k_min, k_max))
    topts = ModelOptions(n_ctx=as_int(v["n_ctx"]), n_gpu_layers=as_int(v["gpu_layers"]),
                         n_threads=as_int(v["threads"]))
    dopts = replace(topts, n_gpu_layers=as_int(v["draft_gpu_layers"]))
    return PairConfig(
        target=Path(target).expanduser(), draft=Path(draft).expanduser() if draft is not None else None,
        target_options=topts, draft_options=dopts, controller=controller,
        calibration_cache=profile.calibration_cache,
    )


def fit_problem(pair: PairConfig, *, free: tuple[int | None, int] | None = None) -> str | None:
    """One line when the pair clearly cannot fit, else None.

    "Clearly": :func:`specchat.models.fit.fit_pair` with no safety margin finds no place for
    weights, both KV caches and compute buffers in free VRAM and RAM together (VRAM counts
    only when some layers are to go to the GPU).  ``free``: (free VRAM or None, free RAM),
    measured now when not given.  A file whose header cannot be read is left to the loader,
    which says what is wrong with it.
    """
    from specchat.models.fit import FitError, estimate_files, fit_pair, free_memory
    from specchat.models.gguf_header import GGUFError

    paths = [pair.target] + ([pair.draft] if pair.draft is not None else [])
    try:
        models = estimate_files(paths, n_ctx=pair.target_options.n_ctx,
                                flash_attn=pair.target_options.flash_attn is not False)
    except FitError as exc:  # a context length no estimate (and no model) can take
        return str(exc)
    except (GGUFError, OSError):
        return None
    vram, ram = free if free is not None else free_memory()
    draft_opts = pair.draft_options or pair.target_options
    if pair.target_options.n_gpu_layers == 0 and (pair.draft is None or draft_opts.n_gpu_layers == 0):
        vram = None  # CPU only by request: VRAM does not help
    verdict = fit_pair(models, free_vram=vram, free_ram=ram, margin=0.0)
    if verdict.fits:
        return None
    names = " + ".join(Path(p).name for p in paths)
    return f"{names}: {verdict.summary}"
