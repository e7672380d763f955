"""What answers a chat: the one :class:`Backend` protocol, its request and what it shows.

A backend is a loaded pair of models (:class:`specchat.engine.local.LocalBackend`) or a
connected server (:class:`specchat.remote.backend.RemoteBackend`); the generation thread,
the CLI and the bench take either the same way.  One is opened from its config by
:func:`specchat.backends.open_backend`.  Qt-free, and a leaf of the backends: it imports
neither of them, so engine, remote, workers and the CLI can all import it.

An answer is an iterator of events: :class:`Started` first, then the engine's own events
(:mod:`specchat.engine.events`) with their text already split into answer and reasoning
(:func:`specchat.engine.phases.split_answer`), and one final ``Done``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from specchat.context_policy import ContextPolicy
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Event
from specchat.engine.settings import ControllerSettings, Mode, SamplingSettings
from specchat.remote.client import Capabilities
from specchat.telemetry.samplers import MemoryShare


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """One answer to ask a backend for (a local pair or a server reads what applies to it)."""

    messages: tuple[dict[str, str], ...]
    mode: Mode = Mode.AUTO  # local: the speculation mode (a server drafts as it was started)
    sampling: SamplingSettings = SamplingSettings()  # with its JSON schema or grammar, if any
    max_tokens: int = 1024
    reasoning: bool | None = None  # the template's reasoning switch; None: the model's default
    stop: tuple[str, ...] = ()
    fresh_prompt: bool = False  # bench on a server: no prompt cache, so prefill is measured as on a cold start
    # local: the controller's live settings for this answer (the app's, as they are now); None: as loaded.
    # A server drafts as it was started and ignores it.
    controller: ControllerSettings | None = None
    # local: what is sent once the chat outgrows the context (the oldest turns left out, or not: STOP);
    # a server keeps its own context and gets every message
    context_policy: ContextPolicy = ContextPolicy.STOP


@dataclass(frozen=True, slots=True)
class Started:
    """The prompt is ready; decoding begins (the first event of every answer)."""

    prompt_tokens: int  # 0 where the backend does not say before it answers (a server)
    starts_in_reasoning: bool  # the template opened the think block in the prompt itself
    left_out: int = 0  # messages of the request the context policy did not send


AnswerEvent = Started | Event


class _Labelled(Protocol):
    @property
    def label(self) -> str: ...


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
    remote: Capabilities | None = None  # a server backend: what it said it can report

    @classmethod
    def of_server(cls, config: _Labelled, caps: Capabilities) -> PairInfo:
        return cls(target=caps.model_name, draft=None, backend=f"{caps.engine} at {config.label}",
                   n_ctx=caps.n_ctx or 0, supports_reasoning_switch=True, speculation_blocked="",
                   verify_ms={}, draft_ms=None, target_bytes=0, draft_bytes=0, remote=caps)


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
