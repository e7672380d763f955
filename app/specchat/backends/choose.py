"""Which backend answers: one decision for the window and the command line.  Qt-free.

:func:`choose` turns what a user picked (a chat's settings in the window, flags on the
command line) into the config of one backend, which :func:`.factory.open_backend` opens:

- ``backend=""``: a pair of models loaded in this process (:class:`~specchat.engine.pair.PairConfig`
  from :func:`.pairs.pair_config`: the settings, the profile, the caller's overrides); but a
  draft that is a trained head (:func:`trained_head_spec`) makes it the next case, with the
  head's own ``--spec-type``;
- ``backend=MANAGED`` (``"llama-server"``): the same pair in a llama-server SpecChat starts
  and stops, drafting with llama.cpp's ``spec_type`` (the trained drafters its Python API
  cannot reach); a drafter that does not fit the target or the type is refused here, with
  the field that disagrees (:func:`~specchat.remote.llama_server.spec_type_offers`);
- anything else: a server of Settings → Servers by name, or a URL.

Every way it cannot is one line: :class:`~.pairs.PairError` for a pair (none chosen, a
missing file), :class:`ChoiceError` for a server, ``ConfigError`` for a bad override.
"""

from __future__ import annotations

from pathlib import Path

from specchat.config import AppConfig, as_int
from specchat.errors import UserError
from specchat.models.drafter_heads import drafter_kind
from specchat.models.gguf_header import GGUFError, read_file_header
from specchat.profile import Profile
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import MANAGED, spec_type_offers
from specchat.remote.servers import ServerList, servers_file
from specchat.store import ChatSettings

from .factory import BackendConfig
from .pairs import OVERRIDES, PairError, pair_config
from .remote import ManagedSpec, RemoteConfig

NO_PAIR = "no model pair chosen for this chat: choose one with Pair…"


class ChoiceError(UserError, ValueError):
    """The backend cannot be chosen as named (an unknown server); one line saying what to do."""


def trained_head_spec(draft: Path | None) -> str:
    """llama-server's ``--spec-type`` for ``draft`` when it is a trained head (MTP, EAGLE-3, DFlash, DSpark):
    only a llama-server can draft with one, so a chat given one runs there; "" for a draft model, none, or
    a file whose header cannot be read (the loader says what is wrong with it)."""
    if draft is None:
        return ""
    try:
        kind = drafter_kind(read_file_header(Path(draft).expanduser()))
    except (GGUFError, OSError):
        return ""
    return kind.spec_type if kind is not None and kind.trained else ""


def choose(config: AppConfig, profile: Profile, *, backend: str = "", target: Path | None = None,
           draft: Path | None = None, spec_type: str = "draft-simple", no_pair: str = NO_PAIR,
           **overrides: int | None) -> BackendConfig:
    """The config of the backend ``backend`` names (see the module docstring).  ``overrides`` (keys of
    :data:`~.pairs.OVERRIDES`, None: the config's value) win over the settings for a pair here and for
    a managed llama-server's context and threads; a remote server keeps its own.  ``no_pair``: the
    line when a pair is needed and ``target`` is None, in the caller's words."""
    if not backend and trained_head_spec(draft):  # a trained head: the pair runs in SpecChat's llama-server
        backend, spec_type = MANAGED, trained_head_spec(draft)
    if backend and backend != MANAGED:
        try:
            return RemoteConfig(ServerList(servers_file(profile)).resolve(backend))
        except ServerError as exc:
            raise ChoiceError(str(exc)) from None
    if target is None:
        raise PairError(no_pair)
    if not backend:
        return pair_config(config, profile, target, draft, **overrides)
    unknown = set(overrides) - set(OVERRIDES)
    if unknown:
        raise TypeError(f"choose: unknown override(s) {sorted(unknown)}")
    checked = pair_config(config, profile, target, draft, **overrides)  # the same checks as a pair here
    if draft is not None or spec_type not in ("draft-simple", "none"):  # draft-simple with no draft: plain
        why = spec_type_offers((spec_type,), checked.target, checked.draft).get(spec_type, "")
        if why:  # a head llama.cpp would refuse, abort on, or silently not draft with: said before it starts
            raise PairError(f"llama-server --spec-type {spec_type}: {why}")
    n_threads = checked.target_options.n_threads
    gpu_layers = overrides.get("gpu_layers")
    # the n-gram types and none draft from the text alone: a draft model would only take memory
    draft_model = None if spec_type == "none" or spec_type.startswith("ngram") else checked.draft
    return RemoteConfig.managed_server(ManagedSpec(
        checked.target, draft_model, spec_type=spec_type, n_ctx=checked.target_options.n_ctx,
        threads=n_threads or None, gpu_layers=None if gpu_layers is None else as_int(gpu_layers),
        log_dir=profile.cache_dir / "llama-server-logs"))


def for_chat(settings: ChatSettings, config: AppConfig, profile: Profile) -> BackendConfig:
    """The backend a chat's settings ask for, with this app's settings: :func:`choose`, as the window calls it.

    A chat on SpecChat's own llama-server with its speculation switch off gets that server with no drafter
    (``--spec-type none``): llama-server drafts as it was started and no request can turn it off
    (tools/server/server-schema.cpp:198-227 reads no per-request speculative field), so plain decoding
    is a restart of the same build without the head, and on again is a restart with it."""
    backend, target, draft = settings.backend, settings.target, settings.draft
    spec_type = settings.server_spec_type
    if settings.speculation == "baseline" and (backend == MANAGED or (not backend and trained_head_spec(draft))):
        backend, spec_type = MANAGED, "none"
    return choose(config, profile, backend=backend, target=target, draft=draft, spec_type=spec_type)
