"""A cancel flag any thread may set; the engine's loops check it between steps."""

from __future__ import annotations

import threading


class CancelToken:
    """Set from any thread; the engine checks it between rounds."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()
