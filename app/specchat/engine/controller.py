"""The draft-length controller: when does speculation pay, and how far to draft.

Cost model (docs/ARCHITECTURE.md, "Speculative decoding").  With per-token acceptance ``a`` a round with
draft length K emits on average E(K) = (1 - a^(K+1)) / (1 - a) tokens and costs
K * draft_cost + verify_cost(K + 1) + overhead.  The controller picks the K
(0 = plain decoding) with the best expected tokens per second.  Verify costs per
batch size start from a calibration (see :mod:`specchat.engine.calibration`)
and follow the measured rounds.

Guard rails on top, from practice: token acceptance below 50% or sequence
acceptance below 60% over a window falls back to plain decoding for a while;
falling back on more than 15% of rounds raises a warning.  All are settings.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

from specchat.metrics import Counts
from specchat.modes import MODE_DRAFTERS

from .drafters import KINDS
from .events import Fallback, RoundStats
from .settings import ControllerSettings, Drafter, Mode
from .shapes import CALLS_PER_CHANGE, CATCH_UP_ONE_BY_ONE

RECHECKED = "re-checked at "  # how a re-check's brief begins (the stats line folds repeats of it)

EMA = 0.2  # weight of a new cost measurement (the level of the verify costs: CostModel)
# A steady round's cost is the level times its size's shape, in log terms a sum, and each round's error is
# shared between the two by how uncertain each is (a Kalman filter, diagonal): the level drifts (the machine's
# speed, LEVEL_DRIFT per round, which makes a steady level learn at about EMA), a shape is a fixed unknown the
# calibration measured once (SHAPE_VAR), and one round's cost scatters by NOISE_VAR.  A size the calibration
# misjudged learns its own cost in its first rounds; once its rounds have pinned it, a lasting change of speed
# seen there goes to the level of every size
LEVEL_DRIFT, SHAPE_VAR, NOISE_VAR = 1.25e-4, 0.1 ** 2, 0.05 ** 2
# the verify size whose shape stays the calibration's, so that the level is how fast one token runs now
# against it: a size learning its own shape from its own rounds alone took a share of every change of
# speed (a 3x slowdown seen in 1-token rounds left the calibrated 1-token cost 18% up, above 2 tokens')
ANCHOR = 1
# auto plans a size no steady round has measured yet this many standard deviations of its shape's
# uncertainty (SHAPE_VAR) cheaper than the calibration's one timing of it: optimism about a cost, as its
# acceptance estimate is optimistic, so a size the calibration happened to time dear is tried and learned
# (CostModel.plan_verify).  Planned at the timing itself, one draw too dear kept K = 1 from ever running
# on the 7B-shape CPU profile in 5 of 18 seeds (code 0.80x the best fixed K)
UNTRIED_Z = 1.0
# Prompt lookup's acceptance is learned per class of match length (the tokens of agreement behind a
# proposal, drafters.PromptLookupDrafter.last_match): on the builtin suite's Qwen trace a proposal
# behind a 1-token match was accepted for 0.3-0.9 tokens on average, behind 8 or more on edits and
# summaries for 8.5 of 16.  One window for all of them planned K = 1 for a copy and K = 16 for noise.
MATCH_CLASSES = (1, 2, 4, 8)


def match_class(match: int) -> int:
    """The class of a prompt-lookup match of ``match`` tokens (0: not known)."""
    return max((c for c in MATCH_CLASSES if c <= match), default=0)


# auto's refusal of the draft model rests on the load-time calibration; when the target's measured
# round costs move this far from it (another program loading the machine, or leaving it), auto re-plans
RECHECK_DRIFT = 0.25
P_MIN_LO, P_MIN_HI = 0.3, 0.9
# the most confidence a declined token's verify row may ask for before it is sent anyway (spare_rows)
SPARE_P_MAX = P_MIN_LO
# a probe of the draft model drafts the shortest K that pays within this share of the best K (at P_MIN_HI)
NEAR_BEST = 0.06  # auto's confidence stop stays in this range (below 0.3 a draft is a guess)
# auto plans with a drafter's acceptance over this many rail windows of rounds (settings.window_rounds).
# Over one window (16 rounds of K = 2 are 32 drafted tokens) a draft right 8 times in 10 was estimated at
# 0.60-0.85 by chance within one answer: the planned K swung between 2 and 5, each swing re-captured, and
# a low swing at an answer's start stopped drafting for the rest of it (simulated H100 profile, alpha 0.8:
# auto 1.02x plain where K = 3 gives 1.10x)
PLAN_WINDOWS = 3
# what a round of an earlier answer weighs in a drafter's acceptance estimate, and how far a drafter's
# run length returns toward its prior, per answer since (DraftController.start_answer)
ANSWER_MEMORY = 0.25
# the same for a drafter the forced modes' rails last stopped on this machine's costs (_guard_rails): the
# next answer's text may differ, the costs do not.  At 0.25 its first rounds of an answer drafted again on
# an estimate made of the prior (forced draft mode, simulated 7B-shape pair on two cores at alpha 0.8: 4 to
# 22 rounds of K = 1 in a 64-token answer); kept whole, a text the draft got right every time drafted 2
# rounds an answer for 4 answers before its rounds outweighed the old ones
COSTLY_MEMORY = 0.5
# a prompt the draft agrees with the target on this much less often than the last (engine/generate.py:
# prompt_agreement) is a harder text than the last: what the drafters' acceptance was in earlier answers is
# forgotten (DraftController.new_prompt)
PROMPT_SHIFT = 0.2
# a probe of a drafter with a confidence stop runs only where its expected gain over the rest of the answer
# repays what it costs when wrong (DraftController._probe_pays): how many of its last probes say how often
# one is right, and how many answers' lengths say how long the next is (a prior until one has ended)
PROBE_MEMORY = 8
ANSWER_LENGTHS, ANSWER_LEN_PRIOR = 8, 256
# the acceptance those probes found, pooled, fades by this much per answer (the next text may be another), and
# says a probe cannot pay once it holds this many tokens of evidence (DraftController._probes_could_pay)
PROBE_FADE, PROBE_EVIDENCE_MIN = 0.9, 3.0
# the chance that acceptance is above its estimate plus one standard deviation (auto's optimism, explore_z):
# what a try of a drafter the estimate refuses is weighed with (DraftController._try_k)
TRY_CHANCE = 0.16
# how many earlier answers say whether the drafters' acceptance is the same from answer to answer
# (answer_memory), and how many tokens of evidence an answer needs to count
SPREAD_ANSWERS, SPREAD_MIN_ANSWERS, SPREAD_MIN_TOKENS = 8, 4, 16
# the chi-square distribution's lower quartile by degrees of freedom (index): a sum of squares over it is
# a variance's 75% upper bound
CHI2_LOW = (0.0, 0.102, 0.575, 1.213, 1.923, 2.675, 3.455, 4.255, 5.071)


def answer_memory(answers: list[tuple[float, float]]) -> float | None:
    """What earlier answers' acceptance is worth for the next one, in tokens of evidence: the strength of
    the prior they make, read from how much their acceptance differed beyond chance (its spread between
    answers, tau).  None where fewer than SPREAD_MIN_ANSWERS answers drafted SPREAD_MIN_TOKENS tokens.

    ``answers`` are (accepted tokens, rejections) per answer.  A Beta prior of mean m and spread tau holds
    m (1 - m) / tau^2 - 1 tokens."""
    # each answer's acceptance with one token of each kind added: a draft right on every token of every
    # answer is remembered too (its spread and its m (1 - m) are not 0)
    seen = [((a + 1) / (a + r + 2), a + r) for a, r in answers if a + r >= SPREAD_MIN_TOKENS]
    if len(seen) < SPREAD_MIN_ANSWERS:
        return None
    n = sum(t for _, t in seen)
    m = sum(x * t for x, t in seen) / n
    df = len(seen) - 1
    # the spread's upper bound: a few answers alike by chance are no proof (three of them, a JSON answer's
    # 0.96, another's 0.97 and a summary's 0.88, made the creative answer after them draft on 0.93)
    between = sum((x - m) ** 2 for x, _ in seen) / CHI2_LOW[min(df, len(CHI2_LOW) - 1)]
    chance = sum(m * (1 - m) / t for _, t in seen) / len(seen)
    tau2 = max(between - chance, 1e-4)
    return max(m * (1 - m) / tau2 - 1, 0.0)


@dataclass(frozen=True, slots=True)
class AnswerPlan:
    """Which drafters one answer may use (in the order they offer), and the notes that say why one may not."""

    drafters: tuple[Drafter, ...]
    notes: tuple[Fallback, ...] = ()

    @property
    def use_model(self) -> bool:
        return Drafter.MODEL in self.drafters

    @property
    def use_lookup(self) -> bool:
        return Drafter.LOOKUP in self.drafters


@dataclass(frozen=True, slots=True)
class Plan:
    drafter: Drafter
    k: int
    fallback: bool = False  # plain because a guard rail tripped
    probe: bool = False  # an exploration round
    # where shapes are kept (engine/shapes.py): its verify rows are for this round only, the held size stays
    # (a probe's, and a round of a drafter whose runs end before llama.cpp would replay their size)
    one_off: bool = False
    p_min: float | None = None  # the draft model's confidence stop this round (None: the setting's)
    match: int = 0  # prompt lookup: the class of the match behind the proposal (match_class)
    # a draft model whose confidence stop ends its draft at position n still sends the token it stopped at
    # when the draft is at least spare_p[n] sure of it (none past the tuple): that token's argmax is already
    # computed, so it costs only its verify row, nothing where the held size pays for the row anyway
    # (spare_rows)
    spare_p: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafter", Drafter(self.drafter))  # "model" from a caller becomes the enum


def expected_tokens(a: float, k: int) -> float:
    """Expected tokens emitted by a round with draft length k at per-token acceptance a."""
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


_PER_DECODE = frozenset(name for name, kind in KINDS.items() if kind.per_decode)


def draft_decodes(drafter: str, k: int, a: float) -> float:
    """Expected draft-model decodes of a round drafting k tokens at per-token acceptance a.

    The draft decodes the target's bonus token (its logits give the first draft token) and the
    first k - 1 drafted tokens; after a round whose k drafts were all accepted (chance a^k) it also
    decodes the last of them, which it never saw.  Counting k alone under-charged long drafts and,
    with the cost learned per drafted token, over-charged short ones (a K = 1 round decodes 1-2
    tokens for one draft).  Other drafters cost per proposed token (``DrafterKind.per_decode``).
    """
    if drafter not in _PER_DECODE:
        return float(k)
    return k + a ** k


class CostModel:
    """Measured seconds for a target decode of n tokens, and a drafter's cost per token.

    A cost is a shape times a level.  The shape (``verify_s``, ``draft_s``) is what the load-time
    calibration timed, each size corrected by that size's own rounds as far as they show it misjudged;
    the level is how fast the machine runs now against it, learned from every steady round whatever its
    size (:meth:`observe_verify`).  A machine that
    slows down or speeds up (another program, a clock change) moves every size and the draft alike.

    Learning each measured size on its own, as this once did, mixed sizes timed lately with sizes only
    the calibration timed: on a 2-core CPU the 1-token rounds of plain decoding drifted 10% slower than
    the calibrated larger sizes, which made a draft right 9 times in 10 look worth 1.10x where it was
    worth 1.00x, and auto probed the draft model in 9 of 12 answers (7B-shape pair, alpha 0.6: 19 of 21
    probed tokens rejected, each probe 1-2% of its answer).
    """

    def __init__(self, verify_s: dict[int, float] | None = None, draft_s: dict[str, float] | None = None):
        self.verify_s: dict[int, float] = dict(verify_s or {})  # seconds at level 1 (the calibration's)
        self.draft_s: dict[str, float] = dict(draft_s or {})  # a drafter's seconds per token, at level 1
        # a drafter's fixed seconds per call on top of its cost per token: a trained drafter that drafts
        # a block in one pass (DFlash) costs about the same for 2 tokens as for 16.  Only the simulator
        # sets it (a profile's drafter costs, harness/simulate.py); the loop's drafters cost per token
        self.draft_call_s: dict[str, float] = {}
        self.level = 1.0  # how many times the shape's seconds the machine's rounds take now
        self.level_var = 0.0  # the variance of log(level) (0: the calibration's level is known)
        self.shape_var: dict[int, float] = {}  # per size, the variance of its log shape (SHAPE_VAR before rounds)
        self.overhead_s = 0.0
        # seconds one re-captured call adds where llama.cpp replays CUDA graphs (engine/shapes.py):
        # set by a calibration on such a backend, then learned from the rounds that change size
        self.recapture_s = 0.0
        # why these costs cannot be believed (engine/contention.py: the machine was busy while they
        # were timed, the curve falls, repeats disagree); "" when they can.  Decisions still use
        # them, but no figure ("best case 2.83x") is claimed from them.
        self.noise = ""

    @property
    def reliable(self) -> bool:
        return not self.noise

    def verify(self, n: int) -> float:
        """Cost of one target decode of n tokens now: the level times the shape, a linear fit between
        its sizes."""
        return self.level * self._shape(n)

    def plan_verify(self, n: int) -> float:
        """:meth:`verify` as auto plans with it: a size no steady round has measured yet (its shape still the
        calibration's one timing) less :data:`UNTRIED_Z` standard deviations of its shape.  Its first rounds
        pin it, and it is then planned at what it costs.  Claims, the forced modes' rails and learning read
        :meth:`verify`."""
        if n == ANCHOR or n in self.shape_var:
            return self.verify(n)
        return self.verify(n) * math.exp(-UNTRIED_Z * math.sqrt(SHAPE_VAR))

    def _shape(self, n: int) -> float:
        if n in self.verify_s:
            return self.verify_s[n]
        known = sorted(self.verify_s)
        if not known:
            return 1.0 * n  # no data: assume linear, which never favours speculation
        if len(known) == 1:
            return self.verify_s[known[0]] * n / known[0]
        lo = max((k for k in known if k < n), default=known[0])
        hi = min((k for k in known if k > n), default=known[-1])
        if lo == hi:
            lo, hi = known[-2], known[-1]
        slope = (self.verify_s[hi] - self.verify_s[lo]) / (hi - lo)
        return max(self.verify_s[lo] + slope * (n - lo), 1e-6)

    def draft_token(self, drafter: str) -> float:
        """A drafter's seconds per token now (0 for one never timed)."""
        return self.level * self.draft_s.get(drafter, 0.0)

    def draft_call(self, drafter: str) -> float:
        """A drafter's fixed seconds per call now (:attr:`draft_call_s`)."""
        return self.level * self.draft_call_s.get(drafter, 0.0)

    def observe_verify(self, n: int, seconds: float, *, fresh: bool = False) -> None:
        """Learn from a verify of n rows.  A ``fresh`` one ran at a size llama.cpp had not replayed
        yet: it paid a re-capture on top of the steady cost, so it teaches the re-capture (what it
        cost beyond the steady estimate), not the steady cost of n.  Mixing the two made sizes that
        are only met at changes look 1.5-2x dearer than they are (simulated H100 profile).

        A steady one's error (in log terms) is shared between the level and its size's shape by how
        uncertain each is (:data:`LEVEL_DRIFT`, :data:`SHAPE_VAR`, :data:`NOISE_VAR`; :data:`ANCHOR`'s
        shape stays the calibration's).  A size's first rounds correct what the calibration misjudged of
        it; once they have pinned it, a lasting change of speed seen at that size goes to the level of
        every size.  Moving the level first at a fixed weight and the shape after at a quarter of it gave
        80% of a size's error to every size: on the 7B-shape CPU profile a calibration that put a 2-token
        verify at 1.30x a token (1.51x in truth) still said 1.38x after 419 rounds of K = 1, and auto
        drafted K = 1 where K = 3 paid.  Learning the level from 1-token rounds alone fixed that and made a
        slowdown seen while drafting one size stick to that size for good."""
        if fresh:
            if self.verify_s:
                extra = max(seconds - self.verify(n), 0.0)
                self.recapture_s = (1 - EMA) * self.recapture_s + EMA * extra
            return
        if not seconds > 0:  # a clock that measured nothing (a fake backend) says nothing of speed
            return
        if not self.verify_s:
            self.verify_s[n] = seconds / self.level
            return
        if n not in self.verify_s:  # a size between the calibrated ones: its shape starts as the line's
            self.verify_s[n] = self._shape(n)
        self.level_var += LEVEL_DRIFT
        error = math.log(seconds / self.verify(n))
        # one token is what the level is measured against: its shape stays the calibration's
        shape_var = 0.0 if n == ANCHOR else self.shape_var.get(n, SHAPE_VAR)
        spread = self.level_var + shape_var + NOISE_VAR
        to_level, to_shape = self.level_var / spread, shape_var / spread
        self.level *= math.exp(to_level * error)
        self.level_var *= 1 - to_level
        if shape_var:
            self.verify_s[n] *= math.exp(to_shape * error)
            self.shape_var[n] = shape_var * (1 - to_shape)

    def observe_draft(self, drafter: str, seconds_per_token: float) -> None:
        own = seconds_per_token / self.level
        old = self.draft_s.get(drafter)
        self.draft_s[drafter] = own if old is None else (1 - EMA) * old + EMA * own

    def observe_overhead(self, seconds: float) -> None:
        self.overhead_s = (1 - EMA) * self.overhead_s + EMA * seconds

    def draft_cost(self, drafter: str, k: int, a: float) -> float:
        """Expected seconds a round drafting k tokens spends drafting (0 without a draft)."""
        if k <= 0:
            return 0.0
        return draft_decodes(drafter, k, a) * self.draft_token(drafter) + self.draft_call(drafter)

    def catch_up_cost(self, drafter: str, behind: int) -> float:
        """Seconds a draft model spends, where shapes are kept (engine/shapes.py), catching up on the
        ``behind`` tokens it has not seen before it can draft: one token at a time up to
        ``CATCH_UP_ONE_BY_ONE``, else one batch (the target's curve scaled to the draft's cost per token)
        that re-captures, with the two 1-token steps after it.  On the H100 profile a catch-up after a
        stretch of plain rounds cost 1.5-3 plain tokens, more than most tries of the draft won back."""
        per = self.draft_token(drafter)
        if behind <= 0 or not per or drafter not in _PER_DECODE:
            return 0.0
        if behind <= CATCH_UP_ONE_BY_ONE:
            return behind * per
        return per * self.verify(behind + 1) / self.verify(1) + (CALLS_PER_CHANGE + 1) * self.recapture_s

    def rate(self, drafter: str, k: int, a: float, *, optimistic: bool = False) -> float:
        """Expected tokens per second of a round (``optimistic``: on :meth:`plan_verify`)."""
        verify = self.plan_verify if optimistic else self.verify
        cost = verify(k + 1) + self.overhead_s + self.draft_cost(drafter, k, a)
        return expected_tokens(a, k) / cost

    def best_k(self, drafter: str, a: float, k_lo: int, k_hi: int, *, optimistic: bool = False) -> tuple[int, float]:
        best = (k_lo, self.rate(drafter, k_lo, a, optimistic=optimistic))
        for k in range(k_lo + 1, k_hi + 1):
            r = self.rate(drafter, k, a, optimistic=optimistic)
            if r > best[1]:
                best = (k, r)
        return best


class AcceptanceWindow:
    """Per-drafter acceptance over the last rounds that had a draft.

    Planning reads a weighted estimate: a round drafted in an earlier answer counts for less
    (:meth:`age`, at every answer's start), because acceptance belongs to the text being written,
    not to the pair.  Without it a draft model that lost on a chat answer was refused on the JSON
    answer after it, where it was right 9 tokens in 10 (builtin trace on the H100 profile: auto
    0.94x plain on json, K = 6 1.32x): auto had stopped drafting, so nothing ever refreshed the
    window.  The guard rails read the plain counts.
    """

    def __init__(self, rounds: int) -> None:
        self.rounds: deque[Counts] = deque(maxlen=rounds)  # one round's counts each
        self.weights: deque[float] = deque(maxlen=rounds)  # what each round weighs in the estimate
        self.here = 0  # how many of the newest rounds are this answer's (age starts a new answer)
        self.prior = (0.0, 0.0)  # (accepted, rejections) that earlier answers add beyond the rounds kept

    def add(self, counts: Counts) -> None:
        self.rounds.append(counts)
        self.weights.append(1.0)
        self.here = min(self.here + 1, len(self.rounds))

    def age(self, factor: float, keep: int) -> None:
        """A new answer starts: keep only the newest ``keep`` rounds, each weighing ``factor`` times what
        it weighed.  The planning window is longer than the rails' (:data:`PLAN_WINDOWS`) to steady the
        estimate within an answer; what it carries into the next answer stays what the rails' window
        carried.  Kept whole, 48 rounds of an edit drafted right 9 times in 10 weighed a quarter each for
        the whole of the short chat answer after it (simulated H100 chat 0.949x -> 0.936x plain)."""
        while len(self.rounds) > keep:
            self.rounds.popleft()
            self.weights.popleft()
        for i in range(len(self.weights)):
            self.weights[i] *= factor
        self.here = 0
        self.prior = (0.0, 0.0)

    def last(self, rounds: int) -> AcceptanceWindow:
        """The newest ``rounds`` of this window, as a window of their own (what the guard rails judge)."""
        w = AcceptanceWindow(rounds)
        w.rounds.extend(self.rounds)
        w.weights.extend(self.weights)
        w.here = min(self.here, len(w.rounds))
        return w

    def totals(self) -> Counts:
        return Counts.total(self.rounds)

    def token_acceptance(self) -> float | None:
        return self.totals().token_acceptance

    def sequence_acceptance(self) -> float | None:
        return self.totals().sequence_acceptance

    def _evidence(self, declines: bool = False, *, here: bool = False) -> tuple[float, float]:
        """Weighted (accepted tokens, rejections); with ``declines``, a round that drafted nothing at all
        (a confidence stop declined it: DraftController._learn_declined) counts as a rejection; with
        ``here``, this answer's rounds alone."""
        acc, rej = (0.0, 0.0) if here else self.prior
        first = len(self.rounds) - self.here if here else 0
        for i, (c, w) in enumerate(zip(self.rounds, self.weights, strict=True)):
            if i < first:
                continue
            acc += w * c.accepted
            rej += w * ((c.rounds if declines else c.rounds_with_draft) - c.rounds_fully_accepted)
        return acc, rej

    def evidence(self, *, here: bool = False) -> tuple[float, float]:
        """Weighted (accepted tokens, rejections), with the prior earlier answers add (``here``: this
        answer's rounds alone)."""
        return self._evidence(here=here)

    def accepted_here(self) -> bool:
        """Whether a token this answer drafted was accepted."""
        return any(c.accepted for c in list(self.rounds)[len(self.rounds) - self.here:])

    def per_token_rate(self, prior: float = 0.5, weight: float = 2.0, *, declines: bool = False,
                       here: bool = False) -> float:
        """Estimate of the chance that the next drafted token is accepted (``here``: from this answer's
        rounds alone).

        Rounds stop at the first rejection, so accepted / (accepted + rejections)
        is the right estimate; a weak prior (uniform: 0.5 with the weight of two
        tokens) keeps it sane with little data.
        """
        acc, rej = self._evidence(declines, here=here)
        return (acc + prior * weight) / (acc + rej + weight)

    def stop_rate(self, z: float = 0.0) -> float:
        """For a drafter with a confidence stop: the chance that it stops at a position it was asked to
        draft (its next token under the stop), from the rounds that asked it, weighted as acceptance is;
        less ``z`` standard deviations of it, as :meth:`optimistic_rate` adds them to the acceptance.

        A round asked for K that drafted L < K tokens stopped once and went on L times (a round that
        declined at once: L = 0); one that drafted K went on K times."""
        stops = goes = 0.0
        for c, w in zip(self.rounds, self.weights, strict=True):
            stops += w * (c.drafted == 0 or c.drafted < c.k_sum)  # one round's counts each (add)
            goes += w * c.drafted
        q = stops / (stops + goes + 2.0)  # a prior of two positions that went on
        return max(0.0, q - z * math.sqrt(q * (1.0 - q) / (stops + goes + 2.0)))

    def optimistic_rate(self, z: float, *, declines: bool = False) -> float:
        """The estimate plus ``z`` standard deviations of it: what ``auto`` plans with.

        With little evidence the bonus is large, so a drafter gets rounds enough to show
        what it is worth (a pessimistic estimate never did: after one fully accepted K=1
        round it said 33% and stopped, and replays on the 3090 profile stayed at plain
        speed where K=8 made 2x); as the window fills it shrinks to a few points.
        """
        acc, rej = self._evidence(declines)
        a = self.per_token_rate(declines=declines)
        return min(1.0, a + z * math.sqrt(a * (1.0 - a) / (acc + rej + 2)))

    def full(self) -> bool:
        return len(self.rounds) == self.rounds.maxlen

    def clear(self) -> None:
        self.rounds.clear()
        self.weights.clear()
        self.here = 0
        self.prior = (0.0, 0.0)


class DraftController:
    """Chooses the drafter and K for each round and applies the guard rails.

    One controller lives as long as a loaded pair, so what it learned about the
    machine (costs) carries over from answer to answer; acceptance is windowed.
    """

    def __init__(self, settings: ControllerSettings, costs: CostModel) -> None:
        self.settings = settings
        self.costs = costs
        # each drafter's acceptance over the last PLAN_WINDOWS x window_rounds rounds, what auto plans with;
        # the guard rails judge the newest window_rounds of it (AcceptanceWindow.last)
        self.windows = {name: AcceptanceWindow(PLAN_WINDOWS * settings.window_rounds) for name in KINDS}
        # prompt lookup's acceptance per match class, what planning reads where the match is known
        # (windows[LOOKUP] pools every class: the rails and a proposal whose match is not known read it);
        # the drafter whose registry line says match_classes (one such drafter)
        self.lookup_windows = {c: AcceptanceWindow(settings.window_rounds) for c in MATCH_CLASSES}
        self._cooldown: dict[Drafter, int] = {}  # drafter -> plain tokens left
        # drafters whose last rail trip was judged on costs timed on a quiet machine, so that no K pays for
        # their acceptance here (_guard_rails): their windows outlive the cooldown and fade slower across
        # answers (COSTLY_MEMORY)
        self._costly: set[Drafter] = set()
        self._since_probe: dict[Drafter, int] = dict.fromkeys(KINDS, 0)
        # rounds a drafter drafts in a row (EMA over its runs; the run going on): what a change of
        # verify size is shared by.  Starts at its registry line's stay_prior, so a drafter is not refused
        # before it ran
        self._stay: dict[Drafter, float] = {name: kind.stay_prior for name, kind in KINDS.items()}
        self._run: dict[Drafter, int] = dict.fromkeys(KINDS, 0)
        # the same run counted from this answer's start: what may go on without auto's margin (plan)
        self._run_here: dict[Drafter, int] = dict.fromkeys(KINDS, 0)
        # tokens emitted since each drafter last drafted: what a draft model catches up on before it drafts
        self._behind: dict[Drafter, int] = dict.fromkeys(KINDS, 0)
        self.answer = Counts()  # this answer's rounds, for the fallback-share warning
        self._warned = False
        # drafters not planned yet in this answer: each may be probed once early in it, as acceptance
        # is the text's (a draft model refused after a chat was right 9 tokens in 10 on the JSON after it)
        self._untried: set[Drafter] = set()
        # the share of each probe's tokens the target accepted, its last PROBE_MEMORY probes (_probe_pays)
        self._probes: dict[Drafter, deque[float]] = {name: deque(maxlen=PROBE_MEMORY) for name in KINDS}
        # the same probes' (accepted tokens, rejections), faded per answer since (_probes_could_pay)
        self._probe_evidence: dict[Drafter, deque[tuple[float, float]]] = {
            name: deque(maxlen=PROBE_MEMORY) for name in KINDS}
        self._lengths: deque[int] = deque(maxlen=ANSWER_LENGTHS)  # tokens of the last answers
        self._emitted = 0  # tokens this answer's rounds emitted
        # the load-time calibration, kept to see the measured costs drift from it (RECHECK_DRIFT)
        self.calibration = CostModel(costs.verify_s, costs.draft_s)
        self.calibration.draft_call_s = dict(costs.draft_call_s)
        self.calibration.level = costs.level
        self.calibration.noise = costs.noise
        self._drift: deque[float] = deque(maxlen=settings.window_rounds)  # measured / calibrated verify cost
        self._refused = False  # auto refused the draft model (answer_plan) and has not re-planned it in
        self._checked_drift = 1.0  # the drift the last plan rests on
        self._agreement: float | None = None  # the last prompt's agreement (new_prompt)
        # each drafter's (accepted, rejections) in the last answers it drafted in (answer_memory)
        self._answers: dict[Drafter, deque[tuple[float, float]]] = {
            name: deque(maxlen=SPREAD_ANSWERS) for name in KINDS}
        self._steady: dict[Drafter, bool] = dict.fromkeys(KINDS, False)
        self._here: dict[Drafter, tuple[float, float]] = dict.fromkeys(KINDS, (0.0, 0.0))  # this answer's

    # -- planning ---------------------------------------------------------------

    def k_max(self, drafter: Drafter) -> int:
        """The longest draft this drafter may make (its registry line says which setting)."""
        kind = KINDS.get(drafter)
        return kind.k_max(self.settings) if kind is not None else self.settings.k_max

    def viable(self, drafter: Drafter) -> bool:
        """Could this drafter beat plain decoding here even if every token were accepted?"""
        plain = self.costs.rate(Drafter.NONE, 0, 0.0)
        _, best = self.costs.best_k(drafter, 1.0, 1, self.k_max(drafter))
        return best > plain * self.settings.min_gain

    def best_case_multiplier(self, drafter: Drafter) -> float:
        plain = self.costs.rate(Drafter.NONE, 0, 0.0)
        _, best = self.costs.best_k(drafter, 1.0, 1, self.k_max(drafter))
        return best / plain

    def _window(self, drafter: Drafter, match: int) -> AcceptanceWindow:
        """The acceptance a plan for this drafter reads: prompt lookup's of its match class."""
        c = match_class(match) if KINDS[drafter].match_classes else 0
        return self.lookup_windows[c] if c else self.windows[drafter]

    def answer_plan(self, mode: Mode, *, has_model: bool, blocked: str = "") -> AnswerPlan:
        """Decide, once per answer, which drafters may run in it (the engine and the simulator both ask).

        The mode's drafters come from ``specchat.modes.MODES``; one that needs a draft model runs
        only with ``has_model``.  ``blocked`` is why speculation cannot run at all with this pair
        ("" when it can).
        """
        usable = tuple(d for d in MODE_DRAFTERS[mode] if has_model or not KINDS[d].needs_model)
        if blocked and mode is not Mode.BASELINE:
            return AnswerPlan((), (Fallback(f"speculation off: {blocked}", permanent=True,
                                            brief=f"speculation off: {blocked}"),))
        if mode is Mode.DRAFT and not has_model:
            return AnswerPlan(usable, (Fallback("no draft model loaded: plain decoding", permanent=True,
                                                brief="no draft model loaded"),))
        if mode is Mode.AUTO and Drafter.MODEL in usable and not self._refused:
            # a refusal stands until a re-check (_recheck) lifts it: costs measured at a few sizes against
            # calibrated ones at the others would let noise flip it answer by answer
            self._refused = not self.viable(Drafter.MODEL)
        if mode is Mode.AUTO and Drafter.MODEL in usable and self._refused:
            k = self.settings.k_max + 1
            best = self.best_case_multiplier(Drafter.MODEL)
            others = tuple(d for d in usable if d is not Drafter.MODEL)
            if not self.costs.reliable:  # no figure from timings the machine's contention made up
                return AnswerPlan(others, (Fallback(
                    f"auto: the draft model was not used: its costs were timed on a busy machine "
                    f"({self.costs.noise}), so no best case is claimed; auto re-checks it from the "
                    "rounds it measures",
                    permanent=True,
                    brief="draft model not used: costs timed on a busy machine, no best case claimed",
                ),))
            return AnswerPlan(others, (Fallback(
                "auto: the draft model cannot pay on this machine (best case "
                f"{best:.2f}x plain even if every token were accepted: "
                f"a draft token costs {self.costs.draft_token(Drafter.MODEL) * 1e3:.1f} ms, "
                f"verifying {k} tokens {self.costs.verify(k) * 1e3:.0f} ms "
                f"vs {self.costs.verify(1) * 1e3:.1f} ms for one)",
                permanent=True,
                brief=f"the draft model cannot pay here, best case {best:.2f}x",
            ),))
        return AnswerPlan(usable)

    def retune(self, settings: ControllerSettings) -> None:
        """Take ``settings``' live fields (thresholds, k_min, p_min, auto's margins) from the next
        round on; what the pair was loaded with (:data:`~.settings.LOAD_FIELDS`) and everything
        learned so far (acceptance windows, costs, run lengths) stay."""
        self.settings = self.settings.with_live(settings)

    def draft_p_min(self, k: int) -> float:
        """``auto``'s confidence stop for a draft of up to k tokens, from this machine's costs.

        A drafted token is worth its place when the draft's confidence that it is right is
        above its share of the round's extra cost, measured in plain tokens: (one draft
        decode + its part of the larger verify) / (one plain round).  On the 3090 profile
        that is about 0.35 (cheap verify: draft long, as llama.cpp's published 0.4 does); on
        this project's 2-core CPU it is 1.0 and the clamp keeps only near-certain tokens.
        """
        c = self.costs
        extra = (c.draft_token(Drafter.MODEL) + c.draft_call(Drafter.MODEL) / max(k, 1)
                 + (c.verify(k + 1) - c.verify(1)) / max(k, 1))
        share = extra / (c.verify(1) + c.overhead_s)
        return min(max(share, P_MIN_LO), P_MIN_HI)

    def plan(self, mode: Mode, available: dict[Drafter, int], lookup_match: int = 0, *,
             held: int = 0, change_s: float = 0.0) -> Plan:
        """Pick the next round.  ``available`` maps a usable drafter to its K ceiling; ``lookup_match``
        is the length of the match behind prompt lookup's proposal (0: not known).

        Where batch shapes matter (CUDA graphs), ``held`` is the verify size the target replays now
        and ``change_s`` what a change of it costs (engine/shapes.py): a draft that fits the held
        size pays for the whole of it, one that needs more pays a change there and one back, shared
        by the rounds this drafter usually drafts in a row.  Without it,
        lookup drafted a token or two at every weak match and re-captured at every other round
        (simulated H100: 37 re-captures in 113 rounds of a code answer, 0.77x plain)."""
        s = self.settings
        if mode is Mode.BASELINE or not available:
            return Plan(Drafter.NONE, 0)
        match = match_class(lookup_match)
        if mode is Mode.DRAFT:
            name = Drafter.MODEL
            if name not in available:
                return Plan(Drafter.NONE, 0)
            if self._cooldown.get(name, 0) > 0:
                return Plan(Drafter.NONE, 0, fallback=True)
            a = self.windows[name].per_token_rate()
            k_hi = min(s.k_max, available[name])
            k, rate = self.costs.best_k(name, a, min(s.k_min, k_hi), k_hi)
            # the setting's stop, as it is now (retune)
            return Plan(name, k, p_min=s.p_min, spare_p=self.spare_rows(k, rate, held, change_s))
        allowed = MODE_DRAFTERS[mode]
        if mode is not Mode.AUTO and any(self._cooldown.get(d, 0) > 0 for d in allowed if d in available):
            return Plan(Drafter.NONE, 0, fallback=True)
        # auto: every usable drafter and K = 0 compete on expected speed.  lookup mode (any mode of
        # its own drafters but auto) is the same race with prompt lookup alone and no margin: a
        # proposal behind a match of a class measured not to pay is not drafted, as a draft model's
        # confidence stop declines a token it is unsure of.
        gain = s.min_gain if mode is Mode.AUTO else min(s.min_gain, 1.0)  # 0: lookup drafts every proposal
        best = Plan(Drafter.NONE, 0)
        plain = self.costs.rate(Drafter.NONE, 0, 0.0)
        best_rate = best_score = plain * gain
        probe: Plan | None = None
        for key, ceiling in available.items():
            name = Drafter(key)
            if name not in allowed:
                continue
            kind = KINDS[name]
            k_hi = min(self.k_max(name), ceiling)
            if k_hi < 1 or not self.viable(name):
                continue
            if self._cooldown.get(name, 0) > 0:
                continue
            window = self._window(name, match)
            # optimism buys evidence with tries.  In auto, prompt lookup plans on its estimate alone: its
            # proposals are checked for free whether drafted or not (Rounds._check_unasked, observe_unasked),
            # and tries of its weak matches lost 6% of the simulated H100 creative answers (0.94x plain;
            # without them 0.96x).  lookup mode, asked for prompt lookup, still tries it (_boldness)
            z = 0.0 if mode is Mode.AUTO and kind.match_classes else s.explore_z * self._boldness(name, k_hi)
            # auto's draft model stops where it is unsure (Plan.p_min).  Where shapes are kept (change_s), a
            # round that stops short still pays the held rows, so a decline is priced as a rejection; elsewhere
            # it costs one draft decode, and how often the draft stops says how far it drafts (_best_k)
            stopping = kind.confidence_stop and not change_s
            a = window.optimistic_rate(z, declines=bool(change_s))
            stop, stop_mean = (window.stop_rate(z), window.stop_rate()) if stopping else (0.0, 0.0)
            k_lo = min(s.k_min, k_hi) if mode is not Mode.AUTO else 1
            # auto tries a size the calibration may have timed dear (plan_verify) where it is optimistic about
            # acceptance too: prompt lookup, planned on its estimate alone, drafts no size on a guess
            opt = mode is Mode.AUTO and z > 0
            k, rate = self._best_k(name, a, k_lo, k_hi, held, change_s, stop, optimistic=opt)
            # what the race reads: whether a run starts.  Where a change of K costs nothing and this answer's
            # rounds have had a token accepted, that is the best K at the optimistic estimate, while the K the
            # run drafts beats plain there.  Weighed at the K it drafts, a right probe on the 7B-shape CPU
            # profile was left there for the rest of its answer, as K = 1 (the estimate's) paid 1.03x at the
            # optimism where K = 4 paid 1.09x (36 seeds: code 0.974x -> 0.993x the best fixed K, alpha 0.9
            # 0.965x -> 0.972x).  Without a right token here, the best K's promise is only an earlier answer's
            # memory fading: a draft that was always wrong was tried again every third answer.  Where a change
            # re-captures, the try is weighed at the K it drafts (simulated H100 json 0.974x -> 0.965x otherwise)
            score = rate
            if mode is Mode.AUTO:
                # optimism decides whether to try a drafter, the estimate how far: a K planned on the
                # optimistic rate made each try of a drafter auto knew little of a long, dear one (and,
                # where shapes matter, a change of verify size), which is what lost on chat and prose
                a_mean = window.per_token_rate(declines=bool(change_s))
                if not change_s and not self._steady[name]:
                    # how far follows this answer's own rounds where they say its text is easier than the
                    # answers before did: a JSON answer after a chat drafted K = 2, 3, 3, 3, 3, 4 on the chat's
                    # memory while its rounds were all accepted (simulated RTX 3090 8B, json 0.96x the best
                    # fixed K; 0.995x).  Not where a change of K re-captures: a K planned on a few lucky
                    # rounds moved the held size (simulated H100, alpha 0.8: 0.955x -> 0.947x).  Nor where the
                    # answers before were alike (_carry_over): their memory is this text's, and the larger of
                    # two estimates is the luckier one
                    a_mean = max(a_mean, window.per_token_rate(here=True))
                k_mean, _ = self._best_k(name, a_mean, k_lo, k_hi, held, change_s, stop_mean, optimistic=opt)
                if k_mean < k:
                    k_opt = k
                    k, rate = k_mean, self._best_k(name, a, k_mean, k_mean, held, change_s, stop, optimistic=opt)[1]
                    if change_s or rate <= plain or not window.accepted_here():
                        score = rate
                    if (score <= best_score and self._run_here[name] <= CALLS_PER_CHANGE
                            and self._probes_could_pay(name, k_hi)):
                        # the estimate's K is the least bad of sizes that all lose where no size pays at the
                        # estimate: on the H100 profile K = 1, which pays 1.04x at best.  A try is sized as
                        # _try_k says, where the answer has tokens enough left to repay it
                        tried = self._try_k(name, a, a_mean, k_mean + 1, k_opt, held, change_s, stop, stop_mean,
                                            optimistic=opt, bar=best_score)
                        if tried is not None:
                            k, rate = tried
                            score = rate
            # auto's margin (min_gain) is for starting a run.  A run that has drafted in this answer until the
            # backend replays its size goes on while its planned rate beats plain at all: stopping it left a
            # drafter that pays 1.10x plain (simulated H100, agreement pair at 0.8) plain for the rest of 42%
            # of its answers, after a stretch of rejections took the estimate under the margin, as plain
            # rounds bring no evidence to take it back (auto 0.93x the best fixed K; going on: 0.955x)
            going_on = mode is Mode.AUTO and self._run_here[name] > CALLS_PER_CHANGE and rate > plain
            if score > best_score or (going_on and best.drafter is Drafter.NONE):
                best, best_rate, best_score = Plan(name, k, p_min=self.draft_p_min(k) if kind.confidence_stop
                                                   else None, match=match if kind.match_classes else 0), rate, score
            elif (not (mode is Mode.AUTO and kind.match_classes)  # auto learns lookup for free: no probe
                  and (self._since_probe[name] >= self._probe_interval(name) or name in self._untried)
                  and self._best_k(name, 1.0, 1, k_hi, held, change_s)[1] > best_score
                  and (not kind.confidence_stop or self._probe_pays(name, k_hi, held, change_s))):
                # a probe only where this proposal could pay if it were right (a change of verify
                # size included): a probe that cannot pay even then teaches nothing worth its cost
                # a drafter with a confidence stop probes as far as it is near-sure (its own confidence
                # is evidence of the text: a 1-token probe of the draft model taught one token, and a
                # JSON answer after a chat stayed plain, simulated H100 0.78x of K = 6), up to the K that
                # would pay were it right that often (a 2-core CPU's 9-token verify costs 6 tokens);
                # others one token
                sure = kind.confidence_stop
                pk = self._shortest_near_best(name, P_MIN_HI, k_hi, held, change_s) if sure else 1
                probe = Plan(name, pk, probe=True, one_off=True, p_min=P_MIN_HI if sure else None,
                             match=match if kind.match_classes else 0)
        if best.drafter is Drafter.NONE and probe is not None:
            return probe
        if best.drafter in KINDS and KINDS[best.drafter].confidence_stop:
            best = replace(best, spare_p=self.spare_rows(best.k, best_rate, held, change_s))
        if change_s and best.drafter is not Drafter.NONE and self._stay[best.drafter] < CALLS_PER_CHANGE + 1:
            # a run that ends before llama.cpp replays its size (the third call of it) gains nothing from a
            # larger held size: it only padded the plain rounds after it until the waste paid for a change
            # back, and made the next try of a drafter look free (simulated H100 chat: a try of prompt
            # lookup at a weak match cost 4 plain tokens, 0.88x plain over the answer)
            return replace(best, one_off=True)
        return best

    def spare_rows(self, k: int, rate: float, held: int, change_s: float) -> tuple[float, ...]:
        """Per position n < k, how sure the draft must be of the token its confidence stop declined there for
        that token to be sent anyway (:attr:`Plan.spare_p`).

        The token's argmax is computed already; sent, it costs its verify row and, if right, the draft
        decode that catches the draft up on it.  It is worth it where the draft's confidence (a fair
        estimate of the chance it is right: on the builtin trace tokens at 0.5-0.6 were right 67% of the
        time, at 0.3-0.4 48%) times what a token is worth at the plan's ``rate`` beats the row.  Where
        shapes are kept a row inside the held size is paid anyway (0), and one past it would change the
        size (not sent).  A row that needs the draft more than :data:`SPARE_P_MAX` sure is not sent: on
        the 7B-shape CPU profile, where a row costs a third of a token or more, sending at that break-even
        lost JSON 1.27x -> 1.25x plain (18 seeds), where the RTX 4090's near-free rows took creative
        1.39x -> 1.54x."""
        if change_s:
            return (0.0,) * max(min(held - 1, k), 0)
        worth = 1.0 / rate - self.costs.draft_token(Drafter.MODEL) if rate > 0 else 0.0
        if worth <= 0:
            return ()
        v = self.costs.verify
        need = (max((v(n + 2) - v(n + 1)) / worth, 0.0) for n in range(k))
        return tuple(p if p <= SPARE_P_MAX else 1.0 for p in need)  # 1.0: a token the stop declined never is

    def _probe_pays(self, drafter: Drafter, k_hi: int, held: int, change_s: float) -> bool:
        """Whether a probe of a drafter with a confidence stop is worth its cost: the chance it is right
        times what drafting at :data:`P_MIN_HI` saves over the tokens this answer likely has left, against
        the chance it is wrong times what a rejected probe costs beyond a plain round.

        Where a fully right draft pays little (a 2-core CPU's 7B-shape pair: K = 3 at 1.2x, at 9 in 10
        no gain), a probe once an answer cost more than any answer could win back: four near-sure
        probes of 2-4 tokens, every one rejected, cost 6% of 64-token answers (0.94x plain).  The chance
        is the accepted share of its last probes (one right in two before any), so a draft whose
        near-sure tokens keep failing is asked less often where it could win little, and still asked
        where it could win much (a GPU's chat, then JSON)."""
        plain = self.costs.rate(Drafter.NONE, 0, 0.0)
        # a text it is right on is drafted round after round: at the steady cost, its changes of size shared
        good = self.costs.best_k(drafter, P_MIN_HI, 1, k_hi)[1]
        if good <= plain:
            return False
        if not self._probes_could_pay(drafter, k_hi):
            return False
        pk = self._shortest_near_best(drafter, P_MIN_HI, k_hi, held, change_s)
        wrong = 1.0 / self._best_k(drafter, 0.0, pk, pk, held, change_s)[1] - 1.0 / plain
        seen = self._probes[drafter]
        right = (sum(seen) + 1.0) / (len(seen) + 2.0)
        return right * self._left() * (1.0 / plain - 1.0 / good) > (1.0 - right) * max(wrong, 0.0)

    def _probes_could_pay(self, drafter: Drafter, k_hi: int) -> bool:
        """Whether the acceptance a drafter's last probes found, pooled (faded by :data:`PROBE_FADE` per answer
        since), could pay at some K up to ``k_hi`` at its estimate plus one standard deviation; True while they
        hold under :data:`PROBE_EVIDENCE_MIN` tokens of evidence.

        :meth:`_probe_pays` weighs a probe by how often one is right, as if a right one meant a text drafted
        at 9 in 10.  A pair right 6 times in 10 is right on a probe's first token as often, but no run of
        it pays: probed at every answer's start, at 2-3 plain tokens' cost each on the H100 profile, it lost
        1% of every answer (simulated, alpha 0.6, 18 seeds: 0.991x plain; refused where its probes say it
        cannot pay, 0.994x; with the tries of :meth:`_try_k`, 0.989x without this and 0.991x with it).  The
        fading probes it again once a few answers have passed, as their text may be another."""
        seen = self._probe_evidence[drafter]
        accepted, rejected = sum(a for a, _ in seen), sum(r for _, r in seen)
        if accepted + rejected < PROBE_EVIDENCE_MIN:
            return True
        n = accepted + rejected + 2.0  # one token of each kind added, the uniform prior
        m = (accepted + 1.0) / n
        a = min(1.0, m + math.sqrt(m * (1.0 - m) / (n + 1.0)))
        return self.costs.best_k(drafter, a, 1, k_hi)[1] > self.costs.rate(Drafter.NONE, 0, 0.0)

    def _left(self) -> float:
        """Tokens this answer likely has left: the last answers' mean length less what it emitted; an answer
        that ran past the usual length is taken to have half of it left (it can't be known)."""
        expected = sum(self._lengths) / len(self._lengths) if self._lengths else ANSWER_LEN_PRIOR
        return max(expected - self._emitted, expected / 2)

    def _try_k(self, drafter: Drafter, a: float, a_mean: float, k_lo: int, k_hi: int, held: int, change_s: float,
               stop: float, stop_mean: float, *, optimistic: bool, bar: float) -> tuple[int, float] | None:
        """A try of a drafter that no K pays for at its acceptance estimate ``a_mean`` and some K does at the
        optimistic ``a``: (K, its rate at ``a``), or None where no try repays itself.

        Of the sizes from ``k_lo`` to ``k_hi`` whose optimistic rate beats ``bar``, the one that loses least if
        the estimate is right, where what it wins if the optimism is right (:data:`TRY_CHANCE`) over the tokens
        the answer has left outweighs what it loses if not over the rounds a try runs before the backend
        replays its size.  Sized at the estimate's K (the least bad of sizes that all lose: K = 1 on the H100
        profile, which pays 1.04x at best), no try could pay: a probe right on 3 tokens of 4 left a draft right
        8 times in 10 plain for the rest of its answer.  Simulated H100, 18 seeds: alpha 0.9 0.969x -> 0.972x
        the best fixed K, JSON 0.973x -> 0.982x, code 1.351x -> 1.357x plain; the chat, after answers of about
        128 tokens, pays for a try after a lucky probe (0.998x -> 0.993x plain)."""
        plain = self.costs.rate(Drafter.NONE, 0, 0.0)
        left = self._left()
        best: tuple[float, int, float] | None = None
        for k in range(k_lo, k_hi + 1):
            up = self._best_k(drafter, a, k, k, held, change_s, stop, optimistic=optimistic)[1]
            if up <= bar:
                continue
            mean = self._best_k(drafter, a_mean, k, k, held, change_s, stop_mean, optimistic=optimistic)[1]
            win = TRY_CHANCE * (up / plain - 1.0) * left
            rounds = CALLS_PER_CHANGE + 1
            lose = (1.0 - TRY_CHANCE) * max(1.0 - mean / plain, 0.0) * rounds * expected_tokens(a_mean, k)
            if win > lose and (best is None or mean > best[0]):
                best = (mean, k, up)
        return (best[1], best[2]) if best is not None else None

    def _shortest_near_best(self, drafter: Drafter, a: float, k_hi: int, held: int, change_s: float) -> int:
        """The shortest K whose rate at acceptance ``a`` is within :data:`NEAR_BEST` of the best one's.

        Where the rate is nearly flat in K (a 2-core CPU at 9 in 10: every token drafted costs about
        what it brings), the best K is whichever the noise in the measured costs favours: on the
        7B-shape pair a probe drafted 6-8 tokens in some answers and 2 in others, and a wrong 8-token
        probe costs 6 target tokens where a 2-token one costs 2."""
        rates = [self._best_k(drafter, a, k, k, held, change_s)[1] for k in range(1, k_hi + 1)]
        top = max(rates)
        return next(k for k, r in enumerate(rates, start=1) if r >= (1 - NEAR_BEST) * top)

    def _best_k(self, drafter: Drafter, a: float, k_lo: int, k_hi: int, held: int,
                change_s: float, stop: float = 0.0, *, optimistic: bool = False) -> tuple[int, float]:
        """``CostModel.best_k`` where the verify size held by the backend changes what a K costs (and a
        draft model's catch-up re-captures: ``CostModel.catch_up_cost``), and where a confidence stop
        ends drafts early.

        ``stop`` is the chance that such a drafter stops at each position it is asked to draft
        (:meth:`AcceptanceWindow.stop_rate`): asked for K, it drafts L < K tokens with chance
        (1 - stop)^L x stop and K with (1 - stop)^K, and a round of L tokens brings and costs what a
        draft of L does (L = 0: a plain round and one draft decode).  Counting a round it declined as a
        rejection made a draft right 9 times in 10 when it drafted look right 6 in 10 (simulated 7B-shape
        CPU, code: plain for 20-30 rounds at a time between K = 1 rounds that were all accepted)."""
        if not change_s and not stop:
            return self.costs.best_k(drafter, a, k_lo, k_hi, optimistic=optimistic)
        c = self.costs
        verify = c.plan_verify if optimistic else c.verify
        # the catch-up is paid by the first round of a run: shared, as a change of size is, by the rounds
        # this drafter usually drafts in a row.  Not charged where shapes do not matter: there a catch-up
        # is a cheap batch, and the charge, growing with every plain round, shut the draft model out
        # (simulated RTX 3090 8B creative: 0.93x -> 0.86x the best fixed K)
        catch_up = c.catch_up_cost(drafter, self._behind[drafter]) / self._stay[drafter] if change_s else 0.0
        stay = self._stay[drafter]
        if stay < CALLS_PER_CHANGE + 1:  # its rounds get rows for themselves (Plan.one_off): nothing shares
            stay = 1.0
        per = c.draft_token(drafter)
        call = c.draft_call(drafter)

        def round_of(n: int) -> tuple[float, float]:
            """(tokens, seconds) of a round that drafts n tokens."""
            cost = c.overhead_s + catch_up + (draft_decodes(drafter, n, a) * per + call if n or stop else 0.0)
            # a larger size costs a change there and one back, shared by the rounds this drafter
            # usually drafts in a row (a draft model: many; prompt lookup: as long as a copy lasts).
            # A smaller one costs the held size, or the size itself once the held size shrinks to it
            # (the padding until then and the change, at most two changes' worth: shapes.VerifyShape),
            # whichever is less: priced at the held size alone, a draft of held - 1 looked free and
            # kept the held size where it was (simulated H100, alpha 0.8: K = 5 at 6 rows, where K = 3
            # at 4 pays 1.10x plain)
            if not change_s:
                cost += verify(n + 1)
            elif n + 1 > held:
                cost += verify(n + 1) + 2 * change_s / stay
            elif n + 1 < held:
                cost += min(verify(held), verify(n + 1) + 2 * change_s / stay)
            else:
                cost += verify(held)
            return expected_tokens(a, n), cost

        lengths = [round_of(n) for n in range(k_hi + 1)] if stop else []
        best = (k_lo, 0.0)
        for k in range(k_lo, k_hi + 1):
            if stop:
                # drafted n < k with chance (1 - stop)^n stop, k with (1 - stop)^k
                tokens = seconds = 0.0
                for n in range(k + 1):
                    p = (1 - stop) ** n * (stop if n < k else 1.0)
                    tokens += p * lengths[n][0]
                    seconds += p * lengths[n][1]
            else:
                tokens, seconds = round_of(k)
            r = tokens / seconds
            if r > best[1]:
                best = (k, r)
        return best

    def _boldness(self, drafter: Drafter, k_hi: int) -> float:
        """How much of ``auto``'s optimism a drafter's plan gets: what a fully accepted round at its best K
        (up to ``k_hi``) wins over plain, against what a fully rejected one loses, at most 1.

        Optimism pays for itself where a try can win more than it can lose.  On a 2-core CPU a 3-row
        verify costs 2.3 plain rounds: prompt lookup's 2-token proposal behind a weak match wins 29%
        when right and loses 57% when wrong, and tries at the optimistic estimate lost 1-4% on the
        1.5B pair's chat, code and json (simulated, 9 seeds; 0.96x -> 0.99x on json).  A drafter with a
        confidence stop (the draft model) keeps the whole: a draft it is unsure of stops itself, so a
        wrong one rarely costs the whole verify, and its tries are what find it pays (the 7B-shape CPU
        profile's code fell 0.93x -> 0.89x the best K with the same rule).
        """
        if KINDS[drafter].confidence_stop:
            return 1.0
        c = self.costs
        plain = c.rate(Drafter.NONE, 0, 0.0)
        k, best = c.best_k(drafter, 1.0, 1, k_hi)
        win = best / plain - 1.0
        lose = 1.0 - c.rate(drafter, k, 0.0) / plain
        return min(1.0, max(win, 0.0) / lose) if lose > 0 else 1.0

    def _pays(self, drafter: Drafter, window: AcceptanceWindow) -> bool:
        """Could this drafter, at its window's per-token acceptance, beat plain decoding at some K?
        (The estimate plus its standard deviation, as ``auto`` plans: 16 rounds of a drafter that
        pays 1.1x often estimate below break-even by chance.)"""
        plain = self.costs.rate(Drafter.NONE, 0, 0.0)
        a = window.optimistic_rate(self.settings.explore_z)
        _, best = self.costs.best_k(drafter, a, 1, self.k_max(drafter))
        return best > plain

    def _probe_interval(self, drafter: Drafter) -> int:
        """Tokens between exploration rounds of a drafter auto is not using.

        A probe of the draft model first catches the draft up on every token it
        missed, so it is only worth it where the best case is a clear win (its registry
        line: every 4 x the interval, where the best case is 1.2x plain or more).
        """
        kind = KINDS[drafter]
        interval = self.settings.probe_interval_tokens * kind.probe_scale
        if kind.probe_min_gain and self.best_case_multiplier(drafter) < kind.probe_min_gain:
            return 1 << 30
        return interval

    # -- learning ---------------------------------------------------------------

    def observe(self, mode: Mode, plan: Plan, r: RoundStats) -> list[Fallback]:
        """Learn from a finished round, one lesson at a time; return the fallback events it caused.

        The order matters: the costs before the drift re-check reads them, a cooldown that ends
        clears its windows before this round enters them, the rails after the window has it."""
        counts = r.counts  # built once: at GPU token times each Counts costs a few µs of a 5 ms round
        self.answer += counts
        self._learn_costs(r)
        events = self._learn_drift(mode, r)
        self._learn_probes(plan, r.emitted)
        self._learn_stay(plan, r)
        self._cool_down(r.emitted)
        self._learn_declined(mode, plan, r)
        if r.drafted and plan.drafter in self.windows:
            self._learn_draft(plan, r, counts)
            events += self._guard_rails(mode, plan.drafter)
        events += self._fallback_warning()
        return events

    def _learn_costs(self, r: RoundStats) -> None:
        """The target's verify at the round's batch size (the padded one) and the loop's overhead."""
        self.costs.observe_verify(r.verify_rows, r.verify_s, fresh=r.verify_fresh)
        self.costs.observe_overhead(r.overhead_s)

    def _learn_drift(self, mode: Mode, r: RoundStats) -> list[Fallback]:
        """How far a steady round's verify cost is from the load-time calibration; ``auto`` re-checks a
        refused draft model on it (:meth:`_recheck`)."""
        if r.verify_fresh or not self.calibration.verify_s or not r.verify_s > 0:
            return []
        self._drift.append(r.verify_s / self.calibration.verify(r.verify_rows))
        return self._recheck() if mode is Mode.AUTO and self._refused else []

    def _learn_probes(self, plan: Plan, emitted: int) -> None:
        """Tokens since each drafter last ran (when ``auto`` probes it again, what it catches up on), and
        which are still untried."""
        self._untried.discard(plan.drafter)
        self._emitted += emitted
        for name in self._behind:
            self._behind[name] = 0 if name == plan.drafter else self._behind[name] + emitted
        for name in self._since_probe:
            self._since_probe[name] = 0 if name == plan.drafter else self._since_probe[name] + emitted

    def _learn_stay(self, plan: Plan, r: RoundStats) -> None:
        """How many rounds each drafter drafts in a row (what a change of verify size is shared by):
        a run goes on while it drafts, and enters the average when it ends."""
        for name in self._run:
            if name == plan.drafter and r.drafted:
                self._run[name] += 1
                self._run_here[name] += 1
                continue
            self._run_here[name] = 0
            if self._run[name]:
                self._stay[name] = (1 - EMA) * self._stay[name] + EMA * self._run[name]
                self._run[name] = 0

    def _cool_down(self, emitted: int) -> None:
        """Cooldowns count down by the tokens emitted."""
        for name in list(self._cooldown):
            self._cooldown[name] -= emitted
            if self._cooldown[name] <= 0:
                self._end_cooldown(name)

    def _windows_of(self, name: Drafter) -> list[AcceptanceWindow]:
        """A drafter's acceptance windows: its own and, for prompt lookup, its match classes'."""
        return [self.windows[name], *(self.lookup_windows.values() if KINDS[name].match_classes else ())]

    def _end_cooldown(self, name: Drafter) -> None:
        """A drafter's cooldown is over.  One judged on the thresholds alone (costs timed on a busy machine)
        starts its windows afresh: the text may have changed.  One judged on costs timed on a quiet machine
        (``_costly``: whichever share its reason names, no K paid on them) keeps them: the costs have not
        changed, and a window started afresh drafted a full window of rounds that could not pay before the
        rail could judge again (forced draft mode, the 7B-shape pair on two cores: 16 rounds of K = 1 in
        every answer, 0.90x-0.96x llama-server's ngram-mod at alpha 0.6-0.8); each round after it is judged
        with them."""
        del self._cooldown[name]
        if name not in self._costly:
            for w in self._windows_of(name):
                w.clear()

    def _learn_declined(self, mode: Mode, plan: Plan, r: RoundStats) -> None:
        """In ``auto``, a draft that was asked and declined (its first token was under the confidence
        stop) enters the window as a round that stopped at once (:meth:`AcceptanceWindow.stop_rate`): it
        paid a draft decode and got nothing.  Without it, a draft that always declined left the window
        empty and auto's estimate optimistic for ever.  A probe's stop is not auto's (``P_MIN_HI``), so
        a probe that declined teaches nothing."""
        declines = plan.drafter in KINDS and KINDS[plan.drafter].confidence_stop
        if mode is Mode.AUTO and declines and plan.k and not r.drafted and not plan.probe:
            self.windows[plan.drafter].add(Counts.of_round(plan.k, 0, 0))

    def observe_unasked(self, drafter: Drafter, match: int, proposed: int, agreed: int) -> None:
        """A proposal of ``proposed`` tokens made and not drafted (in a plain round, or another drafter's),
        of which the target then committed the first ``agreed``: what its verify would have accepted.

        Prompt lookup's proposal is made to be offered, so this evidence is free; it enters the acceptance
        of its match class, which planning reads, as the round it would have been, and not the rails'
        window, which judges drafted rounds.  Without it a class that never drafted kept its prior: on a
        repeat of a question, a copy of the answer before was drafted 1 to 26 tokens of 32 (a 135M target
        on two cores), as the few tries the prior allowed happened to land."""
        c = match_class(match) if KINDS[drafter].match_classes else 0
        if c:
            self.lookup_windows[c].add(Counts.of_round(proposed, proposed, agreed))

    def _learn_draft(self, plan: Plan, r: RoundStats, counts: Counts) -> None:
        """A drafted round: the drafter's cost per token and its acceptance windows."""
        if r.catch_up <= 1:  # catching up on many tokens is prefill work, not the cost of drafting
            # a draft model's cost is per decoded token (what a calibration measures); a
            # proposal-only drafter's per proposed token
            per = r.draft_decoded if KINDS[plan.drafter].per_decode and r.draft_decoded else r.drafted
            call = self.costs.draft_call(plan.drafter)  # fixed per call: what is left is per token
            self.costs.observe_draft(plan.drafter, max(r.draft_s - call, 0.0) / per)
        if plan.probe and KINDS[plan.drafter].confidence_stop:
            # a probe stops at P_MIN_HI, not where auto's drafts stop: its acceptance counts, not its stop
            counts = replace(counts, k_sum=counts.drafted)
            self._probes[plan.drafter].append(r.accepted / r.drafted)
            self._probe_evidence[plan.drafter].append((float(r.accepted), float(r.accepted < r.drafted)))
        self.windows[plan.drafter].add(counts)
        acc, rej = self._here[plan.drafter]
        self._here[plan.drafter] = (acc + counts.accepted,
                                    rej + counts.rounds_with_draft - counts.rounds_fully_accepted)
        if KINDS[plan.drafter].match_classes and plan.match:
            self.lookup_windows[match_class(plan.match)].add(counts)

    def _guard_rails(self, mode: Mode, drafter: Drafter) -> list[Fallback]:
        """The forced modes' rails: a drafter whose window cannot pay at any K cools down (plain
        decoding for a while), saying why: its token or sequence acceptance under its threshold, or,
        where it is right often enough, this machine's costs (when they were timed on a quiet machine).

        They are for the forced modes, which have no cost model to stop them.  auto's own test (the
        drafter's expected rate against plain, every round) already stops a drafter that cannot pay;
        the rails on top cut it off at 40-50% acceptance where a draft of one still paid 1.2-1.5x
        (replays of the builtin trace on the published GPU profiles: auto 5-15% slower on chat and
        prose with them).  Both shares fall as K grows even where every token is likely: at 90% per
        token, 8 drafted tokens are all accepted 43% of the time and 64% of them on average, and K = 8
        still beats plain.  So a rail trips only where the measured per-token acceptance cannot pay at
        any K (simulated H100 agreement pairs at 0.9: forced draft mode spent a third of its rounds
        cooling down, 1.05x; with this test 1.14x).

        The window is judged once half of it is in: the test is on its optimistic estimate, whose deviation
        weighs how few rounds that is.  Waiting for a full window drafted 16 rounds of K = 1 at alpha 0.6 on
        the 7B-shape pair on two cores, where no K could pay: 0.87x plain over that 64-token answer."""
        s = self.settings
        if mode is Mode.AUTO or not s.cooldown_tokens:  # no cooldown: no rails (fixed K)
            return []
        w = self.windows[drafter].last(s.window_rounds)
        if len(w.rounds) < s.window_rounds // 2:
            return []
        if self._pays(drafter, w):
            self._costly.discard(drafter)
            return []
        ta, sa = w.token_acceptance(), w.sequence_acceptance()
        if ta is not None and ta < s.min_token_acceptance:
            reason = f"token acceptance {ta:.0%} < {s.min_token_acceptance:.0%}"
        elif sa is not None and sa < s.min_sequence_acceptance:
            reason = f"sequence acceptance {sa:.0%} < {s.min_sequence_acceptance:.0%}"
        elif self.costs.reliable:
            # right often enough by the thresholds, but this machine's verify is too dear for that: the
            # 7B-shape pair on two cores at alpha 0.9 (a draft right 9 times in 10) ran forced draft mode
            # at 0.97x plain, below llama-server's ngram-mod (1.03x), where no K could pay (0.93x at best)
            a = w.optimistic_rate(s.explore_z)
            k, best = self.costs.best_k(drafter, a, 1, self.k_max(drafter))
            plain = self.costs.rate(Drafter.NONE, 0, 0.0)
            reason = (f"at {a:.0%} per token it cannot pay on this machine (best {best / plain:.2f}x plain, "
                      f"K = {k})")
        else:  # costs timed on a busy machine say nothing the thresholds have not
            return []
        self._cooldown[drafter] = s.cooldown_tokens
        if self.costs.reliable:  # no K pays on these costs (_pays), whichever share the reason names
            self._costly.add(drafter)
        return [Fallback(f"{drafter} drafter: {reason} over the last {len(w.rounds)} rounds; "
                         f"plain decoding for {s.cooldown_tokens} tokens")]

    def _fallback_warning(self) -> list[Fallback]:
        """Once an answer, after two windows of rounds: a warning when too many of them fell back."""
        s = self.settings
        share = self.answer.fallback_share or 0.0
        if self._warned or self.answer.rounds < 2 * s.window_rounds or share <= s.fallback_warning_share:
            return []
        self._warned = True
        return [Fallback(  # dated: the share goes on changing after this (the window tracks it)
            f"after {self.answer.rounds} rounds, {share:.0%} of them fell back to plain decoding "
            f"(> {s.fallback_warning_share:.0%}): try a shorter draft, another draft model, "
            "or turn speculation off for this chat",
            warning=True,
        )]

    def _recheck(self) -> list[Fallback]:
        """``auto`` refused the draft model from costs that no longer hold: re-plan with the measured ones.

        The drift is the median, over a window of steady rounds, of each round's verify cost over
        the calibration's for its size.  Past :data:`RECHECK_DRIFT` from the one the plan rests
        on, the plan is made again on the costs as they are now: the cost model's level has moved
        every size and the draft model's cost per token (it has not run) alike, while the overhead
        is what was measured, so a machine that got faster or slower can change the verdict.
        Whatever the verdict, it says so; a draft model that can pay now runs from the next answer
        (``answer_plan``)."""
        if len(self._drift) < (self._drift.maxlen or 1):
            return []
        drift = sorted(self._drift)[len(self._drift) // 2]
        if abs(drift / self._checked_drift - 1.0) <= RECHECK_DRIFT:
            return []
        self._checked_drift = drift
        c = self.costs
        best = self.best_case_multiplier(Drafter.MODEL)
        self._refused = not self.viable(Drafter.MODEL)
        verdict = "still cannot pay" if self._refused else "can pay now: auto may use it from the next answer"
        if not c.reliable:  # the sizes not measured since are still the busy calibration's
            return [Fallback(
                f"auto re-checked the draft model: the target's rounds cost {drift:.2f}x the load-time "
                f"calibration, which was timed on a busy machine ({c.noise}): it {verdict} (no best case claimed)",
                brief=f"{RECHECKED}{drift:.2f}x the calibrated costs (timed on a busy machine)",
            )]
        return [Fallback(
            f"auto re-checked the draft model: the target's rounds cost {drift:.2f}x the load-time calibration "
            f"(median of the last {len(self._drift)} rounds); with the measured costs (the draft's taken to "
            f"drift alike) its best case is {best:.2f}x plain: it {verdict}",
            brief=f"{RECHECKED}{drift:.2f}x the calibrated costs, draft model best case {best:.2f}x",
        )]

    def new_prompt(self, agreement: float) -> None:
        """``auto`` measured this answer's prompt: how often the draft's greedy choice was the target's over its
        last positions (engine/generate.py: prompt_agreement).  Where that fell more than :data:`PROMPT_SHIFT`
        below the last prompt's, this is a harder text for the draft, and the drafters' acceptance in earlier
        answers (which :meth:`start_answer` kept at :data:`ANSWER_MEMORY`) is forgotten: it would only be
        optimistic here.

        That memory is what lets a pair whose draft is right 8 times in 10 draft through a bad start (the
        same text answer after answer), and what made the first chat after three code edits draft on the
        edits' acceptance: 5-35 tokens in one-off rounds that each re-captured a CUDA graph (simulated H100,
        chat 0.975x plain over 18 seeds; with the chat prompt's agreement at 0.44 after the edit's 0.88,
        forgotten: 0.998x).  Only a fall counts: a text that reads easier gets tried anyway (auto probes a
        draft model once early in every answer), and forgetting a code answer's acceptance for the next code
        prompt, which read 0.15 higher, cost that answer 6% on the H100 (a fresh start re-learns its K one
        re-capture at a time).  The agreement is measured only where auto runs and decodes replay CUDA graphs
        (engine/generate.py: PROMPT_ROWS)."""
        last, self._agreement = self._agreement, agreement
        if last is not None and last - agreement > PROMPT_SHIFT:
            for w in (*self.windows.values(), *self.lookup_windows.values()):
                w.clear()
            for seen in self._answers.values():
                seen.clear()
            self._steady = dict.fromkeys(KINDS, False)

    def _carry_over(self, name: Drafter, w: AcceptanceWindow, memory: float) -> bool:
        """What a draft model's acceptance in earlier answers weighs in the next one's estimate; whether
        they were alike enough to weigh more than ``memory`` (:data:`ANSWER_MEMORY`).

        Where the last answers' acceptance differed no more than chance says it would (:func:`answer_memory`),
        the pair writes one kind of text: its rounds are kept whole, and the answers' acceptance counts as
        far as that spread says it is worth.  At a quarter of 16 rounds, a draft right 8 times in 10 on
        every answer drafted a round or two of an answer, was rejected once, and stayed plain for the
        rest of it (simulated H100 and 7B-shape CPU profiles at alpha 0.8: 30 and 38 of 144 answers).
        Answers that differ (the builtin trace's code, chat and JSON) keep the quarter."""
        strength = answer_memory(list(self._answers[name])) if KINDS[name].needs_model else None
        total = sum(w.evidence())
        if strength is None or not total or strength <= memory * total:
            w.age(memory, self.settings.window_rounds)
            return False
        w.age(min(1.0, strength / total), w.rounds.maxlen or 0)
        seen = self._answers[name]
        accepted, tokens = sum(a for a, _ in seen), sum(a + r for a, r in seen)
        extra = min(strength, tokens) - sum(w.evidence())  # what the answers say beyond the rounds kept
        if extra > 0:
            share = accepted / tokens
            w.prior = (share * extra, (1 - share) * extra)
        return True

    @property
    def prompt_agreement(self) -> float | None:
        """The last prompt's agreement auto measured (:meth:`new_prompt`); None before the first."""
        return self._agreement

    def start_answer(self) -> None:
        """Counters for the fallback-share warning and the rails' cooldowns are per answer; what the
        drafters' acceptance was in earlier answers weighs :data:`ANSWER_MEMORY` as much from now on
        (AcceptanceWindow.age)."""
        self.answer = Counts()
        self._warned = False
        if self._emitted:
            self._lengths.append(self._emitted)
        self._emitted = 0
        self._untried = {name for name, kind in KINDS.items() if kind.needs_model}
        self._run_here = dict.fromkeys(KINDS, 0)
        self._behind = dict.fromkeys(KINDS, 0)  # a drafter that runs in this answer prefills its prompt
        # a cooldown ends with its answer: the rails judged that text, and the next is another.  Carried
        # over, it kept Regenerate of an answer that fell back from drafting the copy prompt lookup held
        # (lookup mode on two busy cores: 0 of 48 tokens drafted, where the copy drafts 36-42)
        for name in list(self._cooldown):
            self._end_cooldown(name)
        costly = {id(w) for name in self._costly for w in self._windows_of(name)}
        for name, w in self.windows.items():
            if sum(self._here[name]):
                self._answers[name].append(self._here[name])
            self._here[name] = (0.0, 0.0)
            self._steady[name] = self._carry_over(name, w, COSTLY_MEMORY if id(w) in costly else ANSWER_MEMORY)
        for seen in self._probe_evidence.values():
            faded = [(a * PROBE_FADE, r * PROBE_FADE) for a, r in seen]
            seen.clear()
            seen.extend(faded)
        for w in self.lookup_windows.values():
            w.age(COSTLY_MEMORY if id(w) in costly else ANSWER_MEMORY, self.settings.window_rounds)
        # each drafter's run length (_stay) carries over as learned from whole runs: pulling it back to
        # the prior at every answer let lookup, which drafts a round or two at a time, pay a change of
        # verify size and back for one round every answer (simulated H100 chat and creative)
