"""Reasoning and answer, split once in the event stream; and which rounds ran in which.

Every backend's answer goes through :func:`split_answer`: its ``TokensEmitted`` get their
text split into ``answer`` and ``reasoning`` (:class:`~.reasoning.ReasoningParser`, the
``<think>`` tags left out), so the answer service, the store and the CLI only append.
A tag cut across chunks is held back until it is known; what is still held when the
answer ends comes as one more ``TokensEmitted`` (no tokens) just before ``Done``.

Reasoning lowers acceptance (the draft guesses a model's thinking worse than its
answer), so telemetry shows the two phases apart.  The engine's rounds know nothing of
``<think>`` tags; the same split files each :class:`~.events.RoundStats` under the phase
most of its text went to: a round's ``TokensEmitted`` chunks come just before its
``RoundStats``.  A round whose text is all tag (``</think>`` alone) keeps the phase it
started in.  ``Done`` gets the two phases' counts (:class:`~specchat.metrics.PhaseSplit`).

Works on any event stream (local engine or a server's), one answer per tagger.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TypeVar

from specchat.metrics import ANSWER, REASONING, PhaseSplit

from .events import Done, RoundStats, TokensEmitted
from .reasoning import ReasoningParser

E = TypeVar("E")


class PhaseTagger:
    def __init__(self, starts_in_reasoning: bool = False) -> None:
        self._parser = ReasoningParser(starts_in_reasoning)
        self._chars = {REASONING: 0, ANSWER: 0}  # of the text since the last round ended
        self._started_in = self._phase_now()
        self.split = PhaseSplit()

    def _phase_now(self) -> str:
        return REASONING if self._parser.in_reasoning else ANSWER

    def tag(self, ev: E) -> E:
        """``ev``, with its text split (tokens), its phase (a round) or the answer's split (its end) filled in."""
        if isinstance(ev, TokensEmitted):
            if not ev.text:
                return ev
            piece = self._parser.feed(ev.text)
            self._chars[REASONING] += len(piece.reasoning)
            self._chars[ANSWER] += len(piece.answer)
            return replace(ev, answer=piece.answer, reasoning=piece.reasoning)
        if isinstance(ev, RoundStats):
            r, a = self._chars[REASONING], self._chars[ANSWER]
            phase = REASONING if r > a else ANSWER if a > r else self._started_in
            self._chars = {REASONING: 0, ANSWER: 0}
            self._started_in = self._phase_now()
            self.split = self.split.add(phase, PhaseSplit.round_counts(ev.counts, ev.emitted, ev.wall_s))
            return replace(ev, phase=phase)
        if isinstance(ev, Done):
            return replace(ev, stats=replace(ev.stats, phases=self.split))
        return ev

    def flush(self) -> TokensEmitted | None:
        """The text still held back (a cut tag that never completed), as a chunk of no tokens."""
        rest = self._parser.flush()
        if not rest.answer and not rest.reasoning:
            return None
        return TokensEmitted((), (), "", answer=rest.answer, reasoning=rest.reasoning)


def split_answer(events: Iterable[E], starts_in_reasoning: bool = False) -> Iterator[E | TokensEmitted]:
    """``events`` of one answer with their text split and their rounds filed (see the module docstring)."""
    tagger = PhaseTagger(starts_in_reasoning)
    for ev in events:
        if isinstance(ev, Done):
            rest = tagger.flush()
            if rest is not None:
                yield rest
        yield tagger.tag(ev)
