"""The generation loop: a generator of frozen events, one speculative round at a time.

Invariant (llama.cpp's speculative-simple): ``id_last``, the newest committed
token, is not yet in the target's KV cache.  A round decodes ``[id_last,
d1..dK]`` on the target in one batch with K+1 logit rows, keeps what the
target accepts, trims the rest from the cache, and emits the accepted tokens
plus the target's own next token.  K = 0 is plain decoding through the very
same path, which is what ``baseline`` measures.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from specchat.metrics import Counts

from .events import (
    Done,
    Error,
    Event,
    GenerationStats,
    Prefilled,
    RoundStats,
    StopReason,
    TokenOrigin,
    TokensEmitted,
)
from .runtime import LlamaError
from .sampling import TargetSampler
from .settings import Drafter, GrammarError, Mode, SamplingSettings
from .shapes import VerifyShape
from .verify import accepted_count, sample_and_match

if TYPE_CHECKING:
    from .cancel import CancelToken
    from .controller import DraftController
    from .drafting import LiveDrafter
    from .runtime import LoadedModel


class LoopPair(Protocol):
    """What the loop reads of a loaded pair (:class:`~.pair.SpeculativePair` is one; so is the tests' fake)."""

    target: LoadedModel
    draft: LoadedModel | None
    controller: DraftController
    drafters: dict[Drafter, LiveDrafter]  # every registered drafter that can run with this pair
    speculation_blocked: str

_DRAFT, _TARGET = TokenOrigin.DRAFT, TokenOrigin.TARGET


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
    target = pair.target
    controller = pair.controller
    cs = controller.settings
    mode = Mode(mode)
    rounds = Counts()  # the rounds' counts, added up as they finish
    fallbacks: list[str] = []
    notes: list[str] = []  # the fallbacks' briefs: why a drafter did not run (the stats line says so)
    by_drafter: dict[str, tuple[int, int]] = {}  # drafter -> (drafted, accepted) over the answer
    stream = TextStream(stop)
    n_generated = 0

    def stats(decode_s: float) -> GenerationStats:
        answer = Counts.of_answer(n_generated, decode_s, prompt_tokens=len(prompt), reused_tokens=reused,
                                  prefill_s=prefill_s)
        used = tuple((name, d, a) for name, (d, a) in sorted(by_drafter.items(), key=lambda kv: -kv[1][0]))
        return GenerationStats(mode.value, rounds + answer, tuple(fallbacks), structured=sampling.structured.kind,
                               drafters=used, notes=tuple(notes))

    prefill_s = 0.0
    reused = 0
    if not prompt:
        yield Error("empty prompt")
        yield Done(StopReason.ERROR, stats(0.0), "empty prompt")
        return
    if len(prompt) + 1 > target.n_ctx:
        msg = (f"the prompt is {len(prompt)} tokens and the context holds {target.n_ctx}: "
               "shorten the chat or raise the context size")
        yield Error(msg)
        yield Done(StopReason.ERROR, stats(0.0), msg)
        return
    if max_tokens < 1:
        yield Done(StopReason.MAX_TOKENS, stats(0.0))
        return

    # which drafters may run in this answer (its mode's, in the order they offer), and why not if one may not
    answer = controller.answer_plan(mode, has_model=Drafter.MODEL in pair.drafters, blocked=pair.speculation_blocked)
    active = [pair.drafters[d] for d in answer.drafters if d in pair.drafters]
    by_name = {d.name: d for d in active}
    yield from answer.notes
    fallbacks.extend(n.reason for n in answer.notes)
    notes.extend(n.brief for n in answer.notes if n.brief)

    sampler: TargetSampler | None = None
    # on a backend whose cost depends on the batch shape (CUDA graphs), the verify size is held
    shape = (VerifyShape(controller.costs.verify, lambda: controller.costs.recapture_s)
             if target.shape_sensitive and active
             else None)
    for d in pair.drafters.values():
        d.start()
    controller.start_answer()
    try:
        sampler = TargetSampler(target, sampling, (lambda: cancel.cancelled) if cancel is not None else None)
        # (a schema or grammar that cannot be used: GrammarError; a stop during its check: CANCELLED)
        # -- prefill: the whole prompt on the target, the first token from its last row
        t0 = time.perf_counter()
        reused = target.keep_prefix(prompt)
        if reused == len(prompt):  # the same prompt again: re-decode the last token for its logits
            reused -= 1
            target.trim(reused)
        target.decode(prompt[reused:], logits="last")
        # host work first (prompt lookup's index: 14 ms at 4k tokens on a CPU), while an asynchronous
        # backend computes the prefill; then what decodes (the draft model's prefill)
        for d in sorted(active, key=lambda d: not d.cheap_prefill):
            d.prefill(prompt)
        first = sampler.sample(-1)
        prefill_s = time.perf_counter() - t0
        yield Prefilled(len(prompt), reused, prefill_s)
        t_decode0 = time.perf_counter()

        history = prompt + [first]  # committed tokens; history[-1] is id_last (not in the target KV)
        if target.is_eog(first):
            yield Done(StopReason.EOG, stats(0.0))
            return
        n_generated = 1
        text, hit = stream.push(target.piece(first))
        yield TokensEmitted((first,), (_TARGET,), text)
        if hit:
            yield Done(StopReason.STOP_STRING, stats(0.0))
            return

        stop_reason = StopReason.MAX_TOKENS
        round_index = 0
        while n_generated < max_tokens:
            if cancel is not None and cancel.cancelled:
                stop_reason = StopReason.CANCELLED
                break
            t_round = time.perf_counter()
            room = target.n_ctx - len(target.tokens) - 1  # draft tokens that still fit after id_last
            if room < 0:
                stop_reason = StopReason.CONTEXT_FULL
                break
            k_cap = min(room, max_tokens - n_generated - 1)  # and each drafter's own longest draft
            # every drafter of the answer offers (a draft model: its K ceiling; prompt lookup: its
            # proposal, made now); the controller picks one and K; the chosen one drafts
            available: dict[Drafter, int] = {}
            match = 0  # the evidence behind an offer (prompt lookup's match length)
            draft_s = 0.0
            if k_cap > 0:
                for d in active:
                    offer = d.offer(history, k_cap, cs)
                    draft_s += offer.seconds
                    if offer.ceiling:
                        available[d.name] = offer.ceiling
                        match = match or offer.match
            plan = controller.plan(mode, available, match,
                                   held=shape.size if shape is not None else 0,
                                   change_s=shape.change_s if shape is not None else 0.0)
            catch_up = draft_decoded = 0
            chosen = by_name.get(plan.drafter)  # planned only when offered
            if chosen is not None:
                got = chosen.draft(history, plan)
                drafted, catch_up, draft_decoded = got.tokens, got.catch_up, got.decoded
                draft_s += got.seconds
            else:
                drafted = []
            drafted = sampler.allowed_prefix(drafted)  # under a grammar: what it forbids would be rejected

            base = len(target.tokens)
            batch = [history[-1], *drafted]
            if shape is not None:  # padded to the held shape; the padding rows are never sampled
                size = shape.size_for(len(batch), target.n_ctx - base)
                batch += [batch[-1]] * (size - len(batch))
            t_v = time.perf_counter()
            target.decode(batch, logits="all")
            target.logits(-1)  # reading logits waits for the computation (async backends)
            verify_s = time.perf_counter() - t_v
            emitted = sample_and_match(sampler.sample, drafted, limit=max_tokens - n_generated,
                                       is_end=target.is_eog)
            m = accepted_count(drafted, emitted)
            target.trim(base + 1 + m)
            ended = target.is_eog(emitted[-1])
            visible = emitted[:-1] if ended else emitted
            history.extend(emitted)
            n_generated += len(visible)
            # one event per origin (accepted draft tokens, then the target's own), so a view can tint them
            chunks: list[TokensEmitted] = []
            hit = False
            for part, origin in ((visible[:m], _DRAFT), (visible[m:], _TARGET)):
                if part and not hit:
                    text, hit = stream.push(b"".join(target.piece(t) for t in part))
                    chunks.append(TokensEmitted(tuple(part), (origin,) * len(part), text))
            round_stats = RoundStats(
                index=round_index, drafter=plan.drafter if drafted else Drafter.NONE, k=plan.k if drafted else 0,
                drafted=len(drafted), accepted=m, emitted=len(emitted), draft_s=draft_s, verify_s=verify_s,
                overhead_s=max(time.perf_counter() - t_round - draft_s - verify_s, 0.0),
                catch_up=catch_up,
                draft_decoded=draft_decoded,
                fallback=plan.fallback,
                verify_n=len(batch),
                verify_fresh=shape is not None and shape.fresh,
            )
            round_index += 1
            yield from chunks
            yield round_stats
            rounds += round_stats.counts
            if drafted:
                d0, a0 = by_drafter.get(round_stats.drafter.value, (0, 0))
                by_drafter[round_stats.drafter.value] = (d0 + len(drafted), a0 + m)
            for fb in controller.observe(mode, plan, round_stats):
                fallbacks.append(fb.reason)
                if fb.brief:
                    notes.append(fb.brief)
                yield fb
            if ended:
                stop_reason = StopReason.EOG
                break
            if hit:
                stop_reason = StopReason.STOP_STRING
                break
        decode_s = time.perf_counter() - t_decode0
        tail = stream.flush() if stop_reason is not StopReason.STOP_STRING else ""
        if tail:
            yield TokensEmitted((), (), tail)
        message = f"context full ({target.n_ctx} tokens)" if stop_reason is StopReason.CONTEXT_FULL else ""
        yield Done(stop_reason, stats(decode_s), message)
    except (LlamaError, GrammarError) as exc:
        # the runtime rolled its cache back (the next answer's keep_prefix drops an unverified
        # draft); drop the draft's cache so it re-syncs next time
        if pair.draft is not None:
            pair.draft.clear()
        if sampler is None and cancel is not None and cancel.cancelled:  # stopped while its grammar was checked
            yield Done(StopReason.CANCELLED, stats(0.0))
            return
        yield Error(str(exc))
        yield Done(StopReason.ERROR, stats(0.0), str(exc))
    finally:
        if sampler is not None:
            sampler.close()
