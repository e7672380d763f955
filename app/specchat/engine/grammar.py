"""Structured output: a JSON schema or a GBNF grammar enforced by llama.cpp's grammar sampler.

The grammar sampler is kept apart from the target's sampler chain, as llama.cpp's own
``common_sampler`` does, because ``llama_sampler_sample`` with a grammar in the chain is
not safe: when the grammar allows no candidate every logit is -inf and the chain's
selection asserts; accepting an end-of-generation token the grammar does not allow hits
``GGML_ABORT`` in ``llama_grammar_accept_impl``, and accepting any other rejected piece
throws a C++ exception across the C API.  Each kills the process.  So here llama.cpp is
only ever asked to accept a token the grammar has just allowed (:meth:`Grammar.allows`
or :meth:`Grammar.mask`); a row where it allows nothing becomes one :class:`GrammarError`.

What reaches llama.cpp is bounded first, each bound measured on the vendored parser
(llama.cpp of llama-cpp-python 0.3.36) with the Qwen2.5 vocabulary (152k tokens):

- the parser recurses once per nested group: 5,000 nested ``(`` overflowed a 1 MiB thread
  stack and 30,000 the 8 MiB main stack (SIGSEGV); 1,000 fit in 512 KiB (macOS's
  secondary threads).  At most :data:`MAX_NESTING`.
- rule references recurse too (left-recursion check, stack expansion): a chain of 20,000
  rules overflowed 1 MiB and 4,090 overflowed 512 KiB; 3,000 fit in 512 KiB.  Rules, groups
  and repetitions together (an upper bound on every chain) at most :data:`MAX_RULES`.
- masking a row costs about (live alternatives) x (vocabulary): 11 ms for a small grammar,
  8.7 s for one rule of 20,000 alternatives.  At most :data:`MAX_ALTERNATIVES` ``|``.
- the text: no NUL (C would read a shorter grammar), valid UTF-8, at most
  :data:`MAX_GRAMMAR_BYTES` after a schema's conversion.

A JSON schema is converted by llama-cpp-python's own ``json_schema_to_gbnf`` (run under
the chat template's time and memory watch); counts that would make it build huge strings
in one C call (``minItems: 10**9``, ``a{10**9}``) and remote ``$ref`` are refused first.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import llama_cpp
import numpy as np

from .chat import MAX_RENDER_MEMORY, _Interrupt, _watched
from .runtime import init_backend
from .settings import MAX_STRUCTURED_BYTES, GrammarError, Structured, StructuredOutput

__all__ = ["Grammar", "GrammarError", "check_structured", "compile_structured", "parse_check", "schema_to_gbnf"]

MAX_NESTING = 256
MAX_RULES = 2048
MAX_ALTERNATIVES = 1024
MAX_GRAMMAR_BYTES = 1 << 20  # a converted schema is larger than the schema; parsing 1 MiB takes ~40 ms
# Counts in a schema (minItems, maxLength, a pattern's {m,n}) become that many copies of a
# rule; llama.cpp itself refuses repetitions over 2000, so nothing legitimate is lost.
MAX_SCHEMA_COUNT = 2000
CONVERT_SECONDS = 2.0  # real schemas convert in a few ms
_COUNT_KEYS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties",
               "minContains", "maxContains")
_QUANTIFIER = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


# -- the text: checks before llama.cpp sees it ---------------------------------------------------


def _check_text(text: str, name: str, limit: int) -> bytes:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise GrammarError(f"{name}: not valid UTF-8 text") from None
    if len(data) > limit:
        raise GrammarError(f"{name} is {len(data)} bytes (at most {limit >> 10} KiB): shorten it")
    if b"\0" in data:
        raise GrammarError(f"{name} contains a NUL character: remove it")
    if not data.strip():
        raise GrammarError(f"{name} is empty")
    return data


def _skip_quoted(text: str, i: int, close: str) -> int:
    """The index after the ``close`` that ends the literal or class opened before ``i``."""
    n = len(text)
    while i < n and text[i] != close:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _shape(text: str) -> tuple[int, int, int]:
    """(deepest group nesting, rules the parser will create at most, ``|`` count) of GBNF text,
    outside literals, character classes and comments."""
    depth = deepest = alternatives = 0
    rules = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _skip_quoted(text, i + 1, '"')
            continue
        if c == "[":
            i = _skip_quoted(text, i + 1, "]")
            continue
        if c == "#":
            while i < n and text[i] not in "\r\n":
                i += 1
            continue
        if c == "(":
            depth += 1
            rules += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "|":
            alternatives += 1
        elif c in "*+?":
            rules += 1
        elif c == ":" and text.startswith("::=", i):
            rules += 1
            i += 3
            continue
        elif c == "{":
            m = _QUANTIFIER.match(text, i)
            if m:
                low, high = int(m.group(1)), m.group(2)
                rules += max(low, int(high) if high else low, 1) if len(m.group(1)) < 9 and len(high or "") < 9 \
                    else MAX_RULES + 1
                i = m.end()
                continue
        i += 1
    return deepest, rules, alternatives


def check_gbnf(text: str, name: str = "the grammar", *, limit: int = MAX_STRUCTURED_BYTES) -> bytes:
    """The grammar as bytes for llama.cpp, or :class:`GrammarError` when a bound above is passed."""
    data = _check_text(text, name, limit)
    deepest, rules, alternatives = _shape(text)
    if deepest > MAX_NESTING:
        raise GrammarError(f"{name} nests groups {deepest} deep (at most {MAX_NESTING}): flatten it into rules")
    if rules > MAX_RULES:
        raise GrammarError(f"{name} makes more than {MAX_RULES} rules (repetitions count as copies): simplify it")
    if alternatives > MAX_ALTERNATIVES:
        raise GrammarError(f"{name} has {alternatives} alternatives (at most {MAX_ALTERNATIVES}): each one is "
                           "checked against the whole vocabulary for every token")
    return data


# -- JSON schema -> GBNF ---------------------------------------------------------------------------


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield str(key), value
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _check_schema_counts(schema: Any, name: str) -> None:
    """Refuse what would make the converter build a huge string in one step, and remote refs."""
    for key, value in _walk(schema):
        if key in _COUNT_KEYS and isinstance(value, int | float) and not isinstance(value, bool) \
                and not 0 <= value <= MAX_SCHEMA_COUNT:
            raise GrammarError(f"{name}: {key} {value} is out of range (0 to {MAX_SCHEMA_COUNT})")
        if key == "pattern" and isinstance(value, str):
            for m in _QUANTIFIER.finditer(value):
                if any(g and (len(g) > 6 or int(g) > MAX_SCHEMA_COUNT) for g in m.groups()):
                    raise GrammarError(f"{name}: the pattern repeats {m.group(0)} (at most {MAX_SCHEMA_COUNT})")
        if key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            raise GrammarError(f"{name}: only local references ('#/...') are followed, not {str(value)[:60]!r}")


def schema_to_gbnf(text: str, name: str = "the JSON schema") -> str:
    """GBNF for a JSON schema, by llama-cpp-python's converter; :class:`GrammarError` (one line)
    for text that is not JSON, a schema it does not support, or one past the bounds above."""
    _check_text(text, name, MAX_STRUCTURED_BYTES)
    try:
        schema = json.loads(text)
    except RecursionError:
        raise GrammarError(f"{name} nests too deeply") from None
    except ValueError as exc:
        raise GrammarError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise GrammarError(f"{name} must be a JSON object (a schema), not {type(schema).__name__}")
    _check_schema_counts(schema, name)
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    error: GrammarError | None = None
    try:
        gbnf: str = _watched(lambda: json_schema_to_gbnf(text), CONVERT_SECONDS, None)
    except _Interrupt as exc:
        error = GrammarError(f"{name}: converting it to a grammar " + (
            f"took over {CONVERT_SECONDS:g} s" if exc.reason == "timeout"
            else f"used over {MAX_RENDER_MEMORY >> 20} MiB") + ": simplify it")
    except RecursionError:
        error = GrammarError(f"{name} nests too deeply to convert")
    except Exception as exc:  # the converter asserts and raises KeyError/TypeError on schemas it does not support
        detail = str(exc).split("\n", 1)[0][:200] or type(exc).__name__
        error = GrammarError(f"{name} is not a schema llama.cpp can follow: {detail}")
    if error is not None:
        raise error
    return gbnf


def compile_structured(structured: StructuredOutput) -> str:
    """The GBNF text that enforces ``structured`` (a schema converted, a grammar as given)."""
    structured.validate()
    if structured.kind == Structured.JSON_SCHEMA:
        return schema_to_gbnf(structured.text, f"the {structured.label}")
    return structured.text


# -- llama.cpp's parser ----------------------------------------------------------------------------

_stderr_lock = threading.Lock()
_REASON = re.compile(r"error parsing grammar: (.*)")


def _parse(vocab: Any, data: bytes) -> tuple[Any, str]:
    """``llama_sampler_init_grammar`` (NULL on failure) and the parser's reason, which llama.cpp
    prints to stderr (not to its log): the file descriptor is lent to a temporary file for the
    call, under a lock so that two threads never swap it at once."""
    init_backend()
    with _stderr_lock, tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sampler = llama_cpp.llama_sampler_init_grammar(vocab, data, b"root")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        said = tmp.read(4096).decode("utf-8", errors="replace")
    m = _REASON.search(said)
    reason = m.group(1).strip() if m else ""
    if not reason and not sampler:
        reason = _logged_reason()
    return sampler, reason


def _logged_reason() -> str:
    """What llama.cpp's log said last about a grammar (a missing root, left recursion): those
    reasons go to its log, which the runtime keeps, not to stderr."""
    from . import runtime

    with runtime._log_lock:
        lines = list(runtime._last_log[-4:])
    for line in reversed(lines):
        if "grammar" in line and "failed to parse" not in line:
            return line.split(": ", 1)[-1].strip() if line.startswith("llama_") else line.strip()
    return ""


_AT = re.compile(r"^(.*?) at(?: (.*))?$", re.S)


def _parse_error(name: str, text: str, reason: str) -> GrammarError:
    """One line: llama.cpp's reason ("expecting ')' at <the rest of the grammar>" shortened to
    where it stopped) and how the grammar starts."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    why = reason
    m = _AT.match(reason) if reason.startswith("expecting") else None
    if m:
        rest = (m.group(2) or "").strip()
        why = m.group(1) + (f" at {rest[:40]!r}" if rest else " at the end")
    return GrammarError(f"{name} is not a valid GBNF grammar: {why or 'llama.cpp refused it'} "
                        f"(it starts {first[:60]!r})")


def parse_check(text: str, name: str = "the grammar") -> None:
    """Parse ``text`` with llama.cpp's own parser, without a model; :class:`GrammarError` if it fails.

    ``<token>`` references need a vocabulary: they are checked when an answer starts."""
    data = check_gbnf(text, name, limit=MAX_GRAMMAR_BYTES)
    sampler, reason = _parse(None, data)
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
        return
    if reason.startswith("no vocab to parse token"):
        return
    raise _parse_error(name, text, reason)


def check_structured(structured: StructuredOutput) -> None:
    """Raise :class:`GrammarError` (one line) unless ``structured`` can constrain an answer:
    the schema converts to a grammar and the grammar parses (llama.cpp's parser, no model).

    For a form's OK button and the command line: parsing only, no model or context, a few
    ms for real grammars; the bounds above keep the C parser's recursion small."""
    structured.validate()
    if structured.active:
        parse_check(compile_structured(structured), f"the {structured.label}")


# -- the grammar of one answer ---------------------------------------------------------------------


class Grammar:
    """A parsed grammar and its state for one answer, bound to the target's vocabulary.

    It advances only through :meth:`accept`, with tokens it has just allowed; a clone
    (:meth:`clone`) follows a draft and is thrown away after.
    """

    def __init__(self, handle: Any, vocab: Any, name: str, piece: Any) -> None:
        self._handle = handle
        self._vocab = vocab
        self.name = name
        self._piece = piece  # token -> bytes, for the text an error quotes
        self.text = b""
        self._one = np.zeros(1, dtype=TOKEN_DATA)
        self._one_c = llama_cpp.llama_token_data_array(
            self._one.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), 1, -1, False)

    @classmethod
    def build(cls, model: Any, structured: StructuredOutput) -> Grammar:
        """For ``model`` (a :class:`~specchat.engine.runtime.LoadedModel`); :class:`GrammarError`
        when the text is not a grammar llama.cpp can use with this vocabulary."""
        name = f"the {structured.label}"
        text = compile_structured(structured)
        data = check_gbnf(text, name, limit=MAX_GRAMMAR_BYTES)
        vocab = model.vocab
        handle, reason = _parse(vocab, data)
        if not handle:
            raise _parse_error(name, text, reason)
        return cls(handle, vocab, name, model.piece)

    def allows(self, token: int) -> bool:
        """Whether the grammar, in its state now, allows ``token`` next (one candidate checked)."""
        one = self._one
        one["id"][0], one["logit"][0] = token, 0.0
        c = self._one_c
        c.size, c.selected, c.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(c))
        return bool(one["logit"][0] != -np.inf)

    def mask(self, array: ctypes.Structure) -> None:
        """Set the logit of every candidate of ``array`` the grammar does not allow to -inf."""
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(array))

    def accept(self, token: int) -> None:
        """Advance over ``token``, which :meth:`allows` or :meth:`mask` has just allowed."""
        llama_cpp.llama_sampler_accept(self._handle, token)
        self.text = (self.text + self._piece(token))[-160:]  # the tail an error quotes

    def dead_end(self) -> GrammarError:
        """The error of a row where the grammar allows no token (one line, quoting where it stuck)."""
        if not self.text:
            return GrammarError(f"{self.name} allows no token of this model to start the answer: "
                                "it cannot be satisfied")
        tail = self.text.decode("utf-8", errors="replace")[-40:]
        return GrammarError(f"{self.name} allows no token after {tail!r}: it cannot be satisfied")

    def prefix(self, tokens: list[int]) -> list[int]:
        """The longest start of ``tokens`` the grammar allows from its state now (a clone follows
        them and is freed: this grammar's state is untouched)."""
        if not tokens:
            return tokens
        clone = Grammar(llama_cpp.llama_sampler_clone(self._handle), self._vocab, self.name, self._piece)
        try:
            for i, tok in enumerate(tokens):
                if not clone.allows(tok):
                    return tokens[:i]
                if i + 1 < len(tokens):
                    llama_cpp.llama_sampler_accept(clone._handle, tok)
            return tokens
        finally:
            clone.close()

    def close(self) -> None:
        if self._handle:
            llama_cpp.llama_sampler_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()
