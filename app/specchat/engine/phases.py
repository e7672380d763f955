"""Which rounds ran inside the reasoning block, and which after it.

Reasoning lowers acceptance (the draft guesses a model's thinking worse than its
answer), so telemetry shows the two phases apart.  The engine's rounds know nothing of
``<think>`` tags; this follows the same text the chat view parses
(:class:`~.reasoning.ReasoningParser`) and files each :class:`~.events.RoundStats` under
the phase most of its text went to: a round's ``TokensEmitted`` chunks come just before
its ``RoundStats``.  A round whose text is all tag (``</think>`` alone) keeps the phase
it started in.  ``Done`` gets the two phases' counts (:class:`~specchat.metrics.PhaseSplit`).

Works on any event stream (local engine or a server's), one answer per tagger.
"""

from __future__ import annotations

from dataclasses import replace

from specchat.metrics import ANSWER, REASONING, PhaseSplit

from .events import Done, Event, RoundStats, TokensEmitted
from .reasoning import ReasoningParser


class PhaseTagger:
    def __init__(self, starts_in_reasoning: bool = False) -> None:
        self._parser = ReasoningParser(starts_in_reasoning)
        self._chars = {REASONING: 0, ANSWER: 0}  # of the text since the last round ended
        self._started_in = self._phase_now()
        self.split = PhaseSplit()

    def _phase_now(self) -> str:
        return REASONING if self._parser.in_reasoning else ANSWER

    def tag(self, ev: Event) -> Event:
        """``ev``, with its phase (a round) or the answer's split (its end) filled in."""
        if isinstance(ev, TokensEmitted):
            if ev.text:
                piece = self._parser.feed(ev.text)
                self._chars[REASONING] += len(piece.reasoning)
                self._chars[ANSWER] += len(piece.answer)
            return ev
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
