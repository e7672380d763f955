"""One speculative round, written once: plan, draft, verify, accept, observe.

The generation loop (:func:`~.generate.generate`, on llama.cpp) and the simulator
(``harness/simulate.answer``, a trace replayed on a cost profile) play the same
:class:`Rounds`.  They differ only in the decodes, behind :class:`RoundDecodes`: a drafter's
offer and draft, the target's verify, and what the round's own work cost (the wall clock,
or the profile's figure on the simulated clock).  Everything else (the offers' order, the
controller's plan, the verify size held where batch shapes cost, the round's
:class:`~.events.RoundStats`, what the controller learns from it) is here, so the simulator
cannot drift from the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from specchat.metrics import Counts

from .events import Fallback, RoundStats
from .settings import Drafter, Mode
from .shapes import VerifyShape

if TYPE_CHECKING:
    from .controller import DraftController, Plan
    from .drafting import Offer


# the most tokens of a proposal not drafted that are checked (Rounds._check_unasked): it is settled within as
# many committed tokens, so what it teaches arrives while the text it is about lasts
UNASKED_K = 4


@dataclass(frozen=True, slots=True)
class Draft:
    """What the chosen drafter drafted, as the round counts it (the decodes keep the tokens)."""

    n: int = 0  # tokens drafted (in the loop: as much of them as a grammar allows)
    seconds: tuple[float, ...] = ()  # what drafting cost beyond the offers, term by term as measured
    catch_up: int = 0  # tokens of context it caught up on first (a draft model)
    decoded: int = 0  # tokens it decoded (a draft model: catch-up and drafting)
    spare: int = 0  # of the n, the last ones its confidence stop declined and sent anyway (Plan.spare_p)


NO_DRAFT = Draft()


@dataclass(frozen=True, slots=True)
class Verified:
    """The target's verdict on a draft."""

    accepted: int  # drafted tokens the target accepted
    emitted: int  # tokens the round committed: the accepted ones and the target's own (fewer at the end)
    seconds: float  # what the verify cost
    tokens: tuple[int, ...] = ()  # what the round committed


class RoundDecodes(Protocol):
    """What a round decodes on: the loaded pair (the loop) or a trace on a cost profile (the simulator).

    Each keeps its answer's position (the committed tokens) and moves it on in :meth:`verify`.
    """

    @property
    def room(self) -> int:
        """Rows the target's context still holds: the most a verify batch may be padded to."""

    def offer(self, drafter: Drafter, k_cap: int) -> Offer:
        """The drafter's offer for this round (at most ``k_cap`` tokens)."""

    def draft(self, drafter: Drafter, plan: Plan) -> Draft:
        """The draft of the drafter the controller chose."""

    def verify(self, draft: Draft, rows: int, fresh: bool) -> Verified:
        """The target's verify of the first ``draft.n`` tokens of the last draft (none: ``NO_DRAFT``) in a
        batch of ``rows``, padding included; ``fresh``: a size not replayed yet, which pays a re-capture
        (engine/shapes.py)."""

    def overhead(self, draft_s: float, verify_s: float) -> float:
        """What the round cost besides drafting and verifying (SpecChat's own loop)."""


@dataclass(frozen=True, slots=True)
class Round:
    """A finished round: its stats, and the fallbacks what the controller learned from it caused."""

    stats: RoundStats
    fallbacks: list[Fallback]


class Rounds:
    """One answer's rounds on one controller, on a :class:`RoundDecodes`.

    ``drafters`` are those the answer may use (its ``answer_plan``'s that the decodes have), in
    the order they offer.  ``shaped``: the target's cost depends on the batch shape (CUDA graphs),
    so the verify size is held (:class:`~.shapes.VerifyShape`).
    """

    def __init__(self, controller: DraftController, mode: Mode, decodes: RoundDecodes,
                 drafters: Sequence[Drafter], *, shaped: bool) -> None:
        self.controller = controller
        self.mode = mode
        self.decodes = decodes
        self.drafters = tuple(drafters)
        costs = controller.costs
        self.shape = VerifyShape(costs.verify, lambda: costs.recapture_s) if shaped else None
        self.index = 0
        self.counts = Counts()  # the rounds' counts, added up as they finish
        self.by_drafter: dict[str, tuple[int, int]] = {}  # drafter -> (drafted, accepted) over the answer
        self._unasked: tuple[Drafter, Offer] | None = None  # a proposal not drafted, being checked
        self._seen: list[int] = []  # the tokens committed since it was made

    def play(self, k_cap: int) -> Round:
        """One round drafting at most ``k_cap`` tokens (each drafter caps it further)."""
        plan, draft_s, offers = self._plan(k_cap)
        # planned only when offered
        draft = self.decodes.draft(plan.drafter, plan) if plan.drafter in self.drafters else NO_DRAFT
        for seconds in draft.seconds:  # term by term, as measured (the simulated clock draws each)
            draft_s += seconds
        shape = self.shape
        # where shapes are kept a declined token rides in a row the held size pays for, or is not sent
        need = draft.n - draft.spare + 1
        rows = draft.n + 1 if shape is None else shape.size_for(need, self.decodes.room, one_off=plan.one_off)
        if rows < draft.n + 1:
            draft = replace(draft, n=rows - 1, spare=draft.spare - (draft.n + 1 - rows))
        fresh = shape is not None and shape.fresh
        verified = self.decodes.verify(draft, rows, fresh)
        # the round as the controller learns it: a spare token is not the draft's (its stop declined it), so
        # it counts neither as drafted nor in acceptance, only in what the round emitted
        drafted = draft.n - draft.spare
        stats = RoundStats(
            index=self.index, drafter=plan.drafter if drafted else Drafter.NONE, k=plan.k if drafted else 0,
            drafted=drafted, accepted=min(verified.accepted, drafted), emitted=verified.emitted, draft_s=draft_s,
            verify_s=verified.seconds, overhead_s=self.decodes.overhead(draft_s, verified.seconds),
            catch_up=draft.catch_up, draft_decoded=draft.decoded, fallback=plan.fallback, verify_n=rows,
            verify_fresh=fresh, spare=draft.spare, spare_accepted=max(verified.accepted - drafted, 0),
        )
        self._count(stats)
        self._check_unasked(offers, plan.drafter if draft.n else Drafter.NONE, verified.tokens)
        return Round(stats, self.controller.observe(self.mode, plan, stats))

    def _check_unasked(self, offers: dict[Drafter, Offer], drafted: Drafter, committed: tuple[int, ...]) -> None:
        """A proposal made and not drafted (prompt lookup's, in a plain round or another drafter's) is
        checked against the tokens the target commits from there, as its verify would have, and the
        controller learns what it would have been worth (``observe_unasked``).  One at a time: the next is
        taken once it is settled, so two of them never count the same committed token."""
        if self._unasked is None:
            name = next((n for n, o in offers.items() if o.proposal and n != drafted), None)
            if name is not None:
                self._unasked, self._seen = (name, offers[name]), []
        if self._unasked is None:
            return
        name, offer = self._unasked
        self._seen.extend(committed)
        proposal, seen = offer.proposal[:UNASKED_K], self._seen
        agreed = next((j for j, (p, t) in enumerate(zip(proposal, seen, strict=False)) if p != t),
                      min(len(proposal), len(seen)))
        if agreed < len(seen) or agreed == len(proposal):  # a token it got wrong, or all of it right
            self.controller.observe_unasked(name, offer.match, len(proposal), agreed)
            self._unasked = None

    def _plan(self, k_cap: int) -> tuple[Plan, float, dict[Drafter, Offer]]:
        """Every drafter offers (a draft model: its K ceiling; prompt lookup: its proposal, made now);
        the controller picks one and K.  Also what the offers cost, and the offers."""
        offers: dict[Drafter, Offer] = {}
        available: dict[Drafter, int] = {}
        match = 0  # the evidence behind an offer (prompt lookup's match length)
        seconds = 0.0
        if k_cap > 0:
            for name in self.drafters:
                offer = self.decodes.offer(name, k_cap)
                seconds += offer.seconds
                if offer.ceiling:
                    offers[name] = offer
                    available[name] = offer.ceiling
                    match = match or offer.match
        shape = self.shape
        plan = self.controller.plan(self.mode, available, match, held=shape.size if shape is not None else 0,
                                    change_s=shape.change_s if shape is not None else 0.0)
        return plan, seconds, offers

    def _count(self, stats: RoundStats) -> None:
        self.index += 1
        self.counts += stats.counts
        if stats.drafted:
            d0, a0 = self.by_drafter.get(stats.drafter.value, (0, 0))
            self.by_drafter[stats.drafter.value] = (d0 + stats.drafted, a0 + stats.accepted)
