"""Batch shapes a speculative loop feeds llama.cpp, kept steady where llama.cpp's cost depends on them.

llama.cpp's CUDA backend captures a CUDA graph per batch shape and replays it only after two
calls of the same shape; every change of shape re-captures.  Measured on an H100 through the C
API (shared notes, "shape churn"; Qwen2.5-0.5B shape, Q4_K_M, depth 256, medians of 60):

====================================================  ============
decode pattern on one context                         per decode
====================================================  ============
always 1 token                                        1.14 ms
1, 1, 3 repeated (a catch-up batch between steps)     3.0 / 4.4 ms
always 4 tokens                                       1.59 ms
3, 4, 5 repeated (a verify size that changes)         3.0-3.1 ms
====================================================  ============

So on such a backend (``LoadedModel.shape_sensitive``) the loop keeps its shapes:

- the draft decodes a short catch-up one token at a time (:data:`CATCH_UP_ONE_BY_ONE`), so all
  its decodes are 1-token decodes;
- the target's verify batch is padded to a held size (:class:`VerifyShape`), which grows at once
  when a round needs more and shrinks only after a window of rounds that all needed less.  The
  padding rows are never sampled (a causal model's earlier rows do not see later tokens) and
  are trimmed with the rejected drafts.

On a CPU nothing here runs: there, a batch costs less than its tokens one by one, and no
shape is cached.
"""

from __future__ import annotations

from collections import deque

# A catch-up of n tokens as one batch costs a churned n-token decode (3 tokens: 4.4 ms) plus the
# re-capture of the next two 1-token steps (2 x (3.0 - 1.14) ms): ~8 ms for n = 3; one by one it
# costs n x 1.14 ms.  They break even near n = 7; longer catch-ups (after rounds the draft did not
# run) go as one batch.
CATCH_UP_ONE_BY_ONE = 6

# Rounds that must all need a smaller verify batch before the held size shrinks to their largest:
# a smaller shape is one re-capture (~2 ms on the H100's 7B) and the padding it saves is a few
# rows' worth (1.40x -> 1.0x of a token), so a short dip is not worth a change.
SHRINK_AFTER = 8


class VerifyShape:
    """The verify batch size to feed a shape-sensitive target, one answer long."""

    def __init__(self, shrink_after: int = SHRINK_AFTER) -> None:
        self.size = 0
        self.changes = 0  # how many times the held size changed (each a re-capture)
        self._recent: deque[int] = deque(maxlen=max(1, shrink_after))

    def size_for(self, needed: int, room: int) -> int:
        """The batch size for a round that needs ``needed`` rows, at most ``room`` (the context's
        free cells); never less than ``needed``."""
        self._recent.append(needed)
        held = self.size
        if needed > held:
            held = needed
        elif len(self._recent) == self._recent.maxlen and max(self._recent) < held:
            held = max(self._recent)
        if held != self.size:
            self.size, self.changes = held, self.changes + (self.size != 0)
        return max(needed, min(self.size, room))
