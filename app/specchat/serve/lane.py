"""One answer at a time: the line API requests wait in, and the thread that answers them.

The engine is single-user (one thread owns the loaded pair), so the server never answers on its own
threads.  It hands each request to a :class:`Lane` with a ``deliver`` function and a cancel token;
the lane's owner thread answers the requests in order and calls ``deliver`` with each event, ending
with ``Done`` or :class:`Failed`.  A full line refuses at once (HTTP 429); a request cancelled while
it waits (its client went away) is skipped, not answered.

:class:`BackendLane` is the lane of ``specchat serve``: it answers on whichever thread calls
:meth:`BackendLane.run` (the one that opened the backend).  The window has its own lane, which puts
API requests in the same line as its chats (:mod:`specchat.services.api`).
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from specchat.backends.protocol import Backend
from specchat.engine.answer import AnswerEvent, AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done, GenerationStats, StopReason
from specchat.engine.settings import Mode, SamplingSettings
from specchat.errors import UserError, one_line

from .wire import ApiError

WAITING = 128  # requests in line behind the one answering; beyond: 429 (a client waiting costs a few KB)
DEFAULT_SAMPLING = SamplingSettings()


@dataclass(frozen=True, slots=True)
class Failed:
    """The answer could not be given (the last event of it, instead of ``Done``): ``status`` 400 for the
    request's fault (a template that fails on its messages), 500 for SpecChat's own."""

    message: str
    status: int = 400


Delivered = AnswerEvent | Failed
Deliver = Callable[[Delivered], None]  # called on the lane's thread, must not block


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What the server says about what answers: ``/v1/models`` and each answer's defaults."""

    id: str  # the target's file name
    n_ctx: int
    draft: str | None = None
    backend: str = ""
    plain_tok_s: float | None = None  # one target token as the load measured it (None: not measured)
    mode: Mode = Mode.AUTO  # a request that names no mode
    sampling: SamplingSettings = DEFAULT_SAMPLING  # what a request leaves out


class Lane(Protocol):
    def card(self) -> ModelCard | None:
        """What answers now (None: nothing is loaded, the server says 503)."""
        ...

    def submit(self, request: AnswerRequest, deliver: Deliver, cancel: CancelToken, client: str) -> None:
        """Put a request in line; :class:`~.wire.ApiError` (429) when the line is full."""
        ...


def card_of(backend: Backend, mode: Mode, sampling: SamplingSettings) -> ModelCard:
    info = backend.info
    one = info.verify_ms.get(1)
    return ModelCard(info.target, info.n_ctx, info.draft, info.backend,
                     1000.0 / one if one else None, mode, sampling)


def answer_into(backend: Backend, request: AnswerRequest, cancel: CancelToken, deliver: Deliver) -> None:
    """One request answered by ``backend`` on this thread, every event delivered, the last ``Done`` or
    :class:`Failed`.  Never raises: a lane goes on with the next request."""
    if cancel.cancelled:  # its client went away while it waited
        deliver(Done(StopReason.CANCELLED, GenerationStats.empty(request.mode)))
        return
    try:
        for ev in backend.answer(request, cancel):
            deliver(ev)
    except UserError as exc:  # the request's fault (a template that fails, a raw prompt on a server)
        deliver(Failed(str(exc)))
    except Exception as exc:  # a bug of SpecChat's: the traceback to the terminal, one line to the client
        traceback.print_exception(exc)
        exc.__traceback__ = None
        deliver(Failed(f"SpecChat failed: {one_line(str(exc)) or type(exc).__name__}", 500))


class BackendLane:
    """The lane of ``specchat serve``: a bounded line, answered by the thread that calls :meth:`run`."""

    def __init__(self, backend: Backend, *, mode: Mode = Mode.AUTO, sampling: SamplingSettings = DEFAULT_SAMPLING,
                 waiting: int = WAITING) -> None:
        self.backend = backend
        self._card = card_of(backend, mode, sampling)
        self._line: queue.Queue[tuple[AnswerRequest, Deliver, CancelToken] | None] = queue.Queue(waiting)
        self._closed = threading.Event()

    def card(self) -> ModelCard | None:
        return None if self._closed.is_set() else self._card

    def submit(self, request: AnswerRequest, deliver: Deliver, cancel: CancelToken, client: str) -> None:
        if self._closed.is_set():
            raise ApiError("the server is stopping", status=503, kind="server_error")
        try:
            self._line.put_nowait((request, deliver, cancel))
        except queue.Full:
            raise ApiError(f"{self._line.maxsize} requests are waiting already: try again shortly", status=429,
                           kind="rate_limit_exceeded", code="queue_full", retry_after=2) from None

    @property
    def waiting(self) -> int:
        return self._line.qsize()

    def run(self, stop: threading.Event) -> None:
        """Answer requests in order until ``stop`` is set (then :meth:`close`)."""
        while not stop.is_set():
            try:
                job = self._line.get(timeout=0.1)
            except queue.Empty:
                continue
            if job is None:
                break
            request, deliver, cancel = job
            answer_into(self.backend, request, cancel, deliver)
        self.close()

    def close(self) -> None:
        """Refuse new requests and tell those still waiting that the server stops."""
        self._closed.set()
        while True:
            try:
                job = self._line.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job[1](Failed("the server stopped before this request's turn", 503))
