"""What answers a chat: the one :class:`Backend` protocol and what it shows (:class:`PairInfo`).

A backend is a loaded pair of models (:class:`.local.LocalBackend`) or a connected server
(:class:`.remote.RemoteBackend`); the generation thread, the CLI and the bench take either
the same way.  One is opened from its config by :func:`.factory.open_backend`.

An answer is an iterator of events (:mod:`specchat.engine.answer`): ``Started`` first, then
the engine's own events (:mod:`specchat.engine.events`) with their text already split into
answer and reasoning (:func:`specchat.engine.phases.split_answer`), and one final ``Done``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from specchat.engine.answer import AnswerEvent, AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.telemetry.samplers import MemoryShare


@dataclass(frozen=True, slots=True)
class ServerReport:
    """What a server backend said it can show, in words the telemetry panel prints as they are."""

    summary: str  # "llama.cpp serving model.gguf, ctx 4096; draft-simple, up to 16 tokens"
    notes: tuple[str, ...] = ()  # what it cannot report, one line each
    gpu_memory: bool = False  # its box reports GPU memory (a GPU exporter answered)


@dataclass(frozen=True, slots=True)
class PairInfo:
    """What the panel and the chat header show about the loaded backend."""

    target: str
    draft: str | None
    backend: str
    n_ctx: int
    supports_reasoning_switch: bool
    speculation_blocked: str
    verify_ms: dict[int, float]
    draft_ms: float | None
    target_bytes: int
    draft_bytes: int
    # the fit estimate split into target weights, draft weights, KV caches and buffers (empty if unknown)
    memory_shares: tuple[MemoryShare, ...] = ()
    server: ServerReport | None = None  # a server backend: what it said it can report; None: a local pair


class Backend(Protocol):
    """A loaded pair or a connected server, owned by one thread from open to ``close()``."""

    @property
    def info(self) -> PairInfo: ...

    def answer(self, request: AnswerRequest, cancel: CancelToken) -> Iterator[AnswerEvent]:
        """The answer's events (see the module docstring).  Bad input the backend cannot answer at
        all (a chat template that fails) raises :class:`~specchat.errors.UserError` before the first."""
        ...

    def close(self) -> None:
        """Free the models, or close the connection (and stop a server this backend started)."""
        ...
