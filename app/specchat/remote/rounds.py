"""llama-server's speculative rounds, rebuilt from the running ``timings`` of a streamed answer.

With ``"timings_per_token": true`` every streamed chunk carries the request's running
totals (``predicted_n``, ``predicted_ms`` and, once something was drafted, ``draft_n``
and ``draft_n_accepted``).  The server counts a round's draft before it decodes
(``draft_n``) and its accepted tokens right after verifying, before the first of the
round's tokens is sent (tools/server/server-context.cpp of the llama.cpp that
llama-cpp-python 0.3.36 vendors).  So the first chunk of round r already includes r:

- a chunk whose ``draft_n`` grew opens a round with K = Δdraft_n and accepted =
  Δdraft_n_accepted; it and the next chunks bring that round's accepted + 1 tokens;
- tokens beyond what the open round can hold came from a plain step (no draft: the
  drafter declined, or too few tokens were left to draft);
- the answer's first token comes out of the prefill, as in the local engine: no round.

A chunk held back by the server (a stop-string prefix, half a UTF-8 character) can merge
two rounds into one observed change; it is kept as one round (Δdraft_n larger than the
server's maximum K says so) rather than guessed apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specchat.engine.events import RoundStats, TokenOrigin
from specchat.engine.settings import Drafter

from .errors import ServerError

_FIELDS = ("predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")


@dataclass(frozen=True, slots=True)
class Timings:
    """One chunk's running totals (``draft_n`` absent = 0: nothing drafted yet)."""

    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_n_accepted: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    cache_n: int = 0

    @classmethod
    def parse(cls, doc: object, where: str) -> Timings:
        """From a chunk's ``timings`` object; ServerError for anything that is not counts."""
        if not isinstance(doc, dict):
            raise ServerError(f"{where}: 'timings' is not an object")
        values: dict[str, float] = {}
        for name in ("predicted_n", "predicted_ms", "draft_n", "draft_n_accepted", "prompt_n", "prompt_ms",
                     "cache_n"):
            v = doc.get(name, 0)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or v > 1e12:
                raise ServerError(f"{where}: timings.{name} is not a count ({str(v)[:40]!r})")
            values[name] = v
        if values["draft_n_accepted"] > values["draft_n"]:
            raise ServerError(f"{where}: timings say more tokens were accepted than drafted")
        return cls(predicted_n=int(values["predicted_n"]), predicted_ms=float(values["predicted_ms"]),
                   draft_n=int(values["draft_n"]), draft_n_accepted=int(values["draft_n_accepted"]),
                   prompt_n=int(values["prompt_n"]), prompt_ms=float(values["prompt_ms"]),
                   cache_n=int(values["cache_n"]))


@dataclass(slots=True)
class _OpenRound:
    k: int
    accepted: int
    got: int = 0
    ms: float = 0.0

    @property
    def room(self) -> int:
        return self.accepted + 1 - self.got


class RoundRebuilder:
    """Feed every chunk's timings in order; get the origins of its tokens and the rounds it closed."""

    def __init__(self, drafter: Drafter = Drafter.MODEL) -> None:
        self.drafter = drafter
        self._last = Timings()
        self._open: _OpenRound | None = None
        self._index = 0
        self.merged_rounds = 0  # observed changes that held more than one round

    def feed(self, t: Timings, n_max: int | None = None) -> tuple[tuple[TokenOrigin, ...], list[RoundStats]]:
        """The origins of the tokens this chunk brought (Δpredicted_n of them) and the rounds now complete."""
        last = self._last
        if t.predicted_n < last.predicted_n or t.draft_n < last.draft_n or t.draft_n_accepted < last.draft_n_accepted:
            raise ServerError("the server's running counts went backwards mid-answer")
        self._last = t
        dn = t.predicted_n - last.predicted_n
        dd = t.draft_n - last.draft_n
        da = t.draft_n_accepted - last.draft_n_accepted
        ms = max(t.predicted_ms - last.predicted_ms, 0.0)
        closed: list[RoundStats] = []
        if dd > 0:
            if self._open is not None:
                closed.append(self._close())
            self._open = _OpenRound(dd, da)
            if n_max is not None and dd > n_max:
                self.merged_rounds += 1
        elif da > 0 and self._open is not None:  # acceptance counted late: still this round
            self._open.accepted += da
        origins: list[TokenOrigin] = []
        share = ms / dn if dn else 0.0
        if last.predicted_n == 0 and dn and dd == 0:  # the first token comes out of the prefill: not a round
            origins.append(TokenOrigin.TARGET)
            dn -= 1
        for _ in range(dn):
            r = self._open
            if r is not None and r.room > 0:
                origins.append(TokenOrigin.DRAFT if r.got < r.accepted else TokenOrigin.TARGET)
                r.got += 1
                r.ms += share
                continue
            if r is not None:
                closed.append(self._close())
            origins.append(TokenOrigin.TARGET)  # a plain step: one token, no draft
            closed.append(self._round(0, 0, 1, share))
        if dn == 0 and self._open is not None:
            self._open.ms += ms
        return tuple(origins), closed

    def finish(self) -> list[RoundStats]:
        """The round still open when the answer ended (it may hold fewer tokens: a stop cut it)."""
        return [self._close()] if self._open is not None else []

    def _close(self) -> RoundStats:
        r = self._open
        assert r is not None
        self._open = None
        return self._round(r.k, r.accepted, r.got, r.ms)

    def _round(self, k: int, accepted: int, emitted: int, ms: float) -> RoundStats:
        stats = RoundStats(index=self._index, drafter=self.drafter if k else Drafter.NONE, k=k, drafted=k,
                           accepted=accepted, emitted=emitted, draft_s=0.0, verify_s=ms / 1e3, overhead_s=0.0)
        self._index += 1
        return stats
