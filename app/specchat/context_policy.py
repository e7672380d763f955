"""What a chat sends when it has outgrown the context: the policies and the fit.

A Qt-free leaf (it imports nothing of SpecChat's): the store keeps a chat's
:class:`ContextPolicy`, the Chat settings dialog lists :data:`POLICIES`, and the local
backend calls :func:`fit_messages` with its chat template and tokenizer.  Nothing is
ever deleted: a policy only changes which of the chat's messages are sent.

- ``stop``: everything is sent; a prompt that does not fit is an error (as before).
- ``truncate_middle``: the system prompt and the first exchange (the first user message
  and its answer) are kept; the oldest turns after them are left out until it fits.
- ``rolling_window``: the system prompt is kept; the oldest turns are left out.

A turn is a user message and what answers it, left out whole (templates that insist on
alternating roles keep rendering).  The turn being answered is always sent.  The prompt
fits when its tokens leave :func:`reserve` tokens for the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

Message = dict[str, str]
P = TypeVar("P")


SETTING = "Past the context"  # the chat setting's name (Chat settings), as error lines name it
STOP_LABEL = "Stop at the limit"


class ContextPolicy(StrEnum):
    STOP = "stop"
    TRUNCATE_MIDDLE = "truncate_middle"
    ROLLING_WINDOW = "rolling_window"


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    policy: ContextPolicy
    label: str  # what the Chat settings dialog shows
    help: str  # one line: what it keeps


POLICIES: tuple[PolicyInfo, ...] = (
    PolicyInfo(ContextPolicy.STOP, STOP_LABEL, "send the whole chat; stop when it no longer fits"),
    PolicyInfo(ContextPolicy.TRUNCATE_MIDDLE, "Truncate middle",
               "keep the system prompt and the first exchange, leave out the oldest turns after them"),
    PolicyInfo(ContextPolicy.ROLLING_WINDOW, "Rolling window", "keep the system prompt, leave out the oldest turns"),
)
POLICY_NAMES: tuple[str, ...] = tuple(p.value for p in ContextPolicy)
POLICIES_HELP = "; ".join(f"{p.policy.value}: {p.help}" for p in POLICIES)


def label(policy: ContextPolicy | str) -> str:
    """The policy's name as Chat settings shows it ("Rolling window")."""
    return next(p.label for p in POLICIES if p.policy is ContextPolicy(policy))


def reserve(n_ctx: int, max_tokens: int) -> int:
    """Tokens kept free for the answer: ``max_tokens``, but at most half the context (a
    larger ``max_tokens`` would leave no room for the chat at all)."""
    return max(0, min(max_tokens, n_ctx // 2))


@dataclass(frozen=True, slots=True)
class Fitted(Generic[P]):
    prompt: P  # the rendered prompt of what is sent
    messages: tuple[Message, ...]  # what is sent
    left_out: int  # messages of the chat not sent
    left_out_at: int = 0  # the index in ``messages`` of the first one not sent (those not sent are contiguous)


def fit_messages(messages: Sequence[Message], policy: ContextPolicy | str, budget: int,
                 render: Callable[[list[Message]], P], length: Callable[[P], int]) -> Fitted[P]:
    """The messages to send under ``policy`` and their rendered prompt.

    ``render`` turns messages into a prompt (the chat template and the tokenizer), ``length``
    counts its tokens; it fits when ``length <= budget``.  The fewest oldest turns are left
    out, found by bisection: at most ``2 + log2(turns)`` renders, one when all fits.  When
    even the fewest messages the policy allows do not fit, those are what is sent (the
    engine then says the prompt is too long, or the answer stops at the context's end).
    """
    policy = ContextPolicy(policy)
    msgs = list(messages)
    head, droppable, last = _split(msgs, keep_first_turn=policy is ContextPolicy.TRUNCATE_MIDDLE)
    if policy is ContextPolicy.STOP or not droppable:
        return Fitted(render(msgs), tuple(msgs), 0)

    rendered: dict[int, P] = {}

    def attempt(d: int) -> P:  # the prompt with the oldest d droppable turns left out
        if d not in rendered:
            rendered[d] = render(head + [m for turn in droppable[d:] for m in turn] + last)
        return rendered[d]

    def fits(d: int) -> bool:
        return length(attempt(d)) <= budget

    n = len(droppable)
    if fits(0):
        d = 0
    elif not fits(n):
        d = n
    else:  # fits(n) and not fits(0): the smallest d that fits lies in (0, n]
        lo, hi = 0, n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid
        d = hi
    sent = head + [m for turn in droppable[d:] for m in turn] + last
    return Fitted(attempt(d), tuple(sent), sum(len(turn) for turn in droppable[:d]), len(head) if d else 0)


def _split(msgs: list[Message], *, keep_first_turn: bool) -> tuple[list[Message], list[list[Message]], list[Message]]:
    """(what is always kept at the start, the turns that may be left out, the turn being answered)."""
    i = 0
    while i < len(msgs) and msgs[i].get("role") == "system":
        i += 1
    head, rest = msgs[:i], msgs[i:]
    turns: list[list[Message]] = []
    for m in rest:
        if m.get("role") == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    if not turns:
        return head, [], []
    last = turns.pop()
    if keep_first_turn and turns:
        head = head + turns.pop(0)
    return head, turns, last
