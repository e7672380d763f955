"""The one JSON parser for documents from outside (servers, the hub) and for the JSON SpecChat
stores itself (a chat's settings, an answer's statistics): nesting bounded.

``json.loads`` recurses once per level and raises :class:`RecursionError` near 1000 levels;
a document just under that parses, then breaks the first ``repr()`` or walk that recurses
over it.  :func:`loads` refuses both with :class:`TooDeep` (a ``ValueError``, so every
caller's "not JSON" path words it as one line); the depth is measured without recursion.
"""

from __future__ import annotations

import json

MAX_DEPTH = 64  # the deepest real answer (a JSON schema in /props, vLLM's metrics) is under 10 levels


class TooDeep(ValueError):
    """The document nests deeper than :data:`MAX_DEPTH` (or deeper than Python can parse)."""


def loads(data: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> object:
    """``json.loads(data)``, or :class:`TooDeep` past ``max_depth`` levels (ValueError for bad JSON)."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels") from None
    if depth(doc, max_depth) > max_depth:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    return doc


def depth(doc: object, limit: int = MAX_DEPTH) -> int:
    """How deep ``doc`` nests (a scalar: 0), counted up to ``limit + 1``, without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: list | tuple = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        stack.extend((c, level) for c in children if isinstance(c, dict | list))
    return deepest
