"""A server as a chat's backend: connect (probe), answer, close.

:class:`RemoteConfig` names what to connect to; it is frozen and compares by value like
the engine's ``PairConfig``, so the answer service reloads only when a chat's backend
really changed.  :class:`RemoteBackend` owns the HTTP client (and, for a managed
llama-server, the server process) for as long as it is the loaded backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specchat.engine.events import Event

from .chat import Cancel, ChatRequest, stream_answer
from .client import Capabilities, ServerClient
from .servers import Keychain, ServerConfig


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    server: ServerConfig

    @property
    def label(self) -> str:
        return f"{self.server.name} ({self.server.url})"


class RemoteBackend:
    """A connected server: its capabilities, and answers as engine events."""

    def __init__(self, client: ServerClient, caps: Capabilities) -> None:
        self.client = client
        self.caps = caps

    @classmethod
    def connect(cls, config: RemoteConfig, keychain: Keychain | None = None) -> RemoteBackend:
        """Probe the server (ServerError, one line, when it cannot be used)."""
        key = (keychain or Keychain()).get(config.server.name)
        client = ServerClient(config.server, key)
        try:
            caps = client.probe()
        except BaseException:
            client.close()
            raise
        return cls(client, caps)

    def answer(self, request: ChatRequest, cancel: Cancel, *, mode: str = "",
               observe: Callable[[dict], None] | None = None) -> Iterator[Event]:
        return stream_answer(self.client, self.caps, request, cancel, mode=mode or self.mode_label, observe=observe)

    @property
    def mode_label(self) -> str:
        """What the answer's footer says ran it: the engine, and "+draft" when the server drafts."""
        return self.caps.engine + ("+draft" if self.caps.speculative else "")

    def close(self) -> None:
        self.client.close()
