"""The one cancel design of the app: a token, blocking calls that give up on it, closers.

Qt-free and a leaf (it imports only :mod:`specchat.errors`), so the engine, the models,
the remote clients and the workers all use the same thing:

- :class:`CancelToken`: set once from any thread; long work checks it between steps
  (``cancelled``, :meth:`~CancelToken.raise_if_cancelled`, :meth:`~CancelToken.sleep`).
- Close-on-cancel: :meth:`CancelToken.on_cancel` registers a closer (shut a socket down,
  stop a stream) that runs the moment the token is cancelled, in the cancelling thread, so
  a read blocked in another thread returns at once.  :func:`shut_socket` is the closer
  for a socket (``shutdown`` wakes a blocked read; ``close`` would not).
- :func:`call_cancellable`: a blocking call that has no cancel check of its own (a hub
  request, a header read) runs on a daemon helper thread while the caller polls the
  token (and a deadline); on cancel the caller gets :class:`Cancelled` at once and the
  helper is left to end on its own timeouts (it must hold no file the caller needs).
- :func:`start_daemon`: the one place the Qt-free core starts a raw thread.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .errors import UserError

log = logging.getLogger(__name__)
POLL_S = 0.05  # how often call_cancellable looks at the token while the call blocks
_T = TypeVar("_T")
Closer = Callable[[], None]


class Cancelled(UserError):
    """The work saw its token cancelled and stopped; whoever cancelled it drops the result."""


class DeadlinePassed(Exception):
    """:func:`call_cancellable`'s call did not return within its deadline (the caller words the message)."""


class CancelToken:
    """Set from any thread (once; it never clears); work checks it between steps.

    Closers registered with :meth:`on_cancel` run once, in the thread that cancels (or at
    once, in the registering thread, when the token is already cancelled); they must be
    quick and must not raise (what they raise is logged and dropped).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._closers: dict[int, Closer] = {}
        self._next = 0

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            closers, self._closers = list(self._closers.values()), {}
        for closer in closers:
            _run_closer(closer)

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self, message: str = "cancelled") -> None:
        if self._event.is_set():
            raise Cancelled(message)

    def wait(self, seconds: float | None) -> bool:
        """Block up to ``seconds`` (None: for ever) or until cancelled; True if cancelled."""
        return self._event.wait(seconds)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, raising :class:`Cancelled` as soon as the token is cancelled."""
        if self._event.wait(max(0.0, seconds)):
            raise Cancelled("cancelled")

    def on_cancel(self, closer: Closer) -> Closer:
        """Run ``closer`` when the token is cancelled; returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                key = self._next
                self._next += 1
                self._closers[key] = closer

                def remove() -> None:
                    with self._lock:
                        self._closers.pop(key, None)

                return remove
        _run_closer(closer)  # already cancelled: close at once
        return lambda: None

    @contextlib.contextmanager
    def closing(self, closer: Closer) -> Iterator[None]:
        """``closer`` runs if the token is cancelled while the block runs (never after it)."""
        remove = self.on_cancel(closer)
        try:
            yield
        finally:
            remove()


def _run_closer(closer: Closer) -> None:
    try:
        closer()
    except Exception:  # a closer must not stop the others, nor the cancel
        log.exception("a cancel closer failed")


def shut_socket(sock: socket.socket) -> None:
    """Shut ``sock`` down both ways: a read blocked on it in another thread returns at once
    (``close()`` would not wake it).  Harmless on a socket already closed."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def start_daemon(target: Callable[..., object], *args: Any, name: str) -> threading.Thread:
    """Start ``target(*args)`` on a daemon thread named ``name`` (the Qt-free core's only raw thread spawn)."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def call_cancellable(call: Callable[[], _T], token: CancelToken | None, *, deadline_s: float | None = None,
                     poll_s: float = POLL_S, name: str = "specchat-call",
                     on_cancel: Callable[[], None] | None = None) -> _T:
    """``call()`` on a daemon helper thread while this thread polls ``token`` every ``poll_s``.

    Returns what ``call`` returns and raises what it raises.  On cancel: ``on_cancel()`` when
    given (it may raise the caller's own cancel error), else :class:`Cancelled`.  Past
    ``deadline_s``: :class:`DeadlinePassed`.  Either way the helper is left to end on its own
    (its blocking read's timeout); it must hold nothing the caller still needs.
    """
    box: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            box.put((True, call()))
        except BaseException as exc:  # handed to the caller, raised there
            box.put((False, exc))

    start_daemon(run, name=name)
    end = None if deadline_s is None else time.monotonic() + deadline_s
    while True:
        if token is not None and token.cancelled:
            if on_cancel is not None:
                on_cancel()
            raise Cancelled("cancelled")
        try:
            ok, value = box.get(timeout=poll_s)
        except queue.Empty:
            if end is not None and time.monotonic() > end:
                raise DeadlinePassed(name) from None
            continue
        if ok:
            return value  # type: ignore[return-value]  # what call() returned
        assert isinstance(value, BaseException)
        raise value
