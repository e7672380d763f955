"""A streamed answer from a server, as the engine's own events.

:func:`stream_answer` is a generator like the local ``generate``: it yields
:class:`~specchat.engine.events.Prefilled`, ``TokensEmitted`` (with each token's origin
where the server lets us know it), ``RoundStats``, ``Error`` and one final ``Done``, so
the chat, the telemetry panel, the store and the bench take a server answer as they take
a local one.

- llama-server: ``timings_per_token`` makes every chunk carry the running totals, from
  which :class:`~specchat.remote.rounds.RoundRebuilder` rebuilds each round exactly.
- vLLM: ``/metrics`` is polled (at most every :data:`POLL_S`) while the answer streams and
  its counter deltas become the live rounds, which cover the whole server; the answer's
  own summary (``--per-request-spec-decode-metrics``) replaces them at the end.
- SGLang: the answer's ``sglext``/``meta_info`` summary at the end.
- Reasoning (``reasoning_content``, or ``reasoning``) is passed on inside ``<think>`` tags,
  so the one split of every backend's stream (:func:`specchat.engine.phases.split_answer`,
  applied by :class:`~.backend.RemoteBackend`) splits it as a local model's ``<think>`` block.

Stop: the stream is a close-on-cancel closer of the token (``CancelToken.closing``): the
cancel shuts its socket down, so even a server that stopped sending is left at once (no
watcher thread polls the token); the server sees the client go and stops
generating.  Every failure after the first token keeps what was streamed: ``Error`` then
``Done(ERROR)`` carrying the counts so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from specchat.bounded_json import loads
from specchat.cancel import CancelToken
from specchat.engine.answer import AnswerRequest
from specchat.engine.events import (
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
from specchat.engine.reasoning import CLOSE_TAG, OPEN_TAG
from specchat.engine.settings import Drafter
from specchat.metrics import Counts

from .client import Capabilities, ServerClient, StreamedEvents
from .counters import RequestSpec, SpecCounters, delta
from .errors import ServerError
from .reader import BYTES_PER_TOKEN
from .rounds import RoundRebuilder, Timings

CLAIM_SLACK = 16  # tokens a server may count beyond one per chunk or byte (an end-of-generation token)

POLL_S = 0.5  # vLLM's counters move every scheduler step; twice a second is live enough and cheap
MAX_CHUNKS = 1 << 20  # far beyond any max_tokens a chat asks for


Cancel = CancelToken  # the app's one cancel token; a cancel also stops the stream (a close-on-cancel closer)


def request_body(caps: Capabilities, req: AnswerRequest) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body: the OpenAI fields every server takes, plus its kind's own
    (:mod:`.kinds`); :class:`ServerError` (one line) for a schema that is not JSON or a grammar the
    server cannot take."""
    s = req.sampling
    body: dict[str, Any] = {
        "model": caps.model, "messages": [dict(m) for m in req.messages], "stream": True,
        "max_tokens": req.max_tokens, "temperature": s.temperature, "top_p": s.top_p, "seed": s.seed,
        "stream_options": {"include_usage": True},
    }
    if req.stop:
        body["stop"] = list(req.stop)
    caps.kind.body_extras(body, req)
    if s.structured.active:
        body.update(caps.kind.structured_fields(s.structured))
    return body


def stream_answer(client: ServerClient, caps: Capabilities, req: AnswerRequest, cancel: Cancel,
                  *, mode: str = "", observe: Callable[[dict], None] | None = None) -> Iterator[Event]:
    """The answer to ``req`` from the server, as engine events (see the module docstring).
    ``observe`` sees every chunk as the server sent it (after it parsed as an object)."""
    answer = _Answer(client, caps, mode or caps.engine, req.max_tokens)
    answer.observe = observe
    try:
        # the token cancels the request's guard from before it is sent: a Stop shuts the socket down while
        # connecting, waiting for headers or reading events, and the blocked call returns at once
        with client.stream_events("/v1/chat/completions", request_body(caps, req), cancel) as events:
            yield from answer.read(events, cancel)
    except ServerError as exc:
        if cancel.cancelled:
            yield answer.done(StopReason.CANCELLED)
            return
        message = str(exc) + ("; the partial answer is kept" if answer.tokens else "")
        yield Error(message)
        yield answer.done(StopReason.ERROR, message)
        return
    if cancel.cancelled and answer.finish_reason is None:
        yield answer.done(StopReason.CANCELLED)
    elif answer.finish_reason is None:
        message = f"{client.where} ended the answer without finishing it; the partial answer is kept"
        yield Error(message)
        yield answer.done(StopReason.ERROR, message)
    else:
        yield answer.done(_stop_reason(answer.finish_reason))


def _stop_reason(finish: str) -> StopReason:
    return {"length": StopReason.MAX_TOKENS, "stop": StopReason.EOG}.get(finish, StopReason.EOG)


class _Answer:
    """The state of one streamed answer: text so far, counts, rounds."""

    def __init__(self, client: ServerClient, caps: Capabilities, mode: str, max_tokens: int = 0) -> None:
        self.client, self.caps, self.mode = client, caps, mode
        self.where = client.where
        self.max_tokens = max_tokens  # enforced on what the server streams (0: none asked for)
        self.tokens = 0
        self.chunks = 0  # chunks that arrived, and the bytes of their text: what any count is checked against
        self.text_bytes = 0
        self._owed = SpecCounters(0, 0, 0)  # counted steps not yet matched by tokens that arrived
        self.rounds = Counts()
        self.prompt = Counts()
        self.finish_reason: str | None = None
        self.t0 = time.perf_counter()
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.in_reasoning = False
        self.rebuilder = RoundRebuilder(Drafter.LOOKUP if "ngram" in caps.speculation else Drafter.MODEL)
        self.usage_tokens: int | None = None
        self.request_spec: RequestSpec | None = None
        self._counters_last: SpecCounters | None = None
        self.server_wide = SpecCounters()  # vLLM: the counter deltas seen while this answer streamed
        self._next_poll = 0.0
        self.live_rounds_server_wide = caps.kind.live_server_counters(caps.metrics)
        self.observe: Callable[[dict], None] | None = None
        self.cut = False  # the client ended the answer at max_tokens

    @property
    def arrived(self) -> int:
        """The most tokens what arrived can hold: one per chunk or per byte of text, plus a little slack.
        Every count a server claims is checked against it before anything loops over it."""
        return self.chunks + self.text_bytes + CLAIM_SLACK

    # -- reading ---------------------------------------------------------------------------

    def read(self, events: StreamedEvents, cancel: Cancel) -> Iterator[Event]:
        if self.live_rounds_server_wide:
            self._counters_last = self._scrape()
        for n, data in enumerate(events):
            if cancel.cancelled or n > MAX_CHUNKS:
                return
            if data.strip() == "[DONE]":
                break
            chunk = self._parse(data)
            self.chunks += 1
            if self.observe is not None:
                self.observe(chunk)
            yield from self._chunk(chunk)
            if self.finish_reason == "length" and self.cut:
                break  # past max_tokens: leaving the block closes the stream
            if self.live_rounds_server_wide and time.perf_counter() >= self._next_poll:
                yield from self._poll_counters()
        if not cancel.cancelled:
            yield from self._close_rounds()

    def _parse(self, data: str) -> dict:
        try:
            chunk = loads(data)
        except ValueError:  # not JSON, or nested too deep
            raise ServerError(f"{self.where} sent a malformed chunk ({data[:60]!r})") from None
        if not isinstance(chunk, dict):
            raise ServerError(f"{self.where} sent a chunk that is not an object")
        if "error" in chunk:
            err = chunk["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise ServerError(f"{self.where} failed mid-answer: {str(msg)[:200]}")
        return chunk

    def _chunk(self, chunk: dict) -> Iterator[Event]:
        text = self._delta_text(chunk)
        self.text_bytes += len(text.encode("utf-8", "replace"))
        timings = chunk.get("timings")
        t = Timings.parse(timings, self.where) if timings is not None else None
        if t is not None and t.predicted_n > self.arrived:
            raise ServerError(f"{self.where} claims {t.predicted_n} tokens generated but sent {self.chunks} chunks "
                              f"of {self.text_bytes} bytes; the server is misbehaving")
        if t is not None and self.t_first is None and (t.prompt_n or t.cache_n):
            self.prompt = Counts.of_answer(0, 0.0, prompt_tokens=t.prompt_n + t.cache_n, reused_tokens=t.cache_n,
                                           prefill_s=t.prompt_ms / 1e3)
        origins: tuple[TokenOrigin, ...] = ()
        rounds: list[RoundStats] = []
        if t is not None and self.caps.kind.per_round:
            origins, rounds = self.rebuilder.feed(t, self.caps.n_max)
        elif text:
            origins = (TokenOrigin.TARGET,)  # one token per chunk: what these servers stream by default
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)
        self._summaries(chunk)
        if self.max_tokens > 0 and (self.tokens + len(origins) > self.max_tokens
                                    or self.text_bytes > self.max_tokens * BYTES_PER_TOKEN):
            self.cut, self.finish_reason = True, "length"  # the server streams past max_tokens: end it here
            return
        if origins or text:
            now = time.perf_counter()
            if self.t_first is None:
                self.t_first = now
                yield Prefilled(self.prompt.prompt_tokens, self.prompt.reused_tokens,
                                self.prompt.prefill_s or now - self.t0)
            self.t_last = now
            self.tokens += len(origins)
            yield TokensEmitted((), origins, text)
        for r in rounds:
            self.rounds += r.counts
            yield r
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            finish = choices[0].get("finish_reason")
            if isinstance(finish, str):
                self.finish_reason = finish

    def _delta_text(self, chunk: dict) -> str:
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ""
        delta_doc = choices[0].get("delta")
        if not isinstance(delta_doc, dict):
            return ""
        thought = delta_doc.get("reasoning_content") or delta_doc.get("reasoning")
        content = delta_doc.get("content")
        out = []
        if isinstance(thought, str) and thought:
            if not self.in_reasoning:
                out.append(OPEN_TAG)
                self.in_reasoning = True
            out.append(thought)
        if isinstance(content, str) and content:
            if self.in_reasoning:
                out.append(CLOSE_TAG)
                self.in_reasoning = False
            out.append(content)
        return "".join(out)

    def _usage(self, usage: dict) -> None:
        done = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        if isinstance(done, int) and not isinstance(done, bool) and 0 <= done < 1 << 31:
            self.usage_tokens = done
        if isinstance(prompt, int) and not isinstance(prompt, bool) and 0 <= prompt < 1 << 31 \
                and not self.prompt.prompt_tokens:
            cached = usage.get("prompt_tokens_details")
            reused = cached.get("cached_tokens") if isinstance(cached, dict) else 0
            reused = reused if isinstance(reused, int) and not isinstance(reused, bool) and 0 <= reused <= prompt else 0
            self.prompt = replace(self.prompt, prompt_tokens=prompt, reused_tokens=reused)

    def _summaries(self, chunk: dict) -> None:
        """The answer's own speculation summary, in whichever chunk this server version puts it."""
        found = self.caps.kind.summary(chunk, self.where)
        if found is not None:
            steps = max(found.steps or 0, len(found.per_step or ()))
            if steps > self.arrived:
                raise ServerError(f"{self.where} reports {steps} verification steps for an answer of "
                                  f"{self.chunks} chunks; the server is misbehaving")
        self.request_spec = found or self.request_spec

    # -- vLLM's server-wide counters --------------------------------------------------------

    def _scrape(self) -> SpecCounters | None:
        try:
            m = self.client.metrics()
        except ServerError:
            return None
        return m.spec if m is not None else None

    def _poll_counters(self) -> Iterator[RoundStats]:
        self._next_poll = time.perf_counter() + POLL_S
        now = self._scrape()
        if now is None or self._counters_last is None:
            return
        d = delta(self._counters_last, now)
        self._counters_last = now
        if d is None or d.drafts <= 0:
            return
        d = SpecCounters(d.drafts + self._owed.drafts, d.draft_tokens + self._owed.draft_tokens,
                         d.accepted + self._owed.accepted)
        self._owed = SpecCounters(0, 0, 0)
        room = max(self.tokens - self.server_wide.drafts, 0)  # a step emits a token: never more steps than tokens
        if d.drafts > room:
            # more steps than tokens arrived: other requests (the counters are server-wide), or the server
            # ahead of what we have read on a loaded machine. This answer takes what its tokens allow
            # now; the rest waits for more tokens to arrive.
            scale = room / d.drafts
            part = SpecCounters(room, round(d.draft_tokens * scale), round(d.accepted * scale))
            self._owed = SpecCounters(d.drafts - part.drafts, d.draft_tokens - part.draft_tokens,
                                      d.accepted - part.accepted)
            d = part
        if d.drafts <= 0:
            return
        # the steps between two scrapes as one round with their mean draft (server-wide figures: which of
        # them were fully accepted is not in the counters, so the answer's sequence acceptance stays undefined)
        self.server_wide = SpecCounters(self.server_wide.drafts + d.drafts,
                                        self.server_wide.draft_tokens + d.draft_tokens,
                                        self.server_wide.accepted + d.accepted)
        k = max(round(d.draft_tokens / d.drafts), 1)
        r = RoundStats(index=0, drafter=Drafter.MODEL, k=k, drafted=d.draft_tokens, accepted=d.accepted,
                       emitted=d.accepted + d.drafts, draft_s=0.0, verify_s=0.0, overhead_s=0.0)
        yield r

    def _close_rounds(self) -> Iterator[RoundStats]:
        for r in self.rebuilder.finish():
            self.rounds += r.counts
            yield r
        if self.live_rounds_server_wide:
            yield from self._poll_counters()

    # -- the end -----------------------------------------------------------------------------

    def done(self, reason: StopReason, message: str = "") -> Done:
        tokens = self.tokens
        if self.usage_tokens is not None and not self.caps.kind.per_round:
            claimed = min(self.usage_tokens, self.arrived, *((self.max_tokens,) if self.max_tokens > 0 else ()))
            tokens = claimed  # what the server claims, checked against what arrived  # several tokens per chunk happen (stream intervals, held-back text)
        decode_s = (self.t_last - self.t_first) if self.t_first is not None and self.t_last is not None else 0.0
        counts = Counts.of_answer(tokens, decode_s, prompt_tokens=self.prompt.prompt_tokens,
                                  reused_tokens=self.prompt.reused_tokens, prefill_s=self.prompt.prefill_s)
        counts += self._speculation_counts()
        return Done(reason, GenerationStats(self.mode, counts), message)

    def _speculation_counts(self) -> Counts:
        spec = self.request_spec
        if spec is None and self.server_wide.drafts:
            return self.rounds + Counts(drafted=self.server_wide.draft_tokens, accepted=self.server_wide.accepted)
        if spec is None:
            return self.rounds
        if spec.per_step:
            return Counts.total(Counts.of_round(d, d, a) for d, a in spec.per_step)
        steps = spec.steps or 0
        return Counts(drafted=spec.drafted, accepted=spec.accepted, rounds=steps, rounds_with_draft=steps,
                      rounds_fully_accepted=spec.fully_accepted_steps or 0, k_sum=spec.drafted)

