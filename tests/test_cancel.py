"""The one cancel design: a token set from any thread, closers that wake a blocked read, and a
blocking call that gives up the moment its token is cancelled."""

from __future__ import annotations

import socket
import threading

import pytest

from specchat.cancel import (
    Cancelled,
    CancelToken,
    DeadlinePassed,
    call_cancellable,
    shut_socket,
    start_daemon,
)


def test_a_closer_runs_once_when_the_token_is_cancelled_and_not_after_it_is_removed() -> None:
    token = CancelToken()
    ran: list[str] = []
    token.on_cancel(lambda: ran.append("kept"))
    remove = token.on_cancel(lambda: ran.append("removed"))
    remove()
    with token.closing(lambda: ran.append("block ended")):
        pass
    token.cancel()
    token.cancel()
    assert ran == ["kept"]
    token.on_cancel(lambda: ran.append("late"))  # registered after the cancel: runs at once
    assert ran == ["kept", "late"]
    with pytest.raises(Cancelled):
        token.raise_if_cancelled()


def test_a_failing_closer_does_not_stop_the_others() -> None:
    token = CancelToken()
    ran: list[int] = []
    token.on_cancel(lambda: [][0])
    token.on_cancel(lambda: ran.append(1))
    token.cancel()
    assert ran == [1] and token.cancelled


def test_cancel_shuts_down_a_socket_whose_read_blocks_in_another_thread() -> None:
    """The close-on-cancel closer wakes a read that would otherwise wait for a peer that never sends."""
    a, b = socket.socketpair()
    token = CancelToken()
    got: list[bytes] = []
    reading = threading.Event()

    def read() -> None:
        reading.set()
        got.append(a.recv(10))

    token.on_cancel(lambda: shut_socket(a))
    reader = start_daemon(read, name="test-reader")
    assert reading.wait(5)
    token.cancel()
    reader.join(5)
    assert not reader.is_alive() and got == [b""]  # the read returned: end of stream
    shut_socket(a)  # a second shutdown is harmless
    a.close()
    b.close()


def test_a_blocking_call_returns_its_value_or_raises_its_error() -> None:
    assert call_cancellable(lambda: 6 * 7, CancelToken()) == 42
    with pytest.raises(KeyError):
        call_cancellable(lambda: {}["missing"], None)


def test_a_cancelled_call_gives_up_at_once_and_the_stuck_helper_is_left_behind() -> None:
    token, started, release = CancelToken(), threading.Event(), threading.Event()

    def stuck() -> str:
        started.set()
        release.wait(30)  # a blocked read with no cancel check in it
        return "stale"

    cancel_when_started = start_daemon(lambda: (started.wait(5), token.cancel()), name="test-canceller")
    with pytest.raises(Cancelled):
        call_cancellable(stuck, token)
    cancel_when_started.join(5)
    release.set()


def test_a_cancel_can_raise_the_callers_own_error() -> None:
    class Mine(Exception):
        pass

    token = CancelToken()
    token.cancel()

    def mine() -> None:
        raise Mine()

    with pytest.raises(Mine):
        call_cancellable(lambda: 1, token, on_cancel=mine)


def test_a_call_past_its_deadline_is_given_up() -> None:
    release = threading.Event()
    with pytest.raises(DeadlinePassed):
        call_cancellable(lambda: release.wait(30), CancelToken(), deadline_s=0.1, name="the hub")
    release.set()


def test_a_cancelled_sleep_ends_early_with_cancelled() -> None:
    token = CancelToken()
    start_daemon(token.cancel, name="test-canceller")
    with pytest.raises(Cancelled):
        token.sleep(30)
