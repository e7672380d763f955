"""Drafters propose the next tokens; the target verifies them in one batch.

``ModelDrafter``: a small model with the same tokenizer, greedy, its KV cache
kept across rounds (only the tokens it has not seen are decoded), stopping
early when its top probability drops below ``p_min``.

``PromptLookupDrafter``: n-gram matches in the prompt and the answer so far
(the proposals of llama-cpp-python's ``LlamaPromptLookupDecoding``, from an
incremental index); no second model, no cost worth mentioning, and very good
on code edits and quoted text.

Each comes with its simulator side (``ModelReplay``, ``LookupReplay``) and a line in
:data:`DRAFTERS`, the registry the pair, the loop, the simulator and the controller read
(protocol and entry: :mod:`.drafting`).  A new drafter is one file with its class, its replay
and its :class:`~.drafting.DrafterKind`, plus one line in :data:`DRAFTERS` (and its name in
``specchat/modes.py``).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence

from .drafting import (
    Drafted,
    DrafterKind,
    LiveDrafter,
    Offer,
    PlanView,
    ReplayContext,
    Replayed,
    kinds_by_name,
)
from .runtime import LoadedModel
from .sampling import greedy_choice, greedy_choices, last_choices
from .settings import ControllerSettings, Drafter
from .shapes import CATCH_UP_ONE_BY_ONE

MATCH_CAP = 32  # prompt lookup measures a match's length up to this many tokens
# Prompt lookup also copies from the contexts of the answers before this one (llama.cpp's ngram-mod keeps
# such a pool across requests): Regenerate, a prompt asked again, an answer that quotes another chat's.
PAST_ANSWERS = 8  # at most this many earlier contexts
PAST_TOKENS = 16_384  # and this many tokens of them in all (the newest is kept whatever its length)


class ModelDrafter:
    name = Drafter.MODEL
    cheap_prefill = False

    def __init__(self, model: LoadedModel, target_n_vocab: int, p_min: float) -> None:
        self.model = model
        self.target_n_vocab = target_n_vocab
        self.p_min = p_min
        self.last_seconds = 0.0  # time spent in the last propose()
        self.last_catch_up = 0  # tokens the draft had to catch up on in the last propose()
        self.last_decoded = 0  # tokens the draft decoded in the last propose() (catch-up and drafting)
        self.last_spare = 0  # 1 where the last propose() ended with the token its stop declined (Plan.spare_p)

    def prefill(self, context: list[int], rows: int = 0) -> tuple[int, ...]:
        """Put ``context`` into the draft's KV cache, reusing what is there; return the draft's greedy choice
        after each of the last ``rows`` tokens it decoded (at most ``rows``: a position its cache held is
        not decoded again)."""
        m = self.model
        keep = m.keep_prefix(context)
        rows = min(rows, len(context) - keep, m.n_outputs) if rows > 0 else 0
        m.decode(context[keep:], logits=rows if rows else "none")
        return last_choices(m, rows, self.target_n_vocab)

    def propose(self, context: list[int], k: int, p_min: float | None = None,
                spare_p: tuple[float, ...] = ()) -> list[int]:
        """Up to ``k`` tokens following ``context`` (all committed tokens, the last one included),
        stopping before a token the draft is less sure of than ``p_min`` (None: the drafter's own), or
        after it where the draft is at least ``spare_p[n]`` sure of it at its position n (Plan.spare_p)."""
        floor = self.p_min if p_min is None else p_min
        t0 = time.perf_counter()
        self.last_spare = 0
        m = self.model
        # decode what the draft has not seen (at least the last token, for its logits)
        keep = min(m.keep_prefix(context), len(context) - 1)
        m.trim(keep)
        self.last_catch_up = len(context) - keep - 1
        todo = context[keep:]
        decoded = len(todo)
        if m.shape_sensitive and 1 < len(todo) <= CATCH_UP_ONE_BY_ONE:
            # every draft decode a 1-token decode: a batch between the steps re-captures (shapes.py)
            for tok in todo[:-1]:
                m.decode([tok], logits="none")
            todo = todo[-1:]
        m.decode(todo, logits="last")
        out: list[int] = []
        while True:
            n = len(out)
            spare_at = spare_p[n] if n < min(len(spare_p), k) else None
            if spare_at is None:
                tok, confident = greedy_choice(m.logits(-1), floor)
                sure_enough = False
            else:
                tok, (confident, sure_enough) = greedy_choices(m.logits(-1), (floor, spare_at))
            if tok >= self.target_n_vocab:
                break
            if not confident:
                if sure_enough:
                    out.append(tok)  # not decoded: nothing drafts after it
                    self.last_spare = 1
                break
            out.append(tok)
            if len(out) >= k or len(m.tokens) + 1 >= m.n_ctx:
                break
            m.decode([tok], logits="last")
            decoded += 1
        self.last_seconds = time.perf_counter() - t0
        self.last_decoded = decoded
        return out

    # -- as a LiveDrafter (drafting.py) ------------------------------------------------------

    def start(self) -> None:
        """Nothing per answer: its cache follows the context (``propose`` keeps what matches)."""

    def forget(self) -> None:
        """Nothing to forget: what it drafts comes from the draft model, not from earlier answers."""

    def offer(self, history: list[int], k_cap: int, settings: ControllerSettings) -> Offer:
        """Up to ``k_max`` tokens, drafted only if chosen (what it would draft costs decodes)."""
        return Offer(min(k_cap, settings.k_max))

    def draft(self, history: list[int], plan: PlanView) -> Drafted:
        tokens = self.propose(history, plan.k, plan.p_min, plan.spare_p)
        return Drafted(tokens, self.last_seconds, self.last_catch_up, self.last_decoded, self.last_spare)


class ModelReplay:
    """The draft model in the simulator: what :class:`ModelDrafter` decodes, charged on the profile.

    One decode of the tokens it has not seen (``1 + catch_up``, charged as a batch of that size on
    the profile's verify shape, or one 1-token decode each where shapes are kept) and one
    single-token decode per further drafted token; the last drafted token is decoded only when a
    ``p_min`` stop ended the draft.  The draft's cache follows the answer, so a drafter resumed
    after plain rounds pays its catch-up, as in the engine.

    A profile with a trained drafter's costs (``head_draft_s``: MTP, EAGLE-3, DFlash) charges the same
    passes at the head's fixed cost per call plus its cost per pass, with no catch-up (a head reads the
    target's own states), and a DFlash block caps the draft (``draft_block``).
    """

    def __init__(self, ctx: ReplayContext) -> None:
        self.ctx = ctx
        self.rows = ctx.trace.draft_p10 if ctx.p_top10 else ctx.trace.draft_p
        self.valid = ctx.trace.prompt_tokens  # prompt + answer tokens the draft's cache holds (after its prefill)

    def offer(self, i: int, k_cap: int) -> Offer:
        k = min(k_cap, self.ctx.settings.k_max)
        block = self.ctx.profile.draft_block
        return Offer(min(k, block) if block else k)

    def draft(self, i: int, plan: PlanView) -> Replayed:
        ctx = self.ctx
        pt, profile, clock = ctx.trace, ctx.profile, ctx.clock
        history = pt.prompt_tokens + i + 1
        catch_up = history - min(self.valid, history - 1) - 1
        row = self.rows[i]
        p_stop = (ctx.settings.p_min if plan.p_min is None else plan.p_min) * 1000
        n = 0
        while n < plan.k and n < len(row) and row[n] >= p_stop:
            n += 1
        decoded = n - 1 if n == plan.k else n  # drafted tokens the draft decoded (the last one is not, at K)
        # the token it stopped at, where its row is worth it (Plan.spare_p); llama.cpp's draft-simple sends only
        # its draft
        spare = int(not ctx.p_top10 and n < min(plan.k, len(row), len(plan.spare_p))
                    and row[n] >= plan.spare_p[n] * 1000)
        n += spare
        head = profile.head_draft_s(decoded + 1)
        if head is not None:  # a trained drafter: it reads the target's own states, so it has nothing to catch up
            drafted = n if n >= max(ctx.n_min, 1) else 0
            return Replayed(drafted, min(pt.draft_match[i], drafted), (clock(head),), 0, decoded + 1,
                            spare if drafted else 0)
        seconds: tuple[float, ...]
        if ctx.shaped and 0 < catch_up < CATCH_UP_ONE_BY_ONE:  # one 1-token decode each
            seconds = (sum(clock(profile.draft_s) for _ in range(catch_up + 1)),)
        else:
            seconds = (clock(profile.draft_s * profile.verify_s(1 + catch_up) / profile.token_s),)
            if profile.recapture_s and catch_up:  # the batch, and the two 1-token steps after it
                seconds += (clock(3 * profile.recapture_s),)
        seconds += (sum(clock(profile.draft_s) for _ in range(decoded)),)
        drafted = n if n >= max(ctx.n_min, 1) else 0
        accepted = min(pt.draft_match[i], drafted)
        self.valid = history + min(pt.draft_match[i], decoded, accepted + 1)
        return Replayed(drafted, accepted, seconds, catch_up, catch_up + 1 + decoded, spare if drafted else 0)


class PromptLookupDrafter:
    """Prompt lookup: the tokens that followed the earliest earlier occurrence of the longest
    n-gram (``max_ngram`` down to 1) the context ends with.

    The same proposals as llama-cpp-python's ``LlamaPromptLookupDecoding``, which scans the
    whole history with numpy on every round: 0.2 ms a round at 600 tokens on the proxy
    (scripts/measure_overhead.py), growing with the context.  Here an index of every n-gram's
    first position is brought up to date with the tokens added since the last round, and a
    round costs ``max_ngram`` dict look-ups.  The index holds ``max_ngram`` entries per token
    of the answer's context, and is dropped by :meth:`reset` at the start of every answer.
    Measured on this project's 2-core CPU (random tokens, 4,096 of context, 1-4 added a round):
    4 us a round (median; 16 us at the 95th percentile); indexing the 4,096-token prompt takes
    14 ms, which :meth:`index` lets the engine do while the target's prefill runs.

    :attr:`last_match` is how many tokens the context's tail agrees with the place the proposal
    is copied from (up to :data:`MATCH_CAP`): the evidence that this is a copy.  On the builtin
    suite's Qwen trace, proposals behind a 1-token match were accepted for 0.3-0.9 tokens on
    average, behind 8 or more on an edit or a summary for 8.5 of 16.

    It remembers: :meth:`start` keeps the finished answer's context and its index (no copy, no
    re-indexing) among the last :data:`PAST_ANSWERS` (:data:`PAST_TOKENS` in all), and a round
    whose tail matches an earlier context by a longer n-gram than the current one copies from there.
    On this project's CPU, llama.cpp's ngram-mod drafted a repeated prompt's answer whole from such a
    memory (2.5x on the repeat, docs/benchmarks.md); the trace's lookup columns stay per answer.
    """

    name = Drafter.LOOKUP
    cheap_prefill = True  # indexing the prompt is host work (14 ms at 4k tokens on a CPU)

    def __init__(self, max_ngram: int, k_max: int) -> None:
        self.max_ngram = max(1, max_ngram)
        self.k_max = k_max
        self.last_seconds = 0.0
        self.last_match = 0  # tokens of agreement behind the last proposal (0: none)
        self._proposal: list[int] = []  # the last offer's tokens
        self._tokens: list[int] = []
        self._first: list[dict[tuple[int, ...], int]] = []  # [n - 1]: n-gram -> where it first starts
        self._past: collections.deque[tuple[list[int], list[dict[tuple[int, ...], int]]]] = collections.deque()
        self.reset()

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        t0 = time.perf_counter()
        self._extend(context)
        out = self._match(min(k, self.k_max))
        self.last_seconds = time.perf_counter() - t0
        return out

    def index(self, context: Sequence[int]) -> None:
        """Bring the index up to ``context`` without proposing (the prompt, during its prefill)."""
        self._extend(context)

    def reset(self) -> None:
        """Forget the history; call at the start of every answer."""
        self._tokens = []
        self._first = [{} for _ in range(self.max_ngram)]
        self.last_match = 0

    def _extend(self, context: Sequence[int]) -> None:
        """Index the n-grams ending in the tokens ``context`` adds to the history seen so far.

        Within an answer the context only grows; one that is shorter, or that does not continue
        the history at its last token, starts the index over.
        """
        toks = self._tokens
        seen = len(toks)
        if len(context) < seen or (seen and context[seen - 1] != toks[-1]):
            self.reset()
            toks, seen = self._tokens, 0
        toks.extend(context[seen:])
        first = self._first
        for end in range(seen + 1, len(toks) + 1):
            for n in range(1, min(self.max_ngram, end) + 1):
                first[n - 1].setdefault(tuple(toks[end - n : end]), end - n)

    def remember(self) -> None:
        """Keep the context seen so far (a finished answer's prompt and answer) for the answers after it."""
        if len(self._tokens) > 1:
            self._past.appendleft((self._tokens, self._first))  # reset() starts new lists: these stay as they are
            total = sum(len(t) for t, _ in self._past)
            while len(self._past) > 1 and (len(self._past) > PAST_ANSWERS or total > PAST_TOKENS):
                total -= len(self._past.pop()[0])

    def _match(self, k: int) -> list[int]:
        toks = self._tokens
        size = len(toks)
        self.last_match = 0
        found = 0, toks, 0  # n, the tokens copied from, where the n-gram starts there
        for n in range(min(self.max_ngram, size - 1), 0, -1):
            at = self._first[n - 1].get(tuple(toks[size - n :]))
            # the earliest occurrence; when that is the context's own tail, there is no other
            if at is not None and at + n < size:
                found = n, toks, at
                break
        for past, first in self._past:  # an earlier answer's context, where it matches by a longer n-gram
            for n in range(min(self.max_ngram, size), found[0], -1):
                at = first[n - 1].get(tuple(toks[size - n :]))
                if at is not None and at + n < len(past):
                    found = n, past, at
                    break
        n, source, at = found
        if not n:
            return []
        agree = n  # how far back the two places agree: at most MATCH_CAP comparisons
        while agree < MATCH_CAP and at - (agree - n) > 0 and agree < size and \
                source[at + n - agree - 1] == toks[size - agree - 1]:
            agree += 1
        self.last_match = agree
        return source[at + n : at + n + k]

    # -- as a LiveDrafter (drafting.py) ------------------------------------------------------

    def start(self) -> None:
        self.remember()
        self.reset()

    def forget(self) -> None:
        """Drop every context it has seen (what Regenerate copies from), the last answer's too: :meth:`start`
        would remember that one."""
        self._past.clear()
        self.reset()

    def prefill(self, prompt: list[int], rows: int = 0) -> tuple[int, ...]:
        self.index(prompt)
        return ()

    def offer(self, history: list[int], k_cap: int, settings: ControllerSettings) -> Offer:
        """Its proposal, made now (a few us): its length is the ceiling, its match the evidence."""
        proposal = self._proposal = self.propose(history, min(k_cap, settings.lookup_k_max))
        if not proposal:
            return Offer(0, 0, self.last_seconds)
        return Offer(len(proposal), self.last_match, self.last_seconds, tuple(proposal))

    def draft(self, history: list[int], plan: PlanView) -> Drafted:
        return Drafted(self._proposal[: plan.k])


class LookupReplay:
    """Prompt lookup in the simulator: the trace's proposal length, match and accepted tokens."""

    def __init__(self, ctx: ReplayContext) -> None:
        self.ctx = ctx

    def offer(self, i: int, k_cap: int) -> Offer:
        ctx, pt = self.ctx, self.ctx.trace
        seconds = ctx.clock(ctx.profile.lookup_s)
        n = min(pt.lookup_len[i], k_cap, ctx.settings.lookup_k_max)
        if not n:
            return Offer(0, 0, seconds)
        # the trace keeps how many of the proposal's tokens the target agrees with, not the tokens: those
        # are the answer's next ones, and the rest a token it never commits (-1)
        agreed = pt.tokens[i + 1 : i + 1 + min(pt.lookup_match[i], n)]
        proposal = (*agreed, *(-1,) * (n - len(agreed)))
        return Offer(n, pt.lookup_agree[i] if pt.lookup_agree else 0, seconds, proposal)

    def draft(self, i: int, plan: PlanView) -> Replayed:
        return Replayed(plan.k, min(self.ctx.trace.lookup_match[i], plan.k))


def _model_drafter(target: LoadedModel, draft: LoadedModel | None, s: ControllerSettings) -> ModelDrafter | None:
    return ModelDrafter(draft, target.n_vocab, s.p_min) if draft is not None else None


def _lookup_drafter(target: LoadedModel, draft: LoadedModel | None, s: ControllerSettings) -> PromptLookupDrafter:
    return PromptLookupDrafter(s.lookup_ngram, s.lookup_k_max)


def _lookup_k_max(s: ControllerSettings) -> int:
    return s.lookup_k_max


# The drafter registry: one line per drafter.  A mode offers its drafters in the order
# specchat/modes.py lists them; the controller prices each from its line.
DRAFTERS: tuple[DrafterKind, ...] = (
    DrafterKind(Drafter.MODEL, _model_drafter, ModelReplay, needs_model=True, per_decode=True,
                confidence_stop=True, probe_scale=4, probe_min_gain=1.2),
    DrafterKind(Drafter.LOOKUP, _lookup_drafter, LookupReplay, k_max=_lookup_k_max, match_classes=True),
)
KINDS = kinds_by_name(DRAFTERS)


def build_drafters(target: LoadedModel, draft: LoadedModel | None,
                   settings: ControllerSettings) -> dict[Drafter, LiveDrafter]:
    """Every registered drafter that can run with this pair."""
    out: dict[Drafter, LiveDrafter] = {}
    for kind in DRAFTERS:
        drafter = kind.build(target, draft, settings)
        if drafter is not None:
            out[kind.name] = drafter
    return out
