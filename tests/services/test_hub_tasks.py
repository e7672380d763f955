"""The hub thread: one task at a time, results through each task's handle, a cancelled task's result
never arrives, a bug becomes one line, and shutdown ends the thread while a task waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from specchat.errors import UserError
from specchat.services.hub import HubTasks
from specchat.workers.tasks import TaskContext
from specchat.workers.threads import running_threads


@pytest.fixture
def hub(qtbot) -> Iterator[HubTasks]:  # noqa: ANN001 (pytest-qt's qtbot)
    tasks = HubTasks()
    yield tasks
    tasks.shutdown()


def test_a_result_arrives_through_its_task_handle(qtbot, hub: HubTasks) -> None:  # noqa: ANN001
    task = hub.run_task(lambda task: 6 * 7)
    with qtbot.waitSignal(task.returned, timeout=5_000) as got:
        pass
    assert got.args == [42]


def test_a_user_error_and_a_bug_each_become_one_line(qtbot, hub: HubTasks) -> None:  # noqa: ANN001
    def bad_input(task: TaskContext):  # noqa: ANN202
        raise UserError("org/repo: not found on the hub\nsecond line")

    def bug(task: TaskContext):  # noqa: ANN202
        return {}["missing"]

    a = hub.run_task(bad_input)
    with qtbot.waitSignal(a.failed, timeout=5_000) as first:
        pass
    assert first.args[0] == "org/repo: not found on the hub second line"
    b = hub.run_task(bug)
    with qtbot.waitSignal(b.failed, timeout=5_000) as second:
        pass
    assert second.args[0].startswith("KeyError")
    with qtbot.waitSignal(hub.run_task(lambda task: "still here").returned, timeout=5_000):
        pass  # the thread survived both


def test_a_cancelled_task_stops_and_its_result_never_arrives(qtbot, hub: HubTasks) -> None:  # noqa: ANN001
    started = threading.Event()
    steps: list[int] = []

    def slow(task: TaskContext):  # noqa: ANN202
        started.set()
        for i in range(200):
            task.raise_if_cancelled()
            steps.append(i)
            time.sleep(0.01)
        return "stale"

    results: list[object] = []
    first = hub.run_task(slow)
    first.returned.connect(results.append)
    assert started.wait(5)
    first.cancel()
    fresh = hub.run_task(lambda task: "fresh")
    fresh.returned.connect(results.append)
    with qtbot.waitSignal(fresh.returned, timeout=5_000) as newer:
        pass
    assert newer.args[0] == "fresh" and results == ["fresh"]
    assert len(steps) < 200  # it stopped at a step, not after all of them


def test_shutdown_ends_the_thread_while_a_task_runs(qtbot) -> None:  # noqa: ANN001
    tasks = HubTasks()
    started = threading.Event()

    def waits(task: TaskContext):  # noqa: ANN202
        started.set()
        while not task.cancelled:
            time.sleep(0.01)
        task.raise_if_cancelled()

    tasks.run_task(waits)
    assert started.wait(5)
    t0 = time.monotonic()
    tasks.shutdown()
    assert time.monotonic() - t0 < 2.0
    assert "specchat-hub" not in running_threads()


def test_shutdown_does_not_wait_for_a_task_stuck_in_a_read(qtbot) -> None:  # noqa: ANN001
    """A hub that never answers holds a read for its whole timeout; closing the app must not."""
    tasks = HubTasks()
    started, release = threading.Event(), threading.Event()

    def stuck(task: TaskContext):  # noqa: ANN202
        started.set()
        release.wait(30)  # a blocked socket read: no cancel check in it

    tasks.run_task(stuck)
    assert started.wait(5)
    t0 = time.monotonic()
    tasks.shutdown()
    assert time.monotonic() - t0 < 1.0
    release.set()
