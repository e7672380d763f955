"""The ring buffers hold the newest rows in order, bounded by count and by age, and hand out safe copies."""

import numpy as np
import pytest

from specchat.telemetry.ring import RingBuffer


def filled(capacity: int, n: int) -> RingBuffer:
    ring = RingBuffer(capacity, ("t", "v"))
    for i in range(n):
        ring.append({"t": float(i), "v": 10.0 * i})
    return ring


def test_rows_come_back_oldest_first_before_the_ring_is_full():
    ring = filled(8, 5)
    assert len(ring) == 5
    np.testing.assert_array_equal(ring.view("t"), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(ring.view("v"), [0, 10, 20, 30, 40])


def test_a_full_ring_overwrites_the_oldest_rows_and_stays_in_order():
    ring = filled(8, 21)
    assert len(ring) == 8 and ring.capacity == 8
    np.testing.assert_array_equal(ring.view("t"), np.arange(13, 21))
    assert ring.last("v") == 200.0


def test_views_are_read_only_copies():
    ring = filled(4, 6)  # wrapped: the view is stitched from two segments
    view = ring.view("t")
    with pytest.raises(ValueError):
        view[0] = -1.0
    ring.append({"t": 6.0, "v": 60.0})
    np.testing.assert_array_equal(view, [2, 3, 4, 5])  # the earlier view did not move with the ring
    ring = filled(8, 3)  # one segment: still a copy, not a window into the ring's storage
    before = ring.view("v")
    ring.set_last("v", -5.0)
    np.testing.assert_array_equal(before, [0, 10, 20])
    assert not before.flags.writeable


def test_missing_values_are_nan_and_unknown_columns_are_refused():
    ring = RingBuffer(4, ("t", "a", "b"))
    ring.append({"t": 1.0, "a": 2.0})
    ring.append({"t": 2.0, "a": None, "b": 3.0})
    assert np.isnan(ring.view("b")[0]) and np.isnan(ring.view("a")[1])
    with pytest.raises(KeyError, match="nope"):
        ring.append({"t": 3.0, "nope": 1.0})


@pytest.mark.parametrize("n", [6, 10, 13])  # not wrapped, wrapped at the cut, wrapped before the cut
def test_trim_keeps_only_the_last_seconds(n):
    ring = filled(10, n)
    newest = n - 1
    dropped = ring.trim_before(newest - 3.5)  # keep the rows of the last 3.5 s
    np.testing.assert_array_equal(ring.view("t"), np.arange(newest - 3, newest + 1))
    assert dropped == min(n, 10) - 4
    assert ring.trim_before(newest - 3.5) == 0  # idempotent
    ring.append({"t": newest + 1.0, "v": 0.0})  # appending after a trim keeps the order
    np.testing.assert_array_equal(ring.view("t"), np.arange(newest - 3, newest + 2))


def test_trimming_everything_and_refilling():
    ring = filled(4, 6)
    assert ring.trim_before(100.0) == 4 and len(ring) == 0
    assert ring.view("t").shape == (0,) and ring.last("t") is None
    ring.append({"t": 200.0, "v": 1.0})
    np.testing.assert_array_equal(ring.view("t"), [200.0])


def test_the_newest_row_can_be_amended():
    ring = filled(3, 5)
    ring.set_last("v", 99.0)
    np.testing.assert_array_equal(ring.view("v"), [20, 30, 99])
    with pytest.raises(IndexError):
        RingBuffer(2, ("t",)).set_last("t", 1.0)


def test_a_wide_column_holds_one_value_per_gpu():
    ring = RingBuffer(3, ("t", "vram"), width={"vram": 2})
    for i in range(4):
        ring.append({"t": float(i), "vram": [i, 10 * i]})
    np.testing.assert_array_equal(ring.view("vram"), [[1, 10], [2, 20], [3, 30]])
    single = RingBuffer(3, ("t", "vram"), width={"vram": 1})
    single.append({"t": 0.0, "vram": [5]})
    assert single.view("vram").shape == (1, 1)  # one GPU is still a 2-D column


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError):
        RingBuffer(0, ("t",))
    with pytest.raises(ValueError):
        RingBuffer(4, ("t", "t"))
