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
  when a round needs more and shrinks when the padding it wastes has cost as much as a change.
  The padding rows are never sampled (a causal model's earlier rows do not see later tokens)
  and are trimmed with the rejected drafts.

On a CPU nothing here runs: there, a batch costs less than its tokens one by one, and no
shape is cached.
"""

from __future__ import annotations

from collections.abc import Callable

# A catch-up of n tokens as one batch costs a churned n-token decode (3 tokens: 4.4 ms) plus the
# re-capture of the next two 1-token steps (2 x (3.0 - 1.14) ms): ~8 ms for n = 3; one by one it
# costs n x 1.14 ms.  They break even near n = 7; longer catch-ups (after rounds the draft did not
# run) go as one batch.
CATCH_UP_ONE_BY_ONE = 6

# A change of shape re-captures on its call and the next (llama.cpp replays from the third call of a
# shape).  What one re-captured call costs, until the loop measures it: 1-token decodes of the
# 0.5B shape took 3.0 ms when every third call was a 3-token batch and 1.14 ms in a steady stream.
RECAPTURE_S = 1.86e-3
CALLS_PER_CHANGE = 2


class VerifyShape:
    """The verify batch size to feed a shape-sensitive target, one answer long.

    It grows at once when a round needs more rows.  It shrinks the way one rents skis: each round
    that needs fewer rows wastes ``verify_s(held) - verify_s(needed)`` on padding, and once the waste
    since the held size last fitted a round exactly reaches the cost of a change (two re-captured
    calls), it shrinks to the largest need of those rounds.  Never more than twice the best choice
    made in hindsight; with ``verify_s`` flat it never shrinks, with a steep one it follows at once.

    ``recapture_s`` (seconds one re-captured call costs) is read at every round, so a cost model that
    learns it from the rounds (:meth:`~specchat.engine.controller.CostModel.observe_verify`) moves the
    break-even point as it learns.  :attr:`fresh` says whether the size just given is one llama.cpp
    has not replayed yet (it differs from one of the two before): such a round pays a re-capture.
    """

    def __init__(self, verify_s: Callable[[int], float],
                 recapture_s: Callable[[], float] | float = RECAPTURE_S) -> None:
        self.verify_s = verify_s
        self._recapture = recapture_s if callable(recapture_s) else (lambda: float(recapture_s))
        self.size = 0
        self.changes = 0  # how many times the held size changed (each a re-capture)
        self.fresh = True  # the last size given has not been replayed (the prompt's prefill came before)
        self._waste = 0.0
        self._largest = 0  # the largest need since the held size last fitted a round
        self._given: tuple[int, int] = (0, 0)  # the sizes given by the two calls before

    @property
    def change_s(self) -> float:
        return CALLS_PER_CHANGE * self._recapture()

    def size_for(self, needed: int, room: int, *, one_off: bool = False) -> int:
        """The batch size for a round that needs ``needed`` rows, at most ``room`` (the context's
        free cells); never less than ``needed``.  A ``one_off`` round (a probe, or a drafter whose runs
        end before its size would be replayed: ``Plan.one_off``) never moves the held size: one that
        needs more gets its rows for that round only (growing for it left the rounds after it padded
        until the waste paid for a change back), or the size given last where padding to it costs less
        than a change; one that fits is padded to the held size without counting as a round that
        needs it."""
        held = self.size
        if one_off and needed > held:
            # rows for this round only, or the size the backend is replaying now where that is larger (one-off
            # rounds in a row: a run whose drafter usually drafts briefly) and its padding costs less than
            # leaving it and coming back (two re-captured calls).  Given their own sizes, a draft model's
            # run at a confidence stop re-captured at every change of length: simulated H100 JSON after a
            # chat, 9, 9, 9, 9, 7, 9, 6, 9 rows, 6 of 13 rounds re-captured
            replayed = self._given[0] if self._given[0] == self._given[1] else 0
            if needed < replayed <= room and self.verify_s(replayed) - self.verify_s(needed) < self.change_s:
                return self._give(replayed)
            return self._give(needed)
        if one_off and needed <= held:
            # padded to the held size as any round, but no evidence that the size is needed: it neither starts
            # the waste over nor sets the size to shrink to.  Counted so, prompt lookup's 3-token tries in the
            # held size of 4 kept it for the plain rounds between them, each padded to 4 rows (simulated H100
            # summary, 0.91x plain over an answer)
            self._waste += self.verify_s(held) - self.verify_s(needed)
            return self._give(max(needed, min(self.size, room)))
        if needed >= held:
            self._waste, self._largest = 0.0, 0
            held = needed
        else:
            self._largest = max(self._largest, needed)
            self._waste += self.verify_s(held) - self.verify_s(needed)
            if self._waste >= self.change_s:
                held, self._waste, self._largest = self._largest, 0.0, 0
        if held != self.size:
            self.changes += self.size != 0
            self.size = held
        return self._give(max(needed, min(self.size, room)))

    def _give(self, given: int) -> int:
        self.fresh = not (given == self._given[0] == self._given[1])
        self._given = (given, self._given[0])
        return given
