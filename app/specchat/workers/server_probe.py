"""Checking a server off the GUI thread: Settings → Servers' Check button.

A probe is a few small GETs (``ServerClient.probe``), but a server that accepts the
connection and then trickles bytes can hold each read for the read timeout, again and
again; closing the client from another thread does not wake a blocked read (measured: a
silent server held ``probe()`` its full 10 s after ``close()``).  So every probe records
the sockets it opens, and :meth:`ServerProbeService.cancel` shuts them down: the blocked
read returns at once (measured: 1.5 s into a trickling answer, the probe ended within
milliseconds), and the thread can be joined when the dialog closes.

One :class:`~PySide6.QtCore.QThread` for the service's life; a newer probe supersedes the
one running, and only the newest one's result reaches :attr:`ServerProbeService.probed`.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.errors import UserError, one_line
from specchat.remote.client import Capabilities, ServerClient
from specchat.remote.servers import Keychain, ServerConfig

from .threads import end_thread, start_thread


class ProbeCancelled(Exception):
    """A probe was given up (a newer one, or the dialog closing): its result is dropped."""


class ProbeAbort:
    """The sockets of one probe, shut down from any thread by :meth:`abort`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.aborted = False

    def watch(self, client: ServerClient) -> None:
        """Record every connection ``client`` opens from now on; refuse new requests once aborted.

        httpcore reports each new TCP connection through the request's ``trace`` extension,
        which a request hook can set; ``ServerClient`` has no public hook for it yet, so this
        reaches its HTTP client (``_http``).
        """
        http = getattr(client, "_http", None)
        if http is None:
            return

        def on_request(request: Any) -> None:
            if self.aborted:
                raise ProbeCancelled()
            request.extensions["trace"] = self._trace

        http.event_hooks = {"request": [on_request], "response": []}

    def _trace(self, name: str, info: dict[str, Any]) -> None:
        if name != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            late = self.aborted
        if late:
            _shut(sock)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked in another thread (close() would not)


def probe_server(server: ServerConfig, api_key: str | None, abort: ProbeAbort) -> Capabilities:
    """What ``server`` says it is and can report.  ``api_key`` None: the one in the keychain."""
    key = Keychain().get(server.name) if api_key is None else api_key
    if abort.aborted:
        raise ProbeCancelled()
    with ServerClient(server, key) as client:
        abort.watch(client)
        return client.probe()


Prober = Callable[[ServerConfig, str | None, ProbeAbort], Capabilities]


class _ProbeWorker(QObject):
    """Lives in the probe thread; its slot runs there."""

    done = Signal(int, str, object)  # request id, server name, Capabilities or the error line

    def __init__(self, prober: Prober) -> None:
        super().__init__()
        self._prober = prober

    @Slot(int, object, object, object)
    def probe(self, rid: int, server: ServerConfig, api_key: str | None, abort: ProbeAbort) -> None:
        if abort.aborted:
            return
        result: Capabilities | str
        try:
            result = self._prober(server, api_key, abort)
        except ProbeCancelled:
            return
        except UserError as exc:
            result = str(exc)
        except Exception as exc:  # a bug, or an abort that surfaced as another error
            if abort.aborted:
                return
            traceback.print_exception(exc)
            exc.__traceback__ = None
            result = f"server {server.name}: the check failed: {one_line(str(exc)) or type(exc).__name__}"
        if not abort.aborted:
            self.done.emit(rid, server.name, result)


class ServerProbeService(QObject):
    """GUI-side handle: one probe thread, the newest request's result only, joined by :meth:`shutdown`."""

    probed = Signal(str, object)  # server name, Capabilities or a one-line error
    _probe = Signal(int, object, object, object)

    def __init__(self, parent: QObject | None = None, *, prober: Prober = probe_server) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self.current = 0
        self._abort: ProbeAbort | None = None
        self._closed = False
        self._thread = QThread()
        self._thread.setObjectName("specchat-server-probe")
        self._worker = _ProbeWorker(prober)
        self._worker.moveToThread(self._thread)
        self._thread.finished.connect(self._worker.deleteLater)
        self._probe.connect(self._worker.probe)
        self._worker.done.connect(self._on_done)
        start_thread(self._thread)

    @property
    def busy(self) -> bool:
        return self.current != 0

    def probe(self, server: ServerConfig, api_key: str | None = None) -> int:
        """Check ``server`` (giving up the check still running); returns the request id."""
        if self._closed:
            raise RuntimeError("the server probe service is shut down")
        self.cancel()
        rid = next(self._ids)
        self.current = rid
        self._abort = ProbeAbort()
        self._probe.emit(rid, server, api_key, self._abort)
        return rid

    def cancel(self) -> None:
        """Give up the running check at once (its sockets are shut down); nothing is reported for it."""
        self.current = 0
        if self._abort is not None:
            self._abort.abort()
            self._abort = None

    def _on_done(self, rid: int, name: str, result: object) -> None:
        if rid == self.current:  # a superseded or cancelled check never reaches the screen
            self.current = 0
            self._abort = None
            self.probed.emit(name, result)

    def shutdown(self, patience_ms: int = 5_000) -> None:
        """Cancel the check and end the thread (returns once it has ended).  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.cancel()
        end_thread(self._thread, patience_ms)
