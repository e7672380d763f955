"""The hub thread: one task at a time, results by id, a cancelled task's result never arrives,
a bug becomes one line, and shutdown ends the thread while a task waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from specchat.errors import UserError
from specchat.workers.hub_tasks import HubTasks, raise_if
from specchat.workers.threads import running_threads


@pytest.fixture
def hub(qtbot) -> Iterator[HubTasks]:  # noqa: ANN001 (pytest-qt's qtbot)
    tasks = HubTasks()
    yield tasks
    tasks.shutdown()


def test_a_result_arrives_with_its_task_id(qtbot, hub: HubTasks) -> None:  # noqa: ANN001
    with qtbot.waitSignal(hub.done, timeout=5_000) as got:
        task = hub.submit(lambda should_cancel: 6 * 7)
    assert got.args == [task, 42]


def test_a_user_error_and_a_bug_each_become_one_line(qtbot, hub: HubTasks) -> None:  # noqa: ANN001
    def bad_input(should_cancel):  # noqa: ANN001, ANN202
        raise UserError("org/repo: not found on the hub\nsecond line")

    def bug(should_cancel):  # noqa: ANN001, ANN202
        return {}["missing"]

    with qtbot.waitSignal(hub.failed, timeout=5_000) as first:
        a = hub.submit(bad_input)
    assert first.args == [a, "org/repo: not found on the hub second line"]
    with qtbot.waitSignal(hub.failed, timeout=5_000) as second:
        b = hub.submit(bug)
    assert second.args[0] == b and second.args[1].startswith("KeyError")
    with qtbot.waitSignal(hub.done, timeout=5_000):  # the thread survived both
        hub.submit(lambda should_cancel: "still here")


def test_a_cancelled_task_stops_and_its_result_never_arrives(qtbot, hub: HubTasks) -> None:  # noqa: ANN001
    started = threading.Event()
    steps: list[int] = []

    def slow(should_cancel):  # noqa: ANN001, ANN202
        started.set()
        for i in range(200):
            raise_if(should_cancel)
            steps.append(i)
            time.sleep(0.01)
        return "stale"

    results: list[object] = []
    hub.done.connect(lambda task, result: results.append(result))
    first = hub.submit(slow)
    assert started.wait(5)
    hub.cancel(first)
    with qtbot.waitSignal(hub.done, timeout=5_000) as newer:
        hub.submit(lambda should_cancel: "fresh")
    assert newer.args[1] == "fresh" and results == ["fresh"]
    assert len(steps) < 200  # it stopped at a step, not after all of them


def test_shutdown_ends_the_thread_while_a_task_runs(qtbot) -> None:  # noqa: ANN001
    tasks = HubTasks()
    started = threading.Event()

    def waits(should_cancel):  # noqa: ANN001, ANN202
        started.set()
        while not should_cancel():
            time.sleep(0.01)
        raise_if(should_cancel)

    tasks.submit(waits)
    assert started.wait(5)
    t0 = time.monotonic()
    tasks.shutdown()
    assert time.monotonic() - t0 < 2.0
    assert "specchat-hub" not in running_threads()


def test_shutdown_does_not_wait_for_a_task_stuck_in_a_read(qtbot) -> None:  # noqa: ANN001
    """A hub that never answers holds a read for its whole timeout; closing the app must not."""
    tasks = HubTasks()
    started, release = threading.Event(), threading.Event()

    def stuck(should_cancel):  # noqa: ANN001, ANN202
        started.set()
        release.wait(30)  # a blocked socket read: no cancel check in it

    tasks.submit(stuck)
    assert started.wait(5)
    t0 = time.monotonic()
    tasks.shutdown()
    assert time.monotonic() - t0 < 1.0
    release.set()
