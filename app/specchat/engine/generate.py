"""The generation loop: a generator of frozen events, one speculative round at a time.

Invariant (llama.cpp's speculative-simple): ``id_last``, the newest committed
token, is not yet in the target's KV cache.  A round decodes ``[id_last,
d1..dK]`` on the target in one batch with K+1 logit rows, keeps what the
target accepts, trims the rest from the cache, and emits the accepted tokens
plus the target's own next token.  K = 0 is plain decoding through the very
same path, which is what ``baseline`` measures.

The round itself (offers, plan, draft, verify, what the controller learns) is
:class:`~.round.Rounds`, which the simulator plays too; here are its decodes on
the loaded pair (:class:`PairDecodes`) and the answer around the rounds."""

from __future__ import annotations

import codecs
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from specchat.metrics import Counts

from .events import (
    Done,
    Error,
    Event,
    Fallback,
    GenerationStats,
    Prefilled,
    StopReason,
    TokenOrigin,
    TokensEmitted,
)
from .round import Draft, Rounds, Verified
from .runtime import DecodeAborted, LlamaError
from .sampling import TargetSampler, last_choices
from .settings import Drafter, GrammarError, Mode, SamplingSettings
from .verify import accepted_count, sample_and_match

if TYPE_CHECKING:
    from .cancel import CancelToken
    from .controller import DraftController, Plan
    from .drafting import LiveDrafter, Offer
    from .runtime import LoadedModel
    from .threads import ThreadFit


class LoopPair(Protocol):
    """What the loop reads of a loaded pair (:class:`~.pair.SpeculativePair` is one; so is the tests' fake)."""

    target: LoadedModel
    draft: LoadedModel | None
    controller: DraftController
    drafters: dict[Drafter, LiveDrafter]  # every registered drafter that can run with this pair
    speculation_blocked: str
    threads: ThreadFit | None  # the decode threads fitted to the machine (None: a count the user chose)

    def fit_threads(self) -> int: ...  # both models on the threads other work leaves free now

_DRAFT, _TARGET = TokenOrigin.DRAFT, TokenOrigin.TARGET

# The prompt's agreement: how often the draft's greedy choice is the target's over the prompt's last
# PROMPT_ROWS positions, which both models decode anyway (the rows of logits are its cost).  auto reads it
# as whether this prompt is a harder text for the draft than the last (DraftController.new_prompt).  On the
# builtin prompts with the 1.5B/0.5B test pair it is 0.57-0.89 on code and edits, 0.43-0.58 on chat, JSON,
# summaries and poems (docs/benchmarks.md); under PROMPT_ROWS_MIN positions it says too little.  It is
# measured where decodes replay CUDA graphs: there a round drafted on a stale estimate costs a re-capture,
# and a GPU computes the rows in a fraction of a prefill.  On a 2-core CPU they cost 0.10-0.15 s a prompt
# (scripts/measure_prompt_rows.py) and the simulated CPU profiles gain nothing from them.
PROMPT_ROWS = 64
PROMPT_ROWS_MIN = 8


def prompt_agreement(target_choices: Sequence[int], draft_choices: Sequence[int]) -> float | None:
    """The share of the last positions both choices cover where the draft's is the target's (None: too few)."""
    n = min(len(target_choices), len(draft_choices))
    if n < PROMPT_ROWS_MIN:
        return None
    return sum(a == b for a, b in zip(target_choices[-n:], draft_choices[-n:], strict=True)) / n


class TextStream:
    """Bytes of tokens in, visible text out: UTF-8 completed, stop strings cut off.

    Holds back just enough characters that a stop string split across tokens is
    never half shown.
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._pending = ""

    def push(self, data: bytes) -> tuple[str, bool]:
        self._pending += self._decoder.decode(data)
        for s in self._stop:
            at = self._pending.find(s)
            if at >= 0:
                out, self._pending = self._pending[:at], ""
                return out, True
        cut = len(self._pending) - self._hold
        if cut <= 0:
            return "", False
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out, False

    def flush(self) -> str:
        out = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return out


def generate(
    pair: LoopPair,
    prompt: list[int],
    *,
    mode: Mode,
    sampling: SamplingSettings,
    max_tokens: int,
    stop: Sequence[str] = (),
    cancel: CancelToken | None = None,
) -> Iterator[Event]:
    """One answer: ``Prefilled`` and the first token, then round after round (:class:`~.round.Rounds` on
    :class:`PairDecodes`) its tokens, its ``RoundStats`` and the controller's fallbacks; ``Done`` last.

    ``cancel`` (the answer's Stop) is checked between rounds, and stops a decode under way within one graph
    node, on the target and the draft (``LoadedModel.abort_on``): a Stop during a long prefill ends the
    answer at once as ``CANCELLED``, both caches as they were before that decode."""
    with contextlib.ExitStack() as aborts:
        for model in (pair.target, pair.draft):
            if model is not None:
                aborts.enter_context(model.abort_on(cancel))
        yield from _answer(pair, prompt, mode=mode, sampling=sampling, max_tokens=max_tokens, stop=stop,
                           cancel=cancel)


def _answer(pair: LoopPair, prompt: list[int], *, mode: Mode, sampling: SamplingSettings, max_tokens: int,
            stop: Sequence[str], cancel: CancelToken | None) -> Iterator[Event]:
    mode = Mode(mode)
    target, controller = pair.target, pair.controller
    live = PairDecodes(pair, mode, sampling, prompt, max_tokens, stop)
    if not prompt or len(prompt) + 1 > target.n_ctx:
        msg = "empty prompt" if not prompt else (
            f"the prompt is {len(prompt)} tokens and the context holds {target.n_ctx}: "
            "shorten the chat or raise the context size")
        yield Error(msg)
        yield live.done(StopReason.ERROR, message=msg)
        return
    if max_tokens < 1:
        yield live.done(StopReason.MAX_TOKENS)
        return
    # which drafters may run in this answer (its mode's, in the order they offer), and why not if one may not
    answer = controller.answer_plan(mode, has_model=Drafter.MODEL in pair.drafters, blocked=pair.speculation_blocked)
    for note in answer.notes:
        yield live.note(note)
    drafters = [d for d in answer.drafters if d in pair.drafters]
    # on a backend whose cost depends on the batch shape (CUDA graphs), the verify size is held
    rounds = live.rounds = Rounds(controller, mode, live, drafters, shaped=target.shape_sensitive and bool(drafters))
    for d in pair.drafters.values():
        d.start()
    controller.start_answer()
    t_decode0: float | None = None
    try:
        # (a schema or grammar that cannot be used: GrammarError; a stop during its check: CANCELLED)
        live.sampler = TargetSampler(target, sampling, (lambda: cancel.cancelled) if cancel is not None else None)
        live.fit_threads(pair)
        first = live.prefill([pair.drafters[d] for d in drafters])
        if live.agreement is not None:
            controller.new_prompt(live.agreement)
        yield Prefilled(len(prompt), live.reused, live.prefill_s)
        t_decode0 = time.perf_counter()
        if target.is_eog(first):
            yield live.done(StopReason.EOG)
            return
        yield live.commit_first(first)
        if live.hit:
            yield live.done(StopReason.STOP_STRING)
            return
        stop_reason = StopReason.MAX_TOKENS
        while live.n_generated < max_tokens:
            if cancel is not None and cancel.cancelled:
                stop_reason = StopReason.CANCELLED
                break
            live.fit_threads(pair)
            room = live.start_round()  # draft tokens that still fit after id_last
            if room < 0:
                stop_reason = StopReason.CONTEXT_FULL
                break
            played = rounds.play(min(room, max_tokens - live.n_generated - 1))  # each drafter caps it too
            yield from live.chunks  # one event per origin (accepted drafts, then the target's own)
            yield played.stats
            for fb in played.fallbacks:
                yield live.note(fb)
            if live.ended or live.hit:
                stop_reason = StopReason.EOG if live.ended else StopReason.STOP_STRING
                break
        yield from live.finish(stop_reason, time.perf_counter() - t_decode0)
    except DecodeAborted:
        # stopped inside a decode (the prefill, a draft, a verify): each model rolled its cache back to what
        # it held, so the next answer reuses it; what was shown stays, as for a Stop between rounds
        yield from live.finish(StopReason.CANCELLED, time.perf_counter() - t_decode0 if t_decode0 else 0.0)
    except (LlamaError, GrammarError) as exc:
        # the runtime rolled its cache back (the next answer's keep_prefix drops an unverified
        # draft); drop the draft's cache so it re-syncs next time
        if pair.draft is not None:
            pair.draft.clear()
        if live.sampler is None and cancel is not None and cancel.cancelled:  # stopped while its grammar was checked
            yield live.done(StopReason.CANCELLED)
            return
        yield Error(str(exc))
        yield live.done(StopReason.ERROR, message=str(exc))
    finally:
        if live.sampler is not None:
            live.sampler.close()


class PairDecodes:
    """One answer on the loaded pair: the loop's side of a round (:class:`~.round.RoundDecodes`: llama.cpp
    decodes, wall-clock timing), the committed tokens and their text, and the answer's stats."""

    def __init__(self, pair: LoopPair, mode: Mode, sampling: SamplingSettings, prompt: list[int],
                 max_tokens: int, stop: Sequence[str]) -> None:
        self.target = pair.target
        self.drafters = pair.drafters
        self.settings = pair.controller.settings
        self.mode = mode
        self.structured = sampling.structured.kind
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.stream = TextStream(stop)
        self.sampler: TargetSampler | None = None
        self.rounds: Rounds | None = None
        self.notes: list[Fallback] = []  # why a drafter did not run, or stopped (the stats line says so)
        self.reused, self.prefill_s = 0, 0.0
        self.history: list[int] = []  # committed tokens; history[-1] is id_last (not in the target KV)
        self.n_generated = 0
        self.chunks: list[TokensEmitted] = []  # the last round's text, one event per origin
        self.ended = self.hit = False  # the last round ended the turn / hit a stop string
        self._drafted: list[int] = []  # the draft in flight
        self._t_round = 0.0
        self.threads = (0, 0)  # the fewest decode threads it ran on, of the most the models were loaded with
        self.agreement: float | None = None  # the prompt's agreement (prompt_agreement), where auto measured it

    # -- the answer ------------------------------------------------------------------

    def prefill(self, drafters: list[LiveDrafter]) -> int:
        """The whole prompt on the target, and the first token from its last row."""
        target, prompt = self.target, self.prompt
        assert self.sampler is not None
        t0 = time.perf_counter()
        reused = target.keep_prefix(prompt)
        if reused == len(prompt):  # the same prompt again: re-decode the last token for its logits
            reused -= 1
            target.trim(reused)
        self.reused = reused
        # auto's prompt agreement: the target's choices at the new prompt's last positions (rows of logits),
        # where decodes replay CUDA graphs (PROMPT_ROWS)
        measure = self.mode is Mode.AUTO and target.shape_sensitive
        rows = min(PROMPT_ROWS, len(prompt) - reused, target.n_outputs) if measure else 0
        target.decode(prompt[reused:], logits=rows if rows >= PROMPT_ROWS_MIN else "last")
        mine = last_choices(target, rows) if rows >= PROMPT_ROWS_MIN else ()
        # host work first (prompt lookup's index: 14 ms at 4k tokens on a CPU), while an asynchronous
        # backend computes the prefill; then what decodes (the draft model's prefill)
        for d in sorted(drafters, key=lambda d: not d.cheap_prefill):
            theirs = d.prefill(prompt, len(mine))
            if theirs:
                self.agreement = prompt_agreement(mine, theirs)
        first = self.sampler.sample(-1)
        self.prefill_s = time.perf_counter() - t0
        self.history = prompt + [first]
        return first

    def fit_threads(self, pair: LoopPair) -> None:
        """Run the next decodes on the threads other work leaves free (engine/threads.py)."""
        if pair.threads is None:  # a count the user chose
            return
        pair.fit_threads()
        now, most = pair.target.threads_now, pair.target.n_threads  # what the target runs on, of what it could
        self.threads = (min(now, self.threads[0]) if self.threads[0] else now, most)

    def commit_first(self, first: int) -> TokensEmitted:
        self.n_generated = 1
        text, self.hit = self.stream.push(self.target.piece(first))
        return TokensEmitted((first,), (_TARGET,), text)

    def note(self, fb: Fallback) -> Fallback:
        self.notes.append(fb)
        return fb

    def finish(self, stop_reason: StopReason, decode_s: float) -> Iterator[Event]:
        """What the text stream still held (unless a stop string cut it), then ``Done``."""
        tail = self.stream.flush() if stop_reason is not StopReason.STOP_STRING else ""
        if tail:
            yield TokensEmitted((), (), tail)
        full = stop_reason is StopReason.CONTEXT_FULL
        yield self.done(stop_reason, decode_s, f"context full ({self.target.n_ctx} tokens)" if full else "")

    def done(self, stop_reason: StopReason, decode_s: float = 0.0, message: str = "") -> Done:
        answer = Counts.of_answer(self.n_generated, decode_s, prompt_tokens=len(self.prompt),
                                  reused_tokens=self.reused, prefill_s=self.prefill_s)
        rounds = self.rounds
        by_drafter = rounds.by_drafter if rounds is not None else {}
        used = tuple((name, d, a) for name, (d, a) in sorted(by_drafter.items(), key=lambda kv: -kv[1][0]))
        stats = GenerationStats(self.mode.value, (rounds.counts if rounds is not None else Counts()) + answer,
                                tuple(n.reason for n in self.notes), structured=self.structured, drafters=used,
                                notes=tuple(n.brief for n in self.notes if n.brief), threads=self.threads)
        return Done(stop_reason, stats, message)

    # -- a round's decodes (RoundDecodes) ---------------------------------------------------

    def start_round(self) -> int:
        """Start the round's clock; return how many draft tokens still fit after id_last."""
        self._t_round = time.perf_counter()
        return self.room - 1

    @property
    def room(self) -> int:
        return self.target.n_ctx - len(self.target.tokens)

    def offer(self, drafter: Drafter, k_cap: int) -> Offer:
        return self.drafters[drafter].offer(self.history, k_cap, self.settings)

    def draft(self, drafter: Drafter, plan: Plan) -> Draft:
        got = self.drafters[drafter].draft(self.history, plan)
        assert self.sampler is not None
        self._drafted = self.sampler.allowed_prefix(got.tokens)  # under a grammar: what it forbids would be rejected
        spare = max(len(self._drafted) - (len(got.tokens) - got.spare), 0)
        return Draft(len(self._drafted), (got.seconds,), got.catch_up, got.decoded, spare)

    def verify(self, draft: Draft, rows: int, fresh: bool) -> Verified:
        """``[id_last, d1..dK]`` (padded to ``rows``: the padding rows are never sampled) in one target decode;
        what it accepts is committed, the rest trimmed from its cache."""
        drafted, self._drafted = self._drafted[: draft.n], []
        target, sampler = self.target, self.sampler
        assert sampler is not None
        base = len(target.tokens)
        batch = [self.history[-1], *drafted]
        batch += [batch[-1]] * (rows - len(batch))
        t_v = time.perf_counter()
        target.decode(batch, logits="all")
        target.logits(-1)  # reading logits waits for the computation (async backends)
        seconds = time.perf_counter() - t_v
        emitted = sample_and_match(sampler.sample, drafted, limit=self.max_tokens - self.n_generated,
                                   is_end=target.is_eog)
        m = accepted_count(drafted, emitted)
        target.trim(base + 1 + m)
        self.ended = target.is_eog(emitted[-1])
        visible = emitted[:-1] if self.ended else emitted
        self.history.extend(emitted)
        self.n_generated += len(visible)
        self._text(visible, m)
        return Verified(m, len(emitted), seconds, tuple(emitted))

    def _text(self, visible: list[int], accepted: int) -> None:
        """The round's text: one event per origin (accepted draft tokens, then the target's own), so a
        view can tint them; cut at a stop string."""
        self.chunks, self.hit = [], False
        for part, origin in ((visible[:accepted], _DRAFT), (visible[accepted:], _TARGET)):
            if part and not self.hit:
                text, self.hit = self.stream.push(b"".join(self.target.piece(t) for t in part))
                self.chunks.append(TokensEmitted(tuple(part), (origin,) * len(part), text))

    def overhead(self, draft_s: float, verify_s: float) -> float:
        return max(time.perf_counter() - self._t_round - draft_s - verify_s, 0.0)
