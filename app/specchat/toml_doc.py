"""TOML as SpecChat reads and writes it (config.toml, the user's catalog.toml): nesting bounded on
the way in, every string escaped on the way out, so that what it writes it reads back.

Reading: :mod:`tomllib` recurses once per level of an array or inline table and raises
:class:`RecursionError` near 1000 levels; a table header or dotted key nests without recursion
(``[a.a.a. ... .a]``, 5000 deep, parses), and the first walk or ``repr()`` over it recurses.
:func:`loads` refuses both past :data:`MAX_DEPTH` levels (the depth is measured without
recursion), and any other failure of the parser (an integer of more than 4300 digits is a
plain ``ValueError``) alike: every failure is a ``ValueError`` with one line, which each
caller words with the file's name.

Writing: :func:`value` and :func:`key` give TOML that :func:`loads` reads back as the same
value: a basic string escapes the quote, the backslash and every character that is not
printable (TOML forbids U+0000 to U+001F but tab, and U+007F, raw); a lone surrogate, which
no TOML file can hold, is a ``ValueError``.  Floats keep NaN and infinities (TOML spells them
``nan``, ``inf``); dates and times are written as :mod:`tomllib` gave them.

Qt-free and a leaf: it imports nothing of the app.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib

MAX_DEPTH = 64  # a settings file nests 1 level, the catalog 4 ([[pair]] target = { ... })


class TooDeep(ValueError):
    """The document nests deeper than :data:`MAX_DEPTH` (or deeper than Python can parse)."""


def loads(text: str, *, max_depth: int = MAX_DEPTH) -> dict[str, object]:
    """``tomllib.loads(text)``, nesting at most ``max_depth`` levels (the document itself is one);
    ValueError with one line for anything else (:class:`tomllib.TOMLDecodeError` among them)."""
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise TooDeep(f"nested deeper than {max_depth} levels") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:  # what the parser's conversions raise (an integer too long to read)
        raise ValueError(" ".join(str(exc).split())) from None
    if depth(doc, max_depth) > max_depth:
        raise TooDeep(f"nested deeper than {max_depth} levels")
    return doc


def depth(doc: object, limit: int = MAX_DEPTH) -> int:
    """How deep ``doc`` nests (a scalar: 0, a table or array: 1 more than its deepest part), counted
    up to ``limit + 1``, without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: list = list(node.values())
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


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def string(s: str) -> str:
    """``s`` as a TOML basic string; ValueError for a lone surrogate (no TOML file can hold one)."""
    out = []
    for c in s:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif c.isprintable():
            out.append(c)
        elif 0xD800 <= ord(c) <= 0xDFFF:
            raise ValueError(f"text with a lone surrogate (U+{ord(c):04X}) cannot be written to TOML")
        elif ord(c) <= 0xFFFF:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(f"\\U{ord(c):08X}")
    return '"' + "".join(out) + '"'


def key(k: str) -> str:
    """``k`` as a TOML key: bare where TOML allows it, else quoted."""
    return k if _BARE_KEY.fullmatch(k) else string(k)


def value(v: object) -> str:
    """``v`` as TOML reads it back: a bool, an int, a float (NaN and infinities included), text,
    a date or time as :mod:`tomllib` gives them, and arrays and tables of them (tables inline).
    ValueError for anything else, or nesting past :data:`MAX_DEPTH` (checked without recursion first)."""
    if depth(v) > MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    return _value(v)


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    raise ValueError(f"{type(v).__name__} cannot be written to TOML")
