"""``auto`` on a server: speculation on or off for each answer, per task, from the rates measured there.  Qt-free.

A local pair's ``auto`` decides every round (``engine/controller.py``); a server drafts a whole answer
with the drafter it was started with, so the one choice left is per answer: speculation on (the server's
drafter) or off (plain decoding on the same server).  :class:`ServerAuto` makes that choice for a task
tag (code, edit, chat, json, summary, creative, or the user's own) from the answers of that task
measured on this server with speculation on and off (their counts, pooled: the decode tok/s of the
newest :data:`WINDOW` answers of each side):

- under :data:`MIN_ANSWERS` answers on either side: explore, i.e. keep the side that runs until it has
  its answers, then the other (so measuring a task costs one restart, not one per answer);
- on where the on-rate beats the off-rate by :data:`MARGIN` or more, off where it is slower; between
  the two, what runs now stays (each change of a managed llama-server is a restart);
- once decided, the other side once every :data:`EXPLORE_EVERY` answers of the task, so an estimate
  that went stale (another model loaded beside it, a long context) can change its mind; less often
  where a restart is long beside the task's answers (a 27B model reloading): the two restarts of a
  look cost at most :data:`EXPLORE_SHARE` of the time the task's answers take meanwhile.

Every choice says why in one line (the answer's stats line and the API's ``specchat.why``).  The
rates are the caller's: stored task runs in the window, the backend's own answers elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from specchat.metrics import MIN_PLAIN_RUNS, Counts
from specchat.remote.kinds import LlamaServer

MIN_ANSWERS = MIN_PLAIN_RUNS  # answers on each side before a rate is a figure (as "x vs plain" asks)
MARGIN = 0.05  # on only where it measured at least 5% faster than plain
WINDOW = 10  # the newest answers of each side a rate pools (the machine's load drifts)
EXPLORE_EVERY = 10  # once decided, the other side is measured again once in this many answers
EXPLORE_SHARE = 0.05  # ... or fewer, so that its two restarts cost at most this share of the answers' time
# how a managed llama-server's answers are stored (their mode: RemoteBackend.mode_label), on and off
ON_MODE, OFF_MODE = LlamaServer.name + "+draft", LlamaServer.name


def samples_of(runs: Iterable[tuple[str, Counts]]) -> tuple[tuple[bool, Counts], ...]:
    """Stored runs (mode, counts) of a managed llama-server as the request's ``measured``."""
    return tuple((mode == ON_MODE, counts) for mode, counts in runs if mode in (ON_MODE, OFF_MODE))


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished answer of a task on this server: was speculation on, and what it measured."""

    on: bool
    counts: Counts


@dataclass(frozen=True, slots=True)
class Choice:
    on: bool  # run this answer with the server's drafter
    why: str  # one line: "auto: llama-server's draft-mtp on for code: 1.42x plain over 6 answers"
    explore: bool = False  # chosen to measure, not because it measured faster


@dataclass(frozen=True, slots=True)
class Rates:
    """One task's measured sides: how many answers each pools and their decode tok/s."""

    n_on: int
    n_off: int
    on_tok_s: float | None
    off_tok_s: float | None
    answer_s: float = 0.0  # the mean wall time of the answers pooled (prefill and decode)

    @classmethod
    def of(cls, samples: Iterable[Sample], window: int = WINDOW) -> Rates:
        items = list(samples)
        on = [s.counts for s in items if s.on and s.counts.decode_tok_s][-window:]
        off = [s.counts for s in items if not s.on and s.counts.decode_tok_s][-window:]
        pooled = Counts.total(on + off)
        answer_s = (pooled.prefill_s + pooled.decode_s) / len(on + off) if on or off else 0.0
        return cls(len(on), len(off), Counts.total(on).decode_tok_s, Counts.total(off).decode_tok_s, answer_s)

    @property
    def ratio(self) -> float | None:
        """On over off, once both sides have :data:`MIN_ANSWERS` answers; else None."""
        if min(self.n_on, self.n_off) < MIN_ANSWERS or not self.on_tok_s or not self.off_tok_s:
            return None
        return self.on_tok_s / self.off_tok_s


@dataclass(slots=True)
class ServerAuto:
    """The per-task choice of one server with one drafter (``drafter``: how the line names it, e.g.
    "llama-server's draft-mtp").  It keeps only how many decided answers each task had (for the
    bounded exploration); the samples are passed in each time."""

    drafter: str
    margin: float = MARGIN
    explore_every: int = EXPLORE_EVERY
    _decided: dict[str, int] = field(default_factory=dict)

    def choose(self, task: str, samples: Iterable[Sample], running: bool | None = None,
               restart_s: float | None = None) -> Choice:
        """On or off for the next answer of ``task``, given its ``samples`` (oldest first), what the
        server runs now (``running``; None: not known) and how long its last restart took (None: none yet)."""
        task = task or "chat"
        r = Rates.of(samples)
        ratio = r.ratio
        if ratio is None:  # too few answers on a side: the side that runs until it has its answers, then the other
            now = running is not False
            on = now if (r.n_on if now else r.n_off) < MIN_ANSWERS else not now
            return Choice(on, f"auto: {self._side(on)} for {task} to measure it: {r.n_on} of {MIN_ANSWERS} answers "
                              f"measured with speculation on, {r.n_off} of {MIN_ANSWERS} with it off", explore=True)
        n = r.n_on + r.n_off
        measured = f"{ratio:.2f}x plain over {n} answers"
        if ratio >= 1 + self.margin:
            best, band = True, ""
        elif ratio < 1:
            best, band = False, ""
        else:  # faster, but within the margin: what runs stays (a change is a restart)
            best = running if running is not None else False
            band = f", within the {self.margin:.0%} margin"
        count = self._decided.get(task, 0) + 1
        self._decided[task] = count
        every = self.explore_every
        if every > 0 and restart_s and r.answer_s > 0:  # a look's two restarts within EXPLORE_SHARE of the time
            every = max(every, math.ceil(2 * restart_s / (EXPLORE_SHARE * r.answer_s)))
        if every > 0 and count % every == 0:
            return Choice(not best, f"auto: {self._side(not best)} for {task} once, to measure it again: "
                                    f"{measured}", explore=True)
        stays = "stays " if band else ""
        return Choice(best, f"auto: {self._side(best, stays)} for {task}: {measured}{band}")

    def _side(self, on: bool, stays: str = "") -> str:
        return f"{self.drafter} {stays}on" if on else f"speculation {stays}off"
