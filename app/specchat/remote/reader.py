"""Every byte a server sends is read here: one guard per request, one bounded body reader.

The limits and deadlines of the remote layer live in this module and nowhere else:

- a request runs under a :class:`Guard`: its own :class:`~specchat.cancel.CancelToken`, a
  child of the client's (``close()``) and of the answer's (Stop), and an overall deadline
  (monotonic: a server trickling a byte at a time defeats a per-read timeout, not this);
- the guard learns the request's socket from httpcore's ``connect_tcp`` trace, before a
  byte is sent (connections are not kept alive, so every request connects and is seen),
  and a cancel or a deadline shuts that socket down: connect, the header wait, a trickle
  of header bytes and a body read all end at once, in any thread;
- the blocking part (a whole GET; a stream's headers) runs in :func:`~specchat.cancel.call_cancellable`,
  so the caller returns within :data:`~specchat.cancel.POLL_S` of a Stop whatever the socket does;
- :func:`read_body` is the one reader of a body: a byte cap per kind of read
  (:data:`JSON_CAP`, :data:`METRICS_CAP`, :data:`DCGM_CAP`; error bodies :data:`ERROR_CAP`,
  cut there and summarised in one line), the guard's deadline and its cancel;
- streamed events (:class:`~.client.StreamedEvents`): the line being assembled is capped
  (:data:`LINE_CAP`), and :data:`STALL_S` without a complete event ends the answer;
- JSON goes through :func:`specchat.bounded_json.loads` (nesting at most 64 levels).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx2

from specchat.cancel import CancelToken, DeadlinePassed, call_cancellable, shut_socket

from .errors import ServerError

CONNECT_S = 5.0  # a server that does not accept a connection in 5 s is not there
STALL_S = 120.0  # the longest a server may think before its next event (a long prefill on a big prompt)
GET_S = 10.0  # one plain GET, headers and body
HEADERS_S = 60.0  # a streamed answer's headers: servers send them before the first token (a trickle cannot hold us)
PROBE_S = 30.0  # the whole probe ('servers check', connecting a chat), whatever the server does
JSON_CAP = 8 << 20  # /props of a big model with its chat template is ~100 KB
METRICS_CAP = 8 << 20  # a /metrics page is tens of KiB
DCGM_CAP = 8 << 20  # a dcgm-exporter page: a few KiB per GPU
ERROR_CAP = 64 << 10  # an error body: its message is in the first few hundred bytes
LINE_CAP = 1 << 20  # one streamed event (and the line being assembled); real ones are a few hundred bytes
BYTES_PER_TOKEN = 64  # a streamed answer past max_tokens x this many bytes is cut (a token is < 20 bytes)

_T = TypeVar("_T")


class Guard:
    """One request's cancel and deadline, and the sockets it opened (shut down on either)."""

    def __init__(self, parents: tuple[CancelToken | None, ...], deadline_s: float, end: float | None = None) -> None:
        self.token = CancelToken()
        now = time.monotonic()
        self.end = now + deadline_s if end is None else min(end, now + deadline_s)
        self.deadline_s = round(self.end - now, 1)  # what a message says it waited
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.token.on_cancel(self._shut)
        self._removers = [p.on_cancel(self.token.cancel) for p in parents if p is not None]

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: keep every socket the request connects (shut at once if already cancelled)."""
        if name in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with self._lock:
                    self._sockets.append(sock)
                if self.token.cancelled:
                    shut_socket(sock)

    def _shut(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            shut_socket(sock)

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def expire(self) -> None:
        self.expired = True
        self.token.cancel()

    def check(self) -> None:
        """End the read (via :class:`DeadlinePassed`) once the deadline passed."""
        if self.remaining() <= 0:
            self.expire()
            raise DeadlinePassed("deadline")

    def run(self, call: Callable[[], _T], *, name: str = "specchat-http", within: float | None = None) -> _T:
        """``call()`` on a helper thread, given up at once on cancel, or past the deadline, or past ``within``
        seconds for this call (the socket shut down either way, so the helper ends too)."""
        limit = self.remaining() if within is None else min(self.remaining(), within)
        try:
            return call_cancellable(call, self.token, deadline_s=max(limit, 0.0), name=name)
        except DeadlinePassed:
            if within is not None and within < self.deadline_s:
                self.deadline_s = round(within, 1)  # what the message says it waited for
            self.expire()
            raise

    def release(self) -> None:
        for remove in self._removers:
            remove()
        self._removers = []


def read_body(response: httpx2.Response, guard: Guard, *, cap: int, what: str, cut: bool = False) -> bytes:
    """The body of ``response``: at most ``cap`` bytes (past it: :class:`ServerError`, or, with ``cut``,
    the first ``cap`` bytes), within the guard's deadline, ending at once on its cancel."""
    body = bytearray()
    for piece in response.iter_bytes():
        guard.check()
        if guard.token.cancelled:
            break
        body += piece
        if len(body) > cap:
            if cut:
                del body[cap:]
                break
            raise ServerError(f"{what} answered more than {_size(cap)}")
    return bytes(body)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def error_line(body: bytes) -> str:
    """The message of an error body (read to :data:`ERROR_CAP`), as one short line."""
    from specchat.bounded_json import loads

    try:
        doc = loads(body[:ERROR_CAP].decode("utf-8", "replace"))
    except ValueError:
        text = body[:200].decode("utf-8", "replace")
        return " ".join(text.split())[:200]
    msg: object = ""
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or ""
        elif isinstance(err, str):
            msg = err
    text = msg if isinstance(msg, str) else type(msg).__name__
    return " ".join(text.split())[:300]
