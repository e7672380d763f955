"""Separate ``<think>...</think>`` reasoning from the answer in a token stream.

Text arrives in arbitrary pieces, so a tag can be split across pieces; the
parser holds back only the few characters that could still become a tag.
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str
    answer: str


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ReasoningParser:
    """Feed text pieces; get back what is reasoning and what is answer.

    ``started_in_reasoning`` is for templates that open the think block in the
    prompt itself (the model's output then starts inside it).
    """

    def __init__(self, started_in_reasoning: bool = False) -> None:
        self.in_reasoning = started_in_reasoning
        self._pending = ""
        self._seen_open = started_in_reasoning

    def feed(self, piece: str) -> Split:
        text = self._pending + piece
        self._pending = ""
        reasoning: list[str] = []
        answer: list[str] = []
        while text:
            tag = CLOSE_TAG if self.in_reasoning else OPEN_TAG
            at = text.find(tag)
            if at >= 0 and (self.in_reasoning or not self._seen_open):
                (reasoning if self.in_reasoning else answer).append(text[:at])
                text = text[at + len(tag) :]
                self.in_reasoning = not self.in_reasoning
                self._seen_open = True
                continue
            if not self.in_reasoning and self._seen_open:
                # one think block per answer: everything after it is answer
                answer.append(text)
                break
            keep = _partial_tag_len(text, tag)
            body, self._pending = (text[:-keep], text[-keep:]) if keep else (text, "")
            (reasoning if self.in_reasoning else answer).append(body)
            break
        return Split("".join(reasoning), "".join(answer))

    def flush(self) -> Split:
        text, self._pending = self._pending, ""
        return Split(text, "") if self.in_reasoning else Split("", text)


def split_reasoning(text: str) -> Split:
    """Split a complete answer (used when re-rendering stored messages)."""
    parser = ReasoningParser()
    a, b = parser.feed(text), parser.flush()
    return Split(a.reasoning + b.reasoning, a.answer + b.answer)
