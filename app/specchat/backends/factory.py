"""The one factory of backends: a config in, an open :class:`~.protocol.Backend` out.

Like qutebrowser's ``browsertab.create()``: callers (the generation thread, the CLI) never
ask which kind of backend a config names.  :data:`OPENERS` maps each kind of config to the
opener of its backend; a new backend is its own module in this package (a class with
``open(config, cancel)``, ``info``, ``answer`` and ``close``), one line here, and the
branch of :func:`.choose.choose` that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from specchat.engine.cancel import CancelToken
from specchat.engine.pair import PairConfig
from specchat.engine.progress import ProgressSink

from .local import LocalBackend, PairFactory
from .protocol import Backend
from .remote import RemoteBackend, RemoteConfig

BackendConfig = PairConfig | RemoteConfig
Opener = Callable[[Any, CancelToken, ProgressSink | None], Backend]


class BackendFactory(Protocol):
    def __call__(self, config: BackendConfig, cancel: CancelToken,
                 progress: ProgressSink | None = None) -> Backend: ...


OPENERS: Mapping[type, Opener] = {
    PairConfig: LocalBackend.open,  # a pair of GGUF models, loaded here
    RemoteConfig: RemoteBackend.open,  # a server (started first when SpecChat manages it)
}


def open_backend(config: BackendConfig, cancel: CancelToken, progress: ProgressSink | None = None, *,
                 openers: Mapping[type, Opener] = OPENERS) -> Backend:
    """Open the backend ``config`` names, its load's steps told to ``progress`` (a pair's weights and
    calibration).  A :class:`~specchat.errors.UserError` (one line) when it cannot be opened;
    :class:`~specchat.engine.runtime.LoadCancelled` when ``cancel`` gave it up."""
    opener = openers.get(type(config))
    if opener is None:
        raise TypeError(f"no backend opens a {type(config).__name__}")
    return opener(config, cancel, progress)


def backend_factory(pair_factory: PairFactory | None = None) -> BackendFactory:
    """:func:`open_backend`, with local pairs made by ``pair_factory`` where one is given (the tests'
    fake models)."""
    if pair_factory is None:
        return open_backend
    openers: dict[type, Opener] = {**OPENERS, PairConfig: partial(LocalBackend.open, pair_factory=pair_factory)}
    return partial(open_backend, openers=openers)
