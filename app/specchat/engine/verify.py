"""Verification: which drafted tokens does the target accept?

Sample-and-match is lossless at every temperature: at each position the target
samples its own token from its own distribution (given the accepted prefix);
the drafted token is accepted only if it equals that sample.  So every emitted
token is a sample from the target, and at temperature 0 every token is the
target's argmax.  The last sampled token (a correction, or the bonus after a
fully accepted draft) is the target's own and costs no extra decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def sample_and_match(
    sample: Callable[[int], int],
    drafted: Sequence[int],
    *,
    limit: int,
    is_end: Callable[[int], bool],
) -> list[int]:
    """Return the tokens to emit: accepted drafts, then the target's own token.

    ``sample(i)`` samples row i of the verify batch ``[last, d1..dK]``.  At most
    ``limit`` tokens are sampled, and sampling stops after a token for which
    ``is_end`` holds (end of generation), so nothing is sampled past the end.
    """
    out: list[int] = []
    for i in range(len(drafted) + 1):
        if len(out) >= limit:
            break
        tok = sample(i)
        out.append(tok)
        if is_end(tok) or i == len(drafted) or tok != drafted[i]:
            break
    return out


def accepted_count(drafted: Sequence[int], emitted: Sequence[int]) -> int:
    """How many drafted tokens ``emitted`` starts with."""
    n = 0
    for d, e in zip(drafted, emitted, strict=False):
        if d != e:
            break
        n += 1
    return n
