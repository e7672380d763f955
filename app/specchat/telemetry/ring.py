"""Fixed-capacity ring buffers of named columns, for the live plots.

The GUI repaints on a timer (10 to 30 Hz), not per token, so whatever it reads must be
cheap to copy and must not grow without bound: a ring of preallocated numpy columns
does both.  Appending a row is O(1) (one element written per column, no reallocation),
reading the rows in order is two slice copies, and rows older than "the last N seconds"
are dropped by moving the start index after a binary search on the time column.

Times must not decrease from row to row (the recorder clamps them); that is what makes
the binary search valid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

TIME = "t"  # the column time-based trimming looks at


class RingBuffer:
    """Rows of float64 columns, the oldest overwritten once ``capacity`` rows are held.

    Columns are named once, at construction; every row gives a value for each.  Missing
    or unknown values are stored as NaN, which pyqtgraph draws as a gap.
    """

    def __init__(self, capacity: int, columns: Sequence[str], *,
                 width: Mapping[str, int] | None = None) -> None:
        """``width`` makes a column 2-D: that many values per row (e.g. VRAM used on each GPU)."""
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if len(set(columns)) != len(columns) or not columns:
            raise ValueError("need one or more distinct column names")
        self.capacity = int(capacity)
        self.columns = tuple(columns)
        width = dict(width or {})
        self._data: dict[str, np.ndarray] = {}
        for name in self.columns:
            w = width.get(name)
            shape = (self.capacity,) if w is None else (self.capacity, w)
            self._data[name] = np.full(shape, np.nan, dtype=np.float64)
        self._start = 0  # index of the oldest row
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def clear(self) -> None:
        self._start = 0
        self._len = 0

    def _index(self, i: int) -> int:
        """Storage index of the i-th row in order (0 = oldest)."""
        return (self._start + i) % self.capacity

    def append(self, row: Mapping[str, float | Sequence[float] | None]) -> None:
        """Add one row; columns it does not name (or names as None) are NaN.  O(1)."""
        unknown = set(row) - set(self._data)
        if unknown:
            raise KeyError(f"unknown column(s): {', '.join(sorted(unknown))}")
        if self._len < self.capacity:
            pos = self._index(self._len)
            self._len += 1
        else:  # full: overwrite the oldest
            pos = self._start
            self._start = (self._start + 1) % self.capacity
        for name, col in self._data.items():
            value = row.get(name)
            col[pos] = np.nan if value is None else value

    def set_last(self, name: str, value: float | None) -> None:
        """Change a column of the newest row (an event that arrives after its round, like a fallback)."""
        if not self._len:
            raise IndexError("the ring is empty")
        self._data[name][self._index(self._len - 1)] = np.nan if value is None else value

    def last(self, name: str) -> float | np.ndarray | None:
        """The newest value of a column, or None when empty."""
        if not self._len:
            return None
        return self._data[name][self._index(self._len - 1)]

    def _ordered(self, col: np.ndarray) -> np.ndarray:
        """The held rows of one column, oldest first, as a new array (no Python loop over rows)."""
        end = self._start + self._len
        if end <= self.capacity:
            return col[self._start:end].copy()
        return np.concatenate((col[self._start:], col[: end - self.capacity]))

    def view(self, name: str) -> np.ndarray:
        """One column in order, oldest first: a read-only copy, so a reader cannot corrupt the ring."""
        out = self._ordered(self._data[name])
        out.setflags(write=False)
        return out

    def views(self) -> dict[str, np.ndarray]:
        """Every column in order, as read-only copies."""
        return {name: self.view(name) for name in self.columns}

    def trim_before(self, cutoff: float, *, time_column: str = TIME) -> int:
        """Drop rows whose time is before ``cutoff`` ("keep the last N seconds"); returns how many.

        The time column is sorted, so a binary search on each of the (at most two)
        stored segments finds the first row to keep.
        """
        if not self._len:
            return 0
        col = self._data[time_column]
        end = self._start + self._len
        if end <= self.capacity:
            drop = int(np.searchsorted(col[self._start:end], cutoff, side="left"))
        else:
            first = col[self._start:]
            drop = int(np.searchsorted(first, cutoff, side="left"))
            if drop == len(first):
                drop += int(np.searchsorted(col[: end - self.capacity], cutoff, side="left"))
        self._start = self._index(drop)
        self._len -= drop
        return drop
