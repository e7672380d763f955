"""Checking a server off the GUI thread: Settings → Servers' Check button.

A probe is a few small GETs (``ServerClient.probe``), but a server that accepts the
connection and then trickles bytes can hold each read for the read timeout, again and
again; closing the client from another thread does not wake a blocked read (measured: a
silent server held ``probe()`` its full 10 s after ``close()``).  So every probe registers
each socket it opens as a close-on-cancel closer of its task's token
(:meth:`specchat.cancel.CancelToken.on_cancel` with :func:`specchat.cancel.shut_socket`):
cancelling the check shuts them down and the blocked read returns at once (measured: 1.5 s
into a trickling answer, the probe ended within milliseconds).

Each probe is a task of the service's runner (:class:`~specchat.workers.tasks.TaskRunner`);
a newer probe cancels the handle of the one running, so only the newest one's result
reaches :attr:`ServerProbeService.probed`.
"""

from __future__ import annotations

import socket
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from specchat.cancel import Cancelled, CancelToken, shut_socket
from specchat.errors import UserError, one_line
from specchat.remote.client import Capabilities, ServerClient
from specchat.remote.servers import Keychain, ServerConfig
from specchat.workers.tasks import TaskHandle, TaskRunner


def watch(client: ServerClient, cancel: CancelToken) -> None:
    """Shut down every connection ``client`` opens from now on when ``cancel`` is cancelled (at once
    if it already is); refuse new requests once cancelled.

    httpcore reports each new TCP connection through the request's ``trace`` extension, which
    a request hook can set; ``ServerClient`` has no public hook for it yet, so this reaches
    its HTTP client (``_http``).
    """
    http = getattr(client, "_http", None)
    if http is None:
        return

    def trace(name: str, info: dict[str, Any]) -> None:
        if name != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            cancel.on_cancel(lambda: shut_socket(sock))

    def on_request(request: Any) -> None:
        cancel.raise_if_cancelled()
        request.extensions["trace"] = trace

    http.event_hooks = {"request": [on_request], "response": []}


def probe_server(server: ServerConfig, api_key: str | None, cancel: CancelToken) -> Capabilities:
    """What ``server`` says it is and can report.  ``api_key`` None: the one in the keychain."""
    key = Keychain().get(server.name) if api_key is None else api_key
    cancel.raise_if_cancelled()
    with ServerClient(server, key) as client:
        watch(client, cancel)
        return client.probe()


Prober = Callable[[ServerConfig, str | None, CancelToken], Capabilities]


def _check(prober: Prober, server: ServerConfig, api_key: str | None, cancel: CancelToken) -> Capabilities | str:
    """The probe's answer, or one line saying why there is none (a cancelled probe raises Cancelled)."""
    try:
        return prober(server, api_key, cancel)
    except Cancelled:
        raise
    except UserError as exc:
        return str(exc)
    except Exception as exc:  # a bug, or a cancel that surfaced as another error
        if cancel.cancelled:
            raise Cancelled("cancelled") from None
        traceback.print_exception(exc)
        exc.__traceback__ = None
        return f"server {server.name}: the check failed: {one_line(str(exc)) or type(exc).__name__}"


class ServerProbeService(QObject):
    """GUI-side handle: one probe thread, the newest request's result only, ended by :meth:`shutdown`."""

    probed = Signal(str, object)  # server name, Capabilities or a one-line error

    def __init__(self, parent: QObject | None = None, *, prober: Prober = probe_server) -> None:
        super().__init__(parent)
        self._prober = prober
        self._runner = TaskRunner("specchat-server-probe")
        self.current: TaskHandle | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        return self.current is not None

    def probe(self, server: ServerConfig, api_key: str | None = None) -> TaskHandle:
        """Check ``server`` (giving up the check still running); its handle."""
        if self._closed:
            raise RuntimeError("the server probe service is shut down")
        self.cancel()
        prober, name = self._prober, server.name
        handle = self._runner.run_task(lambda task: _check(prober, server, api_key, task.token),
                                       name=f"check {name}")
        handle.returned.connect(lambda result: self._on_done(handle, name, result))
        self.current = handle
        return handle

    def cancel(self) -> None:
        """Give up the running check at once (its sockets are shut down); nothing is reported for it."""
        if self.current is not None:
            self.current.cancel()
            self.current = None

    def _on_done(self, handle: TaskHandle, name: str, result: object) -> None:
        if handle is self.current:
            self.current = None
        self.probed.emit(name, result)

    def shutdown(self, patience_ms: int = 5_000) -> None:
        """Cancel the check and end the thread (returns once it has ended).  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.cancel()
        self._runner.shutdown(patience_ms)
