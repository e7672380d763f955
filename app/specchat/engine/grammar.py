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

Cost that grows with the text (nullable or ambiguous repetitions: ``s ::= [a-z] s "b"? |
[a-z] s "c"? | ""`` doubles llama.cpp's parse stacks at every character; one accept then
runs for minutes and takes GBs, measured 60 s+ at 32 tokens with Qwen2.5-Coder 1.5B):

- :func:`check_structured` converts, parses and walks the grammar in a child process
  (:func:`_run_check`): at most :data:`CHECK_SECONDS` (killed after), :data:`CHECK_MEMORY`
  of address space over its start (``RLIMIT_AS``), killed when the caller cancels.  A good
  schema's check costs ~0.25-0.4 s, nearly all interpreter start and imports (measured with
  ``time`` on the bench schemas and a 30-line schema on 2 shared cores).  :meth:`Grammar.build`
  runs the same check, so a grammar reaches an answer only through it.
- the walk (:func:`_walk_stacks`): up to :data:`WALK_STEPS` characters, each step taking the
  character of :data:`_WALK_CHARS` that leaves the most stacks; past :data:`MAX_STACKS` the
  grammar is refused in one line.  Real schemas keep 3-14 stacks; 80 optional properties 156.
- in an answer, every mask and accept is timed and the stacks counted after it: past
  :data:`MAX_ANSWER_STACKS` or :data:`MAX_TOKEN_SECONDS` the answer ends with one
  ``GrammarError`` ("grew too costly at token N"), the text so far kept.  The count is read
  through exported internals (:class:`_Internals`); where a build lacks them only time bounds
  apply, and a grammar that grows only on a path the walk did not take can still make one
  call slow (not a proven bound: see the tests' hostile family).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import llama_cpp
import numpy as np

from specchat.errors import exit_description

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

# The pre-flight check runs in a child process under these limits (see check_structured).
CHECK_SECONDS = 5.0
CHECK_MEMORY = 512 << 20  # address space the child may add after its imports
# llama.cpp keeps one pushdown stack per way the text so far can be parsed; masking a row costs
# (stacks) x (vocabulary) and one accepted character can multiply the stacks.  Real schemas keep
# a handful (3-4 for the bench's schemas; an object of n optional properties about 2n: 156 for
# 80, measured by the walk below); the walk refuses a grammar past
# MAX_STACKS, and an answer ends when its grammar passes MAX_ANSWER_STACKS.
MAX_STACKS = 256
MAX_ANSWER_STACKS = 1024
WALK_STEPS = 64
# one mask or accept taking longer than this ends the answer (11 ms measured for a real schema)
MAX_TOKEN_SECONDS = 1.0
_WALK_CHARS = tuple(range(32, 127)) + (9, 10, 0xE9, 0x4E2D)

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


# -- llama.cpp's parse stacks: counted, and walked in the check --------------------------------------


class _Internals:
    """llama.cpp's grammar internals the public API does not expose, where this build has them:
    ``llama_grammar_{accept,clone_impl,free_impl,get_stacks}`` (exported C++ symbols of libllama,
    Itanium ABI) and the grammar pointer inside the grammar sampler's context
    (``struct llama_sampler_grammar {vocab; std::string grammar_str, grammar_root; grammar}``,
    libstdc++'s 32-byte strings).  The layout is confirmed on each sampler before it is read
    (the string at offset 8 must be the grammar's own text); where anything differs the stack
    count is unknown (None) and only the time bounds apply."""

    def __init__(self) -> None:
        lib = llama_cpp.llama_cpp._lib
        vp = ctypes.c_void_p
        try:
            self.accept = lib._Z20llama_grammar_acceptP13llama_grammarj
            self.clone = lib._Z24llama_grammar_clone_implRK13llama_grammar
            self.free = lib._Z23llama_grammar_free_implP13llama_grammar
            self.stacks = lib._Z24llama_grammar_get_stacksP13llama_grammar
        except AttributeError:
            self.ok = False
            return
        self.accept.argtypes, self.accept.restype = [vp, ctypes.c_uint32], None
        self.clone.argtypes, self.clone.restype = [vp], vp
        self.free.argtypes, self.free.restype = [vp], None
        self.stacks.argtypes, self.stacks.restype = [vp], ctypes.POINTER(ctypes.c_uint64)
        self.ok = sys.byteorder == "little" and ctypes.sizeof(vp) == 8

    def grammar_of(self, sampler: Any, data: bytes) -> int | None:
        """The ``llama_grammar *`` of a grammar sampler built from ``data``, or None."""
        if not self.ok or not sampler:
            return None
        words = ctypes.cast(sampler, ctypes.POINTER(ctypes.c_void_p))
        ctx = words[1]
        if not ctx:
            return None
        q = ctypes.cast(ctx, ctypes.POINTER(ctypes.c_uint64))
        text_ptr, text_len = q[1], q[2]
        if text_len != len(data) or not text_ptr or ctypes.string_at(text_ptr, min(text_len, 64)) != data[:64]:
            return None
        return int(q[9]) or None

    def count(self, grammar: int) -> int:
        """How many parse stacks ``grammar`` holds (its ``std::vector<std::vector<...>>``: 24 bytes each)."""
        vec = self.stacks(grammar)
        return int((vec[1] - vec[0]) // 24)


_internals: _Internals | None = None
_internals_lock = threading.Lock()


def _get_internals() -> _Internals:
    global _internals
    with _internals_lock:
        if _internals is None:
            _internals = _Internals()
        return _internals


def _walk_stacks(sampler: Any, data: bytes) -> int:
    """The most parse stacks a hostile text makes the grammar keep: from the start, WALK_STEPS times,
    each character of :data:`_WALK_CHARS` is tried on a clone and the one that leaves the most
    stacks is taken (stopping past :data:`MAX_STACKS`, or when no character fits).  -1 when this
    build does not expose the stacks."""
    api = _get_internals()
    grammar = api.grammar_of(sampler, data)
    if grammar is None:
        return -1
    state = api.clone(grammar)
    most = api.count(state)
    try:
        for _ in range(WALK_STEPS):
            best, best_n = None, 0
            for ch in _WALK_CHARS:
                trial = api.clone(state)
                api.accept(trial, ch)
                n = api.count(trial)
                if n > best_n:
                    if best is not None:
                        api.free(best)
                    best, best_n = trial, n
                else:
                    api.free(trial)
                if best_n > MAX_STACKS:
                    break
            if best is None:
                break
            api.free(state)
            state, most = best, max(most, best_n)
            if most > MAX_STACKS:
                break
    finally:
        api.free(state)
    return most


def _too_many_stacks(name: str, n: int, where: str) -> GrammarError:
    return GrammarError(f"{name} is too costly: {where} it keeps {n} parse stacks (at most {MAX_STACKS}), "
                        "each checked against the whole vocabulary for every token; simplify its "
                        "repetitions (optional items inside repetitions)")


def _check_in_child(kind: str, text: str, name: str) -> str:
    """Run in the check's child process: convert, bound, parse and walk; the GBNF text to use."""
    gbnf = schema_to_gbnf(text, name) if kind == Structured.JSON_SCHEMA else text
    data = check_gbnf(gbnf, name, limit=MAX_GRAMMAR_BYTES)
    sampler, reason = _parse(None, data)
    if not sampler:
        if reason.startswith("no vocab to parse token"):
            return gbnf
        raise _parse_error(name, gbnf, reason)
    try:
        most = _walk_stacks(sampler, data)
    finally:
        llama_cpp.llama_sampler_free(sampler)
    if most > MAX_STACKS:
        raise _too_many_stacks(name, most, f"after {WALK_STEPS} characters or fewer")
    return gbnf


def _child_main() -> None:
    """The check's child: a request as JSON on stdin, the answer as JSON on stdout."""
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * resource.getpagesize()
    except OSError:
        size = 0
    if size:  # the limit applies to what the check adds, not to the interpreter and libraries
        resource.setrlimit(resource.RLIMIT_AS, (size + CHECK_MEMORY, size + CHECK_MEMORY))
    try:
        answer = {"gbnf": _check_in_child(request["kind"], request["text"], request["name"])}
    except GrammarError as exc:
        answer = {"error": str(exc)}
    except MemoryError:
        answer = {"limit": "memory"}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()


_CHILD_CODE = "from specchat.engine.grammar import _child_main; _child_main()"


# Texts that passed the check, with their GBNF: the check is a function of the text alone, so a
# chat's schema pays the child process once per run of the app, not once per answer.
_PASSED: dict[tuple[str, str], str] = {}
_PASSED_MAX = 64
_PASSED_LOCK = threading.Lock()


def _run_check(kind: str, text: str, name: str, cancelled: Any = None) -> str:
    """:func:`_check_in_child` in a child process, killed past :data:`CHECK_SECONDS` or when
    ``cancelled()`` (polled every 20 ms) turns true; the GBNF text, or one-line :class:`GrammarError`.
    A text that passed before is answered from :data:`_PASSED`."""
    key = (str(getattr(kind, "value", kind)), text)
    with _PASSED_LOCK:
        if key in _PASSED:
            return _PASSED[key]
    gbnf = _check_in_child_process(kind, text, name, cancelled)
    with _PASSED_LOCK:
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.pop(next(iter(_PASSED)))
        _PASSED[key] = gbnf
    return gbnf


def _check_in_child_process(kind: str, text: str, name: str, cancelled: Any) -> str:
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    request = json.dumps({"kind": str(kind.value if isinstance(kind, Structured) else kind),
                          "text": text, "name": name}).encode("utf-8")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as inp:
        inp.write(request)
        inp.seek(0)
        child = subprocess.Popen([sys.executable, "-c", _CHILD_CODE], stdin=inp, stdout=out,
                                 stderr=subprocess.DEVNULL, env=env, close_fds=True)
        deadline = time.monotonic() + CHECK_SECONDS
        try:
            while child.poll() is None:
                if cancelled is not None and cancelled():
                    raise GrammarError(f"the check of {name} was cancelled")
                if time.monotonic() > deadline:
                    raise GrammarError(f"{name} is too costly: its check took over {CHECK_SECONDS:g} s; "
                                       "simplify its repetitions")
                time.sleep(0.02 if time.monotonic() - deadline + CHECK_SECONDS > 0.1 else 0.002)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        out.seek(0)
        said = out.read(MAX_GRAMMAR_BYTES * 8).decode("utf-8", errors="replace")
    try:
        answer = json.loads(said) if said else {}
    except ValueError:
        answer = {}
    if "gbnf" in answer:
        return str(answer["gbnf"])
    if "error" in answer:
        raise GrammarError(str(answer["error"]))
    if answer.get("limit") == "memory" or child.returncode in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL):
        raise GrammarError(f"{name} is too costly: its check used over {CHECK_MEMORY >> 20} MiB; "
                           "simplify its repetitions")
    raise GrammarError(f"the check of {name} failed (its process {exit_description(child.returncode)})")


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


def check_structured(structured: StructuredOutput, cancelled: Any = None) -> None:
    """Raise :class:`GrammarError` (one line) unless ``structured`` can constrain an answer:
    the schema converts to a grammar, the grammar parses (llama.cpp's parser, no model) and a
    hostile walk keeps its parse stacks under :data:`MAX_STACKS`.

    For a form's OK button and the command line.  It runs in a child process bounded by
    :data:`CHECK_SECONDS` and :data:`CHECK_MEMORY`, killed when ``cancelled()`` turns true
    (polled every 20 ms); one line names the limit a costly grammar passed."""
    structured.validate()
    if structured.active:
        _run_check(structured.kind, structured.text, f"the {structured.label}", cancelled)


# -- the grammar of one answer ---------------------------------------------------------------------


class Grammar:
    """A parsed grammar and its state for one answer, bound to the target's vocabulary.

    It advances only through :meth:`accept`, with tokens it has just allowed; a clone
    (:meth:`clone`) follows a draft and is thrown away after.
    """

    def __init__(self, handle: Any, vocab: Any, name: str, piece: Any, data: bytes = b"") -> None:
        self._handle = handle
        self._vocab = vocab
        self.name = name
        self._piece = piece  # token -> bytes, for the text an error quotes
        self._data = data
        self._api = _get_internals()
        self._state = self._api.grammar_of(handle, data) if data else None  # None: stacks not countable
        self.text = b""
        self.accepted = 0  # tokens accepted: the N of "grew too costly at token N"
        self._one = np.zeros(1, dtype=TOKEN_DATA)
        self._one_c = llama_cpp.llama_token_data_array(
            self._one.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), 1, -1, False)

    @classmethod
    def build(cls, model: Any, structured: StructuredOutput, cancelled: Any = None) -> Grammar:
        """For ``model`` (a :class:`~specchat.engine.runtime.LoadedModel`); :class:`GrammarError`
        when the text is not a grammar llama.cpp can use with this vocabulary.  ``cancelled()``
        (the answer's stop) ends the check at once."""
        name = f"the {structured.label}"
        structured.validate()
        text = _run_check(structured.kind, structured.text, name, cancelled)  # converted and walked, bounded
        data = check_gbnf(text, name, limit=MAX_GRAMMAR_BYTES)
        vocab = model.vocab
        handle, reason = _parse(vocab, data)
        if not handle:
            raise _parse_error(name, text, reason)
        return cls(handle, vocab, name, model.piece, data)

    def allows(self, token: int) -> bool:
        """Whether the grammar, in its state now, allows ``token`` next (one candidate checked)."""
        one = self._one
        one["id"][0], one["logit"][0] = token, 0.0
        c = self._one_c
        c.size, c.selected, c.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(c))
        return bool(one["logit"][0] != -np.inf)

    def mask(self, array: ctypes.Structure) -> None:
        """Set the logit of every candidate of ``array`` the grammar does not allow to -inf;
        :class:`GrammarError` when that took over :data:`MAX_TOKEN_SECONDS`."""
        t0 = time.perf_counter()
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(array))
        self._bound(time.perf_counter() - t0)

    def accept(self, token: int) -> None:
        """Advance over ``token``, which :meth:`allows` or :meth:`mask` has just allowed;
        :class:`GrammarError` when the grammar has grown past its bounds (its parse stacks over
        :data:`MAX_ANSWER_STACKS`, or the call over :data:`MAX_TOKEN_SECONDS`)."""
        t0 = time.perf_counter()
        llama_cpp.llama_sampler_accept(self._handle, token)
        self.accepted += 1
        self.text = (self.text + self._piece(token))[-160:]  # the tail an error quotes
        self._bound(time.perf_counter() - t0)

    def stacks(self) -> int | None:
        """How many parse stacks the grammar holds now (None where this build does not say)."""
        return None if self._state is None else self._api.count(self._state)

    def _bound(self, seconds: float) -> None:
        n = self.stacks()
        if n is not None and n > MAX_ANSWER_STACKS:
            raise GrammarError(f"{self.name} grew too costly at token {self.accepted}: {n} parse stacks "
                               f"(at most {MAX_ANSWER_STACKS}); the answer ends here: simplify its repetitions")
        if seconds > MAX_TOKEN_SECONDS:
            raise GrammarError(f"{self.name} grew too costly at token {self.accepted}: one step took "
                               f"{seconds:.1f} s (at most {MAX_TOKEN_SECONDS:g} s); the answer ends here: "
                               "simplify its repetitions")

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
        clone = Grammar(llama_cpp.llama_sampler_clone(self._handle), self._vocab, self.name, self._piece, self._data)
        try:
            for i, tok in enumerate(tokens):
                if not clone.allows(tok):
                    return tokens[:i]
                if i + 1 < len(tokens):
                    llama_cpp.llama_sampler_accept(clone._handle, tok)
                    n = clone.stacks()
                    if n is not None and n > MAX_ANSWER_STACKS:  # the answer's own accept ends it, if it gets there
                        return tokens[:i + 1]
            return tokens
        finally:
            clone.close()

    def close(self) -> None:
        if self._handle:
            llama_cpp.llama_sampler_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()
