"""The engine's cancel flag: the app's one cancel design, :mod:`specchat.cancel` (re-exported here
so the engine's callers keep importing it from the engine)."""

from __future__ import annotations

from specchat.cancel import Cancelled, CancelToken

__all__ = ["CancelToken", "Cancelled"]
