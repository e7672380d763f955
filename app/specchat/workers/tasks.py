"""Background work for the GUI: one task runner, one handle per task, results on the GUI thread.

``runner.run_task(fn) -> TaskHandle`` queues ``fn(task)`` on the runner's thread (one
:class:`~PySide6.QtCore.QThread` per runner, owned by it, started with
:func:`~specchat.workers.threads.start_thread` and ended by :meth:`TaskRunner.shutdown`
through :func:`~specchat.workers.threads.end_thread`); tasks of one runner run one at a
time, in order (Orange3's rule: one task per worker).  ``task`` is a :class:`TaskContext`:
its ``token`` (the app's one :class:`~specchat.cancel.CancelToken`, handed on to the
Qt-free code) and ``report(value)``, which the handle delivers as ``yielded``.

How ``fn`` runs:

- a generator function is stepped on the runner's thread; each value it yields arrives
  as ``yielded``, what it returns as ``returned`` (superqt's GeneratorWorker); it must
  yield (or check the token) often, as the token is looked at between steps;
- ``polls=True``: ``fn`` runs on the runner's thread and checks the token itself at least
  every fraction of a second (a download: what it raises on cancel is reported);
- otherwise ``fn`` may block anywhere (a hub request, a header read, ``llama-server
  --help``): it runs on a daemon helper (:func:`~specchat.cancel.call_cancellable`) and is
  given up the moment its token is cancelled, so neither a cancel nor :meth:`shutdown`
  waits for it.

The :class:`TaskHandle` lives on the GUI thread and is what a view keeps (never an id):
``yielded(object)``, ``returned(object)``, ``failed(str, bool)`` (one line; True when the
task stopped because it was cancelled) and ``finished()`` arrive on the GUI thread.
:meth:`TaskHandle.cancel` cancels the token AND disconnects the handle, so a stale result
never lands; :meth:`TaskHandle.stop` only cancels the token, for a caller that still wants
to hear how the task ended (a download's "cancelled, 1.0 MB kept").
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QMetaMethod, QObject, QThread, Signal, Slot

from specchat.cancel import Cancelled, CancelToken, call_cancellable
from specchat.errors import UserError, one_line

from .threads import end_thread, start_thread

log = logging.getLogger(__name__)


class TaskContext:
    """What a task body gets: its cancel token and a way to report progress (thread-safe)."""

    def __init__(self, token: CancelToken, report: Callable[[object], None]) -> None:
        self.token = token
        self.report = report

    @property
    def cancelled(self) -> bool:
        return self.token.cancelled

    def raise_if_cancelled(self) -> None:
        self.token.raise_if_cancelled()


Task = Callable[[TaskContext], Any]


class TaskHandle(QObject):
    """One queued or running task, on the GUI thread.  Its signals arrive there, or never after :meth:`cancel`."""

    yielded = Signal(object)
    returned = Signal(object)
    failed = Signal(str, bool)  # one line, cancelled?
    finished = Signal()
    # emitted from the runner's thread (or a helper), delivered to the slots below on the GUI thread
    _yield = Signal(object)
    _return = Signal(object)
    _fail = Signal(str, bool)
    _ended = Signal()  # the runner's: the task is over, delivered or not (never disconnected by cancel)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.token = CancelToken()
        self.running = True  # until finished is delivered, or cancel()
        self._dropped = False
        self._yield.connect(self._on_yield)
        self._return.connect(self._on_return)
        self._fail.connect(self._on_fail)

    def cancel(self) -> None:
        """Cancel the task and drop whatever it still sends: nothing more arrives from this handle."""
        self.token.cancel()
        if self._dropped:
            return
        self._dropped = True
        self.running = False
        for signal in (self.yielded, self.returned, self.failed, self.finished):
            if self.isSignalConnected(QMetaMethod.fromSignal(signal)):
                signal.disconnect()

    def stop(self) -> None:
        """Ask the task to stop; it still reports how it ended (``failed`` with cancelled=True, as a rule)."""
        self.token.cancel()

    @Slot(object)
    def _on_yield(self, value: object) -> None:
        if not self._dropped:
            self.yielded.emit(value)

    @Slot(object)
    def _on_return(self, value: object) -> None:
        self._ended.emit()
        if not self._dropped:
            self.running = False
            self.returned.emit(value)
            self.finished.emit()

    @Slot(str, bool)
    def _on_fail(self, message: str, cancelled: bool) -> None:
        self._ended.emit()
        if not self._dropped:
            self.running = False
            self.failed.emit(message, cancelled)
            self.finished.emit()


class _Job:
    """A task as the runner's thread sees it: the body, its token and the handle's thread-safe emitters."""

    def __init__(self, fn: Task, polls: bool, handle: TaskHandle) -> None:
        self.fn, self.polls, self.name = fn, polls, handle.objectName()
        self.token = handle.token
        self.context = TaskContext(self.token, handle._yield.emit)
        self.returned, self.failed = handle._return.emit, handle._fail.emit


class _Worker(QObject):
    """Lives on the runner's thread; runs one job at a time."""

    def __init__(self, closing: CancelToken) -> None:
        super().__init__()
        self.closing = closing

    @Slot(object)
    def run(self, job: _Job) -> None:
        if job.token.cancelled or self.closing.cancelled:
            job.failed("cancelled", True)
            return
        try:
            result = self._body(job)
        except Cancelled as exc:
            job.failed(one_line(str(exc)) or "cancelled", True)
        except UserError as exc:
            job.failed(one_line(str(exc)), False)
        except Exception as exc:  # a bug must not end the thread: say it in one line, log the rest
            log.exception("task %s failed", job.name)
            job.failed(one_line(f"{type(exc).__name__}: {exc}"), False)
        else:
            job.returned(result)

    @staticmethod
    def _body(job: _Job) -> Any:
        context, token = job.context, job.token
        if inspect.isgeneratorfunction(job.fn):
            steps = job.fn(context)
            try:
                while True:
                    token.raise_if_cancelled()
                    try:
                        value = next(steps)
                    except StopIteration as end:
                        return end.value
                    context.report(value)
            finally:
                steps.close()
        if job.polls:
            return job.fn(context)
        return call_cancellable(lambda: job.fn(context), token, name=job.name)


class TaskRunner(QObject):
    """One thread for background tasks, owned here; tasks run one at a time, in order.

    Owned by the session (never a widget) and lent to the views that need it; the app's
    close calls :meth:`shutdown`, which cancels everything and ends the thread at once.
    """

    _run = Signal(object)

    def __init__(self, name: str = "specchat-tasks", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self._closing = CancelToken()  # the runner's: set once by shutdown, no queued task starts after it
        self._thread = QThread()
        self._thread.setObjectName(name)
        self._worker = _Worker(self._closing)
        self._worker.moveToThread(self._thread)
        self._thread.finished.connect(self._worker.deleteLater)  # deleted in its own thread
        self._run.connect(self._worker.run)
        self._live: set[TaskHandle] = set()
        self._ids = itertools.count(1)
        self._closed = False
        start_thread(self._thread)

    def run_task(self, fn: Task, *, polls: bool = False, name: str = "") -> TaskHandle:
        """Queue ``fn(task)``; its handle (see the module docstring for how it runs)."""
        if self._closed:
            raise RuntimeError(f"{self.objectName()} is shut down")
        handle = TaskHandle(name or f"{self.objectName()}-{next(self._ids)}")
        self._live.add(handle)
        handle._ended.connect(functools.partial(self._live.discard, handle))
        self._run.emit(_Job(fn, polls, handle))
        return handle

    @property
    def busy(self) -> bool:
        """A task is queued or running (and not cancelled)."""
        return any(h.running for h in self._live)

    def shutdown(self, patience_ms: int = 2_000) -> None:
        """Cancel every task (none reports any more) and end the thread.  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._closing.cancel()
        for handle in list(self._live):
            handle.cancel()
        self._live.clear()
        end_thread(self._thread, patience_ms)
