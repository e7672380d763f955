"""The window serves its loaded pair through SpecChat's OpenAI-compatible API (:mod:`specchat.serve`).

QtCore only, on the GUI thread, except where a method says it runs on the server's thread.

- :class:`WindowLane` is the server's :class:`~specchat.serve.lane.Lane` in the window: an API request
  is counted under a lock on the server's thread (429 beyond :data:`~specchat.serve.lane.WAITING`),
  handed to the GUI thread with a queued signal and put in the :class:`AnswerService`'s line as an
  :class:`~specchat.services.answers.ExternalAnswer`, behind the chat answers asked before it: one
  generation thread owns the models.  Its ``card()`` is a snapshot, taken on the GUI thread when a pair
  loads or goes, read under the same lock.
- :class:`ApiService` owns the server's life (start, stop, the address from the settings ``api_port``
  and ``api_everywhere``, the key from the OS keychain) and tells the window each request as it ends
  (``record``, an :class:`~specchat.serve.http.ApiRecord`: never the request's text).
- :class:`ApiKeychain`: the server's API key in the OS keychain (service "specchat", user "api-server").

Nothing of an API request is stored in the chats.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace

from PySide6.QtCore import QObject, Qt, Signal

from specchat.config import CONTROLLER_KEYS, ConfigChange, as_int
from specchat.engine.answer import AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done
from specchat.engine.settings import ControllerSettings, Mode, SamplingSettings
from specchat.errors import UserError
from specchat.remote.servers import KEYRING_SERVICE
from specchat.serve.http import LOCAL_HOSTS, RECENT, Api, ApiRecord, ApiServer, Traffic
from specchat.serve.lane import DEFAULT_SAMPLING, WAITING, Deliver, Delivered, Failed, ModelCard
from specchat.serve.wire import ApiError
from specchat.workers.generation import PairInfo

from .answers import CLOSING, AnswerService, ExternalAnswer
from .settings import SettingsHolder

API_KEY_USER = "api-server"  # the keychain's user of the window's API key (a server's own is "server:NAME")
LOCAL_HOST = "127.0.0.1"
EVERY_HOST = "0.0.0.0"  # noqa: S104 - only when the user turns api_everywhere on
STOPPED = "the API server was stopped"
MODE_KEYS = CONTROLLER_KEYS | {"default_mode"}  # what a request that does not choose is answered with


class ApiKeychain:
    """The window's API key in the OS keychain; "" when none is kept (or no keychain can keep one)."""

    def get(self) -> str:
        import keyring
        from keyring.errors import KeyringError

        try:
            return keyring.get_password(KEYRING_SERVICE, API_KEY_USER) or ""
        except (KeyringError, RuntimeError, OSError):
            return ""

    def set(self, key: str) -> None:
        """Keep ``key``; "" removes the kept one (no key: any program that reaches the port may ask).
        :class:`~specchat.errors.UserError` (one line) for a key that is not one, or no keychain."""
        import keyring
        from keyring.errors import KeyringError, PasswordDeleteError

        if not key:
            try:
                keyring.delete_password(KEYRING_SERVICE, API_KEY_USER)
            except PasswordDeleteError:
                pass  # there was none
            except (KeyringError, RuntimeError, OSError):
                pass  # no keychain: nothing was kept
            return
        if len(key) > 4096 or any(not c.isprintable() or c.isspace() for c in key):
            raise UserError("the API key must be printable text without spaces (at most 4096 characters)")
        try:
            keyring.set_password(KEYRING_SERVICE, API_KEY_USER, key)
        except (KeyringError, RuntimeError, OSError) as exc:
            why = str(exc).split("\n")[0].strip()[:120] or type(exc).__name__
            raise UserError(f"no OS keychain can keep the API key ({why})") from None


def card_of(info: PairInfo, mode: Mode, sampling: SamplingSettings = DEFAULT_SAMPLING) -> ModelCard:
    """What ``/v1/models`` and each answer say of the loaded pair (as :func:`specchat.serve.lane.card_of`
    says it of a backend)."""
    one = info.verify_ms.get(1)
    return ModelCard(info.target, info.n_ctx, info.draft, info.backend, 1000.0 / one if one else None, mode, sampling)


class _Ticket:
    """One API request between the lane and the line: its ``deliver`` passes events on until the last
    (``Done`` or ``Failed``), or until the lane closes; what comes after is dropped."""

    __slots__ = ("cancel", "client", "deliver", "ended", "lane", "request")

    def __init__(self, lane: WindowLane, request: AnswerRequest, deliver: Deliver, cancel: CancelToken,
                 client: str) -> None:
        self.lane = lane
        self.request = request
        self.deliver = deliver
        self.cancel = cancel
        self.client = client
        self.ended = False

    def __call__(self, ev: Delivered) -> None:
        if self.lane._end(self, final=isinstance(ev, Done | Failed)):
            self.deliver(ev)


class WindowLane(QObject):
    """The window's :class:`~specchat.serve.lane.Lane`: API requests in the chats' line (see the module)."""

    _handOver = Signal(object)  # a _Ticket, from the server's thread into the GUI thread

    def __init__(self, answers: AnswerService, *, mode: Mode = Mode.AUTO, controller: ControllerSettings | None = None,
                 waiting: int = WAITING, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.answers = answers
        self.waiting = waiting
        self._lock = threading.Lock()
        self._tickets: set[_Ticket] = set()  # handed in and not ended (waiting in line, or answering)
        self._open = False
        self._card: ModelCard | None = None
        self._mode = mode
        self._controller = controller
        self._handOver.connect(self._on_hand_over, Qt.ConnectionType.QueuedConnection)
        answers.pairLoading.connect(lambda _label: self._refresh())
        answers.pairLoaded.connect(lambda _info: self._refresh())
        answers.pairFailed.connect(lambda _message: self._refresh())
        self._refresh()

    # -- the Lane protocol: called on the server's thread ------------------------------------------------

    def card(self) -> ModelCard | None:
        with self._lock:
            return self._card if self._open else None

    def submit(self, request: AnswerRequest, deliver: Deliver, cancel: CancelToken, client: str) -> None:
        ticket = _Ticket(self, request, deliver, cancel, client)
        with self._lock:
            if not self._open:
                raise ApiError("the server is stopping", status=503, kind="server_error")
            if len(self._tickets) > self.waiting:  # one answering, `waiting` in line
                raise ApiError(f"{self.waiting} requests are waiting already: try again shortly", status=429,
                               kind="rate_limit_exceeded", code="queue_full", retry_after=2)
            self._tickets.add(ticket)
        self._handOver.emit(ticket)

    # -- on the GUI thread ------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """API requests handed in and not ended (in line or answering)."""
        with self._lock:
            return len(self._tickets)

    def open(self) -> None:
        with self._lock:
            self._open = True

    def close(self, message: str = STOPPED) -> None:
        """Refuse new requests; every one in flight is told ``message`` (503) and cancelled: one waiting
        is skipped at its turn, the one answering stops within a round."""
        with self._lock:
            self._open = False
            tickets, self._tickets = list(self._tickets), set()
            for t in tickets:
                t.ended = True
        for t in tickets:
            t.deliver(Failed(message, 503))
            t.cancel.cancel()

    def set_defaults(self, mode: Mode, controller: ControllerSettings | None) -> None:
        """What a request that does not choose gets (the app's default mode), and the controller's live
        settings every answer takes (as a chat's does)."""
        self._mode, self._controller = mode, controller
        self._refresh()

    def _refresh(self) -> None:
        info, loading = self.answers.pair_info, self.answers.loading
        if info is not None:
            card: ModelCard | None = card_of(info, self._mode)
        elif loading is not None:  # a request waits for the load in line; the figures come with the pair
            card = ModelCard(loading, 0, mode=self._mode)
        else:
            card = None
        with self._lock:
            self._card = card

    def _end(self, ticket: _Ticket, *, final: bool) -> bool:
        """Whether an event still goes to ``ticket``'s client; the last one takes it out of the count."""
        with self._lock:
            if ticket.ended:
                return False
            if final:
                ticket.ended = True
                self._tickets.discard(ticket)
            return True

    def _on_hand_over(self, ticket: _Ticket) -> None:
        with self._lock:
            if ticket.ended:  # the lane closed while the hand-over was queued
                return
        request = ticket.request
        if self._controller is not None:
            request = replace(request, controller=self._controller)  # the app's thresholds as they are now
        self.answers.ask_external(ExternalAnswer(request, ticket, ticket.cancel, ticket.client))


class ApiService(QObject):
    """The window's API server: started and stopped on the user's word, at the address the settings give.

    ``record(ApiRecord)`` on the GUI thread as each request ends; ``stateChanged()`` when it starts, stops
    or moves; ``failed(str)``: one line (a port in use) when it could not start."""

    record = Signal(object)  # ApiRecord
    stateChanged = Signal()
    failed = Signal(str)
    _recorded = Signal(object)  # ApiRecord, emitted on the server's thread

    def __init__(self, answers: AnswerService, settings: SettingsHolder, *, keychain: ApiKeychain | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.keychain = keychain or ApiKeychain()
        config = settings.config
        self.lane = WindowLane(answers, mode=Mode(str(config["default_mode"])), controller=config.controller(),
                               parent=self)
        self.traffic = Traffic()  # kept across restarts: the requests view lists them all
        self.traffic.listeners.append(self._recorded.emit)
        self._recorded.connect(self._on_record, Qt.ConnectionType.QueuedConnection)
        self.requests = 0  # requests that ended since the app started
        self.recent: deque[ApiRecord] = deque(maxlen=RECENT)  # the newest of them (the requests view's rows)
        self._api: Api | None = None
        self._server: ApiServer | None = None
        settings.changed.connect(self._config_changed)

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        """The base URL clients use (``http://127.0.0.1:8177/v1``), "" when stopped."""
        return self._server.url if self._server is not None else ""

    @property
    def everywhere(self) -> bool:
        """Listening on every interface (other machines can reach it)."""
        return self._server is not None and self._server.host not in LOCAL_HOSTS

    def start(self, port: int | None = None) -> str:
        """Listen at the settings' address (``port``: another one, 0 for any free one); "" when it runs,
        else one line saying why not (also told as ``failed``)."""
        if self._server is not None:
            return ""
        config = self.settings.config
        host = EVERY_HOST if config["api_everywhere"] else LOCAL_HOST
        self._api = Api(self.lane, api_key=self.keychain.get(), traffic=self.traffic)
        try:
            server = ApiServer(self._api, host, as_int(config["api_port"]) if port is None else port)
        except UserError as exc:
            return self._refused(str(exc))
        self.lane.open()
        try:
            server.start()
        except UserError as exc:
            self.lane.close()
            server.stop()
            return self._refused(str(exc))
        self._server = server
        self.stateChanged.emit()
        return ""

    def stop(self, message: str = STOPPED) -> None:
        """Stop listening: requests in line or answering are told ``message`` (503) and given up; the
        connections still open are closed."""
        server, self._server = self._server, None
        if server is None:
            return
        self.lane.close(message)
        server.stop()
        self.stateChanged.emit()

    def shutdown(self) -> None:
        """The app closes: before the answer line and the generation thread."""
        self.stop(CLOSING)

    def has_key(self) -> bool:
        return bool(self.keychain.get())

    def set_key(self, key: str) -> None:
        """Keep a new API key ("" : none) and ask it of the next request; UserError (one line) when it cannot
        be kept."""
        self.keychain.set(key)
        if self._api is not None:
            self._api.api_key = key  # read per request, on the server's thread: one reference swapped

    def _refused(self, line: str) -> str:
        self._api = None
        self.failed.emit(line)
        return line

    def _on_record(self, record: ApiRecord) -> None:
        self.requests += 1
        self.recent.append(record)
        self.record.emit(record)

    def _config_changed(self, change: ConfigChange) -> None:
        new = change.new
        if change.keys & MODE_KEYS:
            self.lane.set_defaults(Mode(str(new["default_mode"])), new.controller())
        if change.keys & {"api_port", "api_everywhere"} and self._server is not None:
            self.stop("the API server moved to another address")
            self.start()  # a port in use is told as failed, and it stays off
