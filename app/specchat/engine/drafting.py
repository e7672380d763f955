"""What a drafter is to the loop, the simulator and the controller: the protocol a drafter
implements and the entry (:class:`DrafterKind`) that plugs it into ``drafters.DRAFTERS``.

A round (:class:`~.round.Rounds`, the one the loop and the simulator both play) goes: every
drafter the answer may use (its mode's, in ``specchat.modes.MODES``) makes an :class:`Offer` (the
longest draft it can make now, the evidence behind it, what making the offer cost); the
controller picks one drafter and K from the offers; the chosen one drafts.  The loop asks a
:class:`LiveDrafter`, the simulator its :class:`Replay`; neither knows a drafter's kind.

The controller prices a drafter from what its entry says (:class:`DrafterKind`): its longest
draft, whether it is priced per draft-model decode or per proposed token, whether ``auto`` sets
it a confidence stop, whether its acceptance is learned per class of match length, and how often
``auto`` re-probes it.  Stable shapes where they cost (engine/shapes.py) are the drafter's own
business: a draft model catches up one token at a time on a shape-sensitive backend; the loop
only pads the target's verify batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .settings import ControllerSettings, Drafter

if TYPE_CHECKING:
    from .runtime import LoadedModel


@dataclass(frozen=True, slots=True)
class Offer:
    """A drafter's offer for one round."""

    ceiling: int = 0  # the longest draft it offers (0: none this round)
    match: int = 0  # the evidence behind it the controller plans with (prompt lookup: its match length)
    seconds: float = 0.0  # what making the offer cost (part of the round's draft time)
    # the proposal's tokens where making the offer made them (prompt lookup; none: an offer that makes no
    # tokens, as a draft model's): one not drafted is still checked against the tokens the target commits,
    # for free (round.Rounds, DraftController.observe_unasked)
    proposal: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Drafted:
    """What the chosen drafter drafted in the loop."""

    tokens: list[int]
    seconds: float = 0.0  # drafting time beyond the offer's
    catch_up: int = 0  # tokens of context it caught up on first (a draft model)
    decoded: int = 0  # tokens it decoded (a draft model: catch-up and drafting)
    spare: int = 0  # of the tokens, the last ones its confidence stop declined and sent anyway (Plan.spare_p)


@dataclass(frozen=True, slots=True)
class Replayed:
    """What the chosen drafter drafted in the simulator, from a trace."""

    drafted: int
    accepted: int
    seconds: tuple[float, ...] = ()  # drafting time beyond the offer's, term by term as the clock drew it
    catch_up: int = 0
    decoded: int = 0
    spare: int = 0  # of the drafted, the last ones its confidence stop declined and sent anyway (Plan.spare_p)


class PlanView(Protocol):
    """What a drafter reads of the controller's plan (:class:`~.controller.Plan`)."""

    @property
    def k(self) -> int: ...

    @property
    def p_min(self) -> float | None: ...

    @property
    def spare_p(self) -> tuple[float, ...]: ...


class LiveDrafter(Protocol):
    """A drafter in the loop.  One lives as long as the loaded pair."""

    name: Drafter
    cheap_prefill: bool  # its prefill is host work, done first while the target's prefill computes

    def start(self) -> None:
        """A new answer begins (called for every drafter the pair has, used or not)."""

    def forget(self) -> None:
        """Drop what it kept of earlier answers: the next answer drafts as a session's first would."""

    def prefill(self, prompt: list[int], rows: int = 0) -> tuple[int, ...]:
        """The answer's prompt, while the target decodes it (only if the answer may use it).  With ``rows``:
        its next-token choice at each of the prompt's last positions, up to ``rows`` of them, where it
        makes such choices (a draft model; what the prompt's agreement compares with the target's:
        engine/generate.py), else ()."""

    def offer(self, history: list[int], k_cap: int, settings: ControllerSettings) -> Offer:
        """Its offer for a round after ``history`` (every committed token): at most ``k_cap``."""

    def draft(self, history: list[int], plan: PlanView) -> Drafted:
        """The draft the controller chose it for (at most ``plan.k`` tokens)."""


class TraceRows(Protocol):
    """What a replay reads of one prompt's agreement trace (:class:`~.trace.PromptTrace`)."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def tokens(self) -> list[int]: ...

    @property
    def draft_match(self) -> list[int]: ...

    @property
    def draft_p(self) -> list[list[int]]: ...

    @property
    def draft_p10(self) -> list[list[int]]: ...

    @property
    def lookup_len(self) -> list[int]: ...

    @property
    def lookup_match(self) -> list[int]: ...

    @property
    def lookup_agree(self) -> list[int]: ...


class ReplayCosts(Protocol):
    """What a replay charges from (:class:`~.simulate.CostProfile`)."""

    @property
    def token_s(self) -> float: ...

    @property
    def lookup_s(self) -> float: ...

    @property
    def recapture_s(self) -> float: ...

    @property
    def draft_s(self) -> float: ...

    def verify_s(self, n: int) -> float: ...

    @property
    def draft_block(self) -> int:
        """The most tokens one draft call makes (a DFlash block); 0: no limit of the drafter's own."""
        ...

    def head_draft_s(self, passes: int) -> float | None:
        """Seconds one call of a trained drafter (MTP, EAGLE-3, DFlash) costs with ``passes`` head passes:
        its fixed cost per call and its cost per pass; None where the profile's drafter is a draft model."""
        ...


@dataclass(frozen=True, slots=True)
class ReplayContext:
    """One simulated answer, as a drafter's replay sees it."""

    trace: TraceRows
    profile: ReplayCosts
    clock: Callable[[float], float]  # a cost as a run would measure it (the profile's noise)
    settings: ControllerSettings
    shaped: bool  # the profile replays CUDA graphs: the loop of engine/shapes.py runs
    p_top10: bool = False  # a draft model's confidence reads its top-10 softmax (llama.cpp)
    n_min: int = 0  # drafts shorter than this are dropped (llama.cpp's --spec-draft-n-min)


class Replay(Protocol):
    """A drafter in the simulator, for one answer: offers and drafts from the trace."""

    def offer(self, i: int, k_cap: int) -> Offer:
        """Its offer at trace position ``i`` (the newest committed token is the answer's ``i``-th)."""

    def draft(self, i: int, plan: PlanView) -> Replayed:
        """What it drafts there for ``plan``, and how much of it the target accepts."""


def _k_max(settings: ControllerSettings) -> int:
    return settings.k_max


@dataclass(frozen=True, slots=True)
class DrafterKind:
    """One line of the drafter registry (``drafters.DRAFTERS``): how a drafter is built, replayed, priced."""

    name: Drafter
    # the drafter for a loaded pair (target, draft model or None, settings); None: it cannot run with it
    build: Callable[[LoadedModel, LoadedModel | None, ControllerSettings], LiveDrafter | None]
    replay: Callable[[ReplayContext], Replay]  # its simulator side, for one answer
    k_max: Callable[[ControllerSettings], int] = _k_max  # its longest draft
    needs_model: bool = False  # it runs only with a draft model (a trace with the draft's columns)
    # priced per draft-model decode (k + a^k a round: controller.draft_decodes), else per proposed token
    per_decode: bool = False
    confidence_stop: bool = False  # auto sets its confidence stop; a declined draft counts as a stop (controller.AcceptanceWindow.stop_rate)
    match_classes: bool = False  # its acceptance is learned per class of the offer's match (one such drafter)
    probe_scale: int = 1  # auto re-probes it every probe_interval_tokens x this ...
    probe_min_gain: float = 0.0  # ... and only where its best case beats plain by this much (0: always)
    # rounds it is assumed to draft in a row before it has run (controller.DraftController._stay, then
    # learned from its whole runs): a draft model that pays drafts round after round; prompt lookup's
    # copies come as one long proposal between rounds it has nothing to offer
    stay_prior: float = 8.0


def kinds_by_name(kinds: Sequence[DrafterKind]) -> dict[Drafter, DrafterKind]:
    return {k.name: k for k in kinds}
