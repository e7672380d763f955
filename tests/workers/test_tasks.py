"""The task runner: results on the GUI thread through the task's own handle, a cancelled handle
never delivers, a bug becomes one line, progress arrives as it is made, and shutdown ends the
thread at once even while a task is stuck in a blocking call."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator

import pytest
from PySide6.QtCore import QThread

from specchat.errors import UserError
from specchat.workers.tasks import TaskContext, TaskRunner
from specchat.workers.threads import running_threads


@pytest.fixture
def runner(qtbot) -> Iterator[TaskRunner]:  # noqa: ANN001 (pytest-qt's qtbot)
    tasks = TaskRunner("specchat-test-tasks")
    yield tasks
    tasks.shutdown()


def test_the_result_arrives_on_the_gui_thread_through_its_handle(qtbot, runner: TaskRunner) -> None:  # noqa: ANN001
    ran_on: list[QThread] = []
    handle = runner.run_task(lambda task: 6 * 7)
    handle.returned.connect(lambda _value: ran_on.append(QThread.currentThread()))
    with qtbot.waitSignal(handle.returned, timeout=5_000) as got:
        pass
    assert got.args == [42]
    qtbot.waitUntil(lambda: bool(ran_on), timeout=5_000)
    assert ran_on == [QThread.currentThread()] and not handle.running


def test_a_user_error_and_a_bug_each_become_one_line(qtbot, runner: TaskRunner) -> None:  # noqa: ANN001
    def bad_input(task: TaskContext) -> None:
        raise UserError("org/repo: not found on the hub\nsecond line")

    def bug(task: TaskContext) -> object:
        return {}["missing"]

    first = runner.run_task(bad_input)
    with qtbot.waitSignal(first.failed, timeout=5_000) as a:
        pass
    assert a.args == ["org/repo: not found on the hub second line", False]
    second = runner.run_task(bug)
    with qtbot.waitSignal(second.failed, timeout=5_000) as b:
        pass
    assert b.args[0].startswith("KeyError") and b.args[1] is False
    with qtbot.waitSignal(runner.run_task(lambda task: "still here").returned, timeout=5_000):
        pass  # the thread survived both


def test_a_generator_reports_each_step_and_then_its_result(qtbot, runner: TaskRunner) -> None:  # noqa: ANN001
    def steps(task: TaskContext) -> Generator[int, None, str]:
        yield from range(3)
        return "done"

    handle = runner.run_task(steps)
    seen: list[object] = []
    handle.yielded.connect(seen.append)
    with qtbot.waitSignal(handle.returned, timeout=5_000) as got:
        pass
    assert seen == [0, 1, 2] and got.args == ["done"]


def test_a_cancelled_handle_never_delivers_and_the_next_task_runs(qtbot, runner: TaskRunner) -> None:  # noqa: ANN001
    started, release = threading.Event(), threading.Event()

    def slow(task: TaskContext) -> str:
        started.set()
        release.wait(30)  # a blocking call with no cancel check in it
        return "stale"

    stale = runner.run_task(slow)
    landed: list[object] = []
    stale.returned.connect(landed.append)
    stale.failed.connect(lambda *args: landed.append(args))
    stale.finished.connect(lambda: landed.append("finished"))
    assert started.wait(5)
    stale.cancel()
    with qtbot.waitSignal(runner.run_task(lambda task: "fresh").returned, timeout=5_000) as newer:
        pass  # the runner gave the stuck call up at once: the next task did not wait 30 s for it
    release.set()
    qtbot.wait(100)  # any late signal of the cancelled task would be delivered by now
    assert newer.args == ["fresh"] and landed == [] and not stale.running


def test_stop_lets_a_polling_task_say_how_it_ended(qtbot, runner: TaskRunner) -> None:  # noqa: ANN001
    started = threading.Event()

    def polls(task: TaskContext) -> None:
        started.set()
        while not task.cancelled:
            task.token.wait(0.01)
        raise UserError("download cancelled, 1 MB kept")  # its own words, as a download says them

    handle = runner.run_task(polls, polls=True)
    assert started.wait(5)
    with qtbot.waitSignal(handle.failed, timeout=5_000) as failed:
        handle.stop()
    assert failed.args == ["download cancelled, 1 MB kept", False]


def test_shutdown_ends_the_thread_at_once_while_a_task_is_stuck(qtbot) -> None:  # noqa: ANN001
    """A hub that never answers holds a read for its whole timeout; closing the app must not."""
    runner = TaskRunner("specchat-test-stuck")
    started, release = threading.Event(), threading.Event()
    handle = runner.run_task(lambda task: (started.set(), release.wait(30)))
    queued = runner.run_task(lambda task: "never runs")
    landed: list[object] = []
    for h in (handle, queued):
        h.returned.connect(landed.append)
        h.failed.connect(lambda *args: landed.append(args))
    assert started.wait(5)
    t0 = time.monotonic()
    runner.shutdown()
    assert time.monotonic() - t0 < 1.0
    assert "specchat-test-stuck" not in running_threads()
    qtbot.wait(50)
    assert landed == []
    release.set()
    with pytest.raises(RuntimeError):
        runner.run_task(lambda task: None)
