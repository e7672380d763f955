"""Chat formatting with the GGUF's own chat template, bounded in time, size and memory.

A chat template is code from the model file: Jinja, compiled to Python.  It runs in
llama-cpp-python's sandbox (the same ``ImmutableSandboxedEnvironment``, extensions,
``tojson`` and variables as its ``Jinja2ChatFormatter``), so it cannot reach Python's
internals; what the sandbox does not bound is how long it runs, how much it writes and
how much memory it builds.  Here every compile and render:

- runs under a tracer installed in the rendering thread for that call only; Jinja's
  compiled code fires line events inside its loops, so the tracer stops a render when
  its deadline (:data:`RENDER_SECONDS`) passes, when the caller cancels (the app
  closing, a stopped answer) or when the process grew by :data:`MAX_RENDER_MEMORY`;
- streams the output through the template's ``generate()`` and stops at
  :data:`MAX_PROMPT_CHARS` characters;
- refuses, before computing them, the single operations that build a huge value in one
  C call the tracer cannot interrupt: ``'x' * 10**9``, ``2 ** 10**9``, ``'%999999999s'``,
  ``center(10**9)``, ``join``/``replace``/``indent`` with a huge result.

Every failure is one :class:`TemplateError` naming the model file.  No exception that
leaves here keeps the template's frames (they would keep the caller's model alive).

The rendered prompt already holds any BOS the template wants, so it is tokenized once,
with the target, without adding special tokens again (the same rule llama-cpp-python's
chat handlers follow).
"""

from __future__ import annotations

import functools
import re
import string
import sys
import time
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from types import FrameType
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.runtime
import psutil
from jinja2.sandbox import ImmutableSandboxedEnvironment
from llama_cpp.llama_chat_format import CHATML_CHAT_TEMPLATE, Jinja2ChatFormatter

from .reasoning import OPEN_TAG
from .runtime import LlamaError, LoadCancelled, LoadedModel

# A template runs before every answer; real ones render in under 10 ms, so 2 s is a
# template that loops, not a slow machine.  Compiling gets the same bound.
RENDER_SECONDS = 2.0
# The output cap: no context holds more (4 Mi characters is about a million tokens).
MAX_PROMPT_CHARS = 4 << 20
# The largest template compiled: real ones are under 40 KB (the biggest tool-calling
# templates measured ~15 KB), and compiling megabytes of Jinja takes seconds.
MAX_TEMPLATE_CHARS = 1 << 20
# Growth of the process while a template runs, checked every few ms: values built by
# concatenation in a loop never pass the guards one by one, so this catches doubling.
MAX_RENDER_MEMORY = 512 << 20
_MEMORY_CHECK_S = 0.002  # reading RSS costs ~20 µs: at most every 2 ms
# Integers a template may build with * and **: far beyond any count or id it needs, and
# small enough that one multiplication is instant (a 10**9-bit power takes minutes in C).
MAX_INT_BITS = 4096

Cancelled = Callable[[], bool]


class TemplateError(LlamaError):
    """The model's chat template failed; the message names the file and the problem."""


class TemplateCancelled(TemplateError):
    """The caller cancelled while the template rendered (a stop, the app closing)."""


class _Interrupt(BaseException):
    """Raised by the tracer inside the template's code.

    A BaseException so that no ``except Exception`` in Jinja's runtime swallows it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Refused(Exception):
    """A guard refused one operation before computing it (the message says which)."""


class _TemplateRaised(Exception):
    """The template called ``raise_exception(message)``."""


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    text: str
    tokens: list[int]
    starts_in_reasoning: bool  # the template opened a <think> block for the model


# -- the watch: time, cancel and memory, checked on every line the template runs -------------

_process: psutil.Process | None = None


def _rss() -> int:
    global _process
    if _process is None:
        _process = psutil.Process()
    return int(_process.memory_info().rss)


class _Watch:
    """The trace function (global and local): raises :class:`_Interrupt` in the traced code."""

    def __init__(self, seconds: float, cancelled: Cancelled | None) -> None:
        self.deadline = time.monotonic() + seconds
        self.cancelled = cancelled
        self.rss0 = _rss()
        self.next_memory_check = 0.0

    def __call__(self, frame: FrameType, event: str, arg: object) -> _Watch:
        now = time.monotonic()
        if self.cancelled is not None and self.cancelled():
            raise _Interrupt("cancelled")
        if now > self.deadline:
            raise _Interrupt("timeout")
        if now >= self.next_memory_check:
            self.next_memory_check = now + _MEMORY_CHECK_S
            if _rss() - self.rss0 > MAX_RENDER_MEMORY:
                raise _Interrupt("memory")
        return self


def _watched(produce: Callable[[], Any], seconds: float, cancelled: Cancelled | None) -> Any:
    """``produce()`` with the watch installed in this thread for its duration only.

    This frame itself is not traced (it was running when the tracer was set), so the
    restore in ``finally`` cannot be interrupted.  A trace function that raises is
    removed by Python, so an interrupted template unwinds untraced.
    """
    watch = _Watch(seconds, cancelled)
    previous = sys.gettrace()
    sys.settrace(watch)
    try:
        return produce()
    finally:
        sys.settrace(previous)


# -- the guards: single operations that would build a huge value in one C call --------------

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\d+|\*)?(?:\.(\d+|\*))?")


def _too_big(n: int) -> bool:
    return abs(n) > MAX_PROMPT_CHARS


def _check_numbers(args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and _too_big(value):
            raise _Refused(f"{what} was given {value} (at most {MAX_PROMPT_CHARS})")


def _check_size(value: Any, what: str) -> Any:
    if isinstance(value, str | list | tuple | dict) and len(value) > MAX_PROMPT_CHARS:
        raise _Refused(f"{what} made {len(value)} items or characters (at most {MAX_PROMPT_CHARS})")
    return value


def _check_percent(fmt: str, args: Any) -> None:
    """``fmt % args`` would pad to no more than the cap."""
    values = args if isinstance(args, tuple) else (args,)
    for width, precision in _PERCENT_SPEC.findall(fmt):
        for n in (width, precision):
            if n.isdigit() and _too_big(int(n)):
                raise _Refused(f"the format {fmt[:40]!r} pads to {n} characters (at most {MAX_PROMPT_CHARS})")
            if n == "*":
                _check_numbers(values, {}, "a '*' width")


def _check_str_format(fmt: str) -> None:
    """``fmt.format(...)`` would pad to no more than the cap (nested ``{}`` widths are
    arguments, which :meth:`_GuardedEnvironment.call` checks)."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _literal, _name, spec, _conversion in fields:
        for n in re.findall(r"\d+", spec or ""):
            if _too_big(int(n)):
                raise _Refused(f"the format {fmt[:40]!r} pads to {n} characters (at most {MAX_PROMPT_CHARS})")


def _total_length(items: Any) -> int:
    if not isinstance(items, list | tuple):
        return 0
    return sum(len(x) for x in items if isinstance(x, Sized))


def _check_join(items: Any, separator: Any) -> None:
    count = len(items) if isinstance(items, list | tuple) else 0
    sep = len(separator) if isinstance(separator, str) else 0
    if _total_length(items) + sep * count > MAX_PROMPT_CHARS:
        raise _Refused(f"join would make more than {MAX_PROMPT_CHARS} characters")


def _check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        if len(text) + hits * len(new) > MAX_PROMPT_CHARS:
            raise _Refused(f"replace would make more than {MAX_PROMPT_CHARS} characters")


def _check_amplifier(name: str, value: Any, args: tuple[Any, ...]) -> None:
    """Filters whose result can be far larger than their inputs and their numbers: a join
    of many long strings, a replace of ``''``, an indent by a long string, a % format."""
    if name == "join":
        _check_join(value, args[0] if args else "")
    elif name == "replace" and len(args) >= 2:
        _check_replace(value, args[0], args[1])
    elif name == "indent" and isinstance(value, str) and args and isinstance(args[0], str) \
            and (value.count("\n") + 1) * len(args[0]) > MAX_PROMPT_CHARS:
        raise _Refused(f"indent would make more than {MAX_PROMPT_CHARS} characters")
    elif name == "format" and isinstance(value, str):
        _check_percent(value, args)


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)  # keeps jinja_pass_arg: Jinja still passes context/environment first
    def guarded(*args: Any, **kwargs: Any) -> Any:
        plain = [a for a in args if not isinstance(a, jinja2.runtime.Context | jinja2.nodes.EvalContext
                                                   | jinja2.Environment)]
        _check_numbers(tuple(plain), kwargs, f"the filter {name}")
        if plain:
            _check_amplifier(name, plain[0], tuple(plain[1:]))
        return _check_size(func(*args, **kwargs), f"the filter {name}")

    return guarded


def _int_bits(n: Any) -> int:
    return n.bit_length() if isinstance(n, int) else 0


class _GuardedEnvironment(ImmutableSandboxedEnvironment):
    """llama-cpp-python's chat-template environment with the size guards above."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    # joins a macro's or a block's output: checked like every other value built
    concat = staticmethod(lambda pieces: _check_size("".join(pieces), "a block"))

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters["tojson"] = Jinja2ChatFormatter.tojson
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > MAX_PROMPT_CHARS:
                    raise _Refused(f"repeating {len(seq)} items {n} times makes more than {MAX_PROMPT_CHARS}")
            if _int_bits(left) + _int_bits(right) > MAX_INT_BITS:
                raise _Refused(f"a product of more than {MAX_INT_BITS} bits")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 \
                and _int_bits(left) > 1 and _int_bits(left) * right > MAX_INT_BITS:
            raise _Refused(f"{left} ** {right} has more than {MAX_INT_BITS} bits")
        elif operator == "%" and isinstance(left, str):
            _check_percent(left, right)
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple) \
                and len(left) + len(right) > MAX_PROMPT_CHARS:
            raise _Refused(f"joining {len(left)} and {len(right)} items makes more than {MAX_PROMPT_CHARS}")
        return _check_size(super().call_binop(context, operator, left, right), f"the operator {operator}")

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any,  # noqa: N805 - Jinja's signature
             **kwargs: Any) -> Any:
        name = getattr(__obj, "__name__", "a function")
        _check_numbers(args, kwargs, name)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and name == "join" and args:  # sep.join(items)
            _check_join(args[0], owner)
        elif isinstance(owner, str) and name == "replace" and len(args) >= 2:
            _check_replace(owner, args[0], args[1])
        return _check_size(super().call(__context, __obj, *args, **kwargs), name)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format``/``format_map`` (wrapped by the sandbox at attribute access),
        refused when its format string pads past the cap."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_str_format(fmt)
            return _check_size(wrapped(*args, **kwargs), "str.format")

        checked.__name__ = value.__name__
        return checked


def _environment() -> _GuardedEnvironment:
    """The environment of llama-cpp-python's ``Jinja2ChatFormatter`` (kept in step with
    Transformers'), guarded."""
    extensions: list[Any] = [jinja2.ext.loopcontrols]
    ignore_generation = getattr(Jinja2ChatFormatter, "IgnoreGenerationTags", None)
    if ignore_generation is not None:
        extensions.insert(0, ignore_generation)
    return _GuardedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
                               extensions=extensions)


def _checked_joins(template: jinja2.Template) -> jinja2.Template:
    """``a ~ b`` compiles to a call of ``str_join``/``markup_join`` imported into the
    template's module: wrapped there, so concatenation in a loop cannot double a string
    past the cap between two checks of the watch."""
    namespace = template.root_render_func.__globals__
    for name in ("str_join", "markup_join"):
        join = namespace.get(name)
        if join is not None:
            namespace[name] = functools.partial(_checked_join, join)
    return template


def _checked_join(join: Callable[[Any], str], seq: Any) -> str:
    return _check_size(join(seq), "the operator ~")


def _raise_exception(message: object) -> None:
    raise _TemplateRaised(str(message))


# -- the formatter ------------------------------------------------------------------------------


class ChatFormat:
    """A model's chat template, compiled once (when the pair loads) and rendered per answer."""

    def __init__(self, template: str | None, bos_token: str, eos_token: str, *, name: str = "the model",
                 cancelled: Cancelled | None = None) -> None:
        """Compiles the template (ChatML when the model has none).

        Raises :class:`TemplateError` when it does not compile, or
        :class:`~specchat.engine.runtime.LoadCancelled` when ``cancelled`` turns true first.
        """
        self.template = template or CHATML_CHAT_TEMPLATE
        self.from_model = template is not None
        self.name = name
        self.bos_token, self.eos_token = bos_token, eos_token
        if len(self.template) > MAX_TEMPLATE_CHARS:
            raise TemplateError(f"{name}: its chat template is {len(self.template)} characters "
                                f"(at most {MAX_TEMPLATE_CHARS}): pick another file of this model")
        environment = _environment()
        self._template: jinja2.Template = self._guarded(lambda: _checked_joins(environment.from_string(self.template)),
                                                        cancelled, compiling=True)

    @classmethod
    def for_model(cls, model: LoadedModel, cancelled: Cancelled | None = None) -> ChatFormat:
        vocab_bos = model.meta("tokenizer.ggml.bos_token_id")
        vocab_eos = model.meta("tokenizer.ggml.eos_token_id")
        bos = model.token_text(int(vocab_bos)) if vocab_bos is not None else ""
        eos = model.token_text(int(vocab_eos)) if vocab_eos is not None else ""
        return cls(model.chat_template(), bos, eos, name=model.path.name, cancelled=cancelled)

    @property
    def supports_reasoning_switch(self) -> bool:
        """True when the template takes ``enable_thinking`` (Qwen3 and friends)."""
        return "enable_thinking" in self.template

    def render(self, messages: list[dict[str, str]], *, reasoning: bool | None = None,
               cancelled: Cancelled | None = None) -> str:
        """The prompt text; :class:`TemplateError` (one line) on any failure of the template,
        :class:`TemplateCancelled` when ``cancelled`` turns true while it runs."""
        variables: dict[str, Any] = {  # what llama-cpp-python's Jinja2ChatFormatter passes
            "messages": messages, "eos_token": self.eos_token, "bos_token": self.bos_token,
            "raise_exception": _raise_exception, "add_generation_prompt": True,
            "functions": None, "function_call": None, "tools": None, "tool_choice": None,
        }
        strftime_now = getattr(Jinja2ChatFormatter, "strftime_now", None)
        if strftime_now is not None:
            variables["strftime_now"] = strftime_now
        if reasoning is not None and self.supports_reasoning_switch:
            variables["enable_thinking"] = reasoning
        text: str = self._guarded(lambda: _collect(self._template.generate(variables)), cancelled)
        return text

    def prompt(self, model: LoadedModel, messages: list[dict[str, str]], *, reasoning: bool | None = None,
               cancelled: Cancelled | None = None) -> ChatPrompt:
        text = self.render(messages, reasoning=reasoning, cancelled=cancelled)
        tokens = model.tokenize(text, add_special=False, parse_special=True)
        return ChatPrompt(text, tokens, text.rstrip().endswith(OPEN_TAG))

    def _guarded(self, produce: Callable[[], Any], cancelled: Cancelled | None, *, compiling: bool = False) -> Any:
        try:
            return _watched(produce, RENDER_SECONDS, cancelled)
        except (Exception, _Interrupt) as exc:
            error = self._explain(exc, compiling)
            exc.__traceback__ = None  # the template's frames reference the caller's (and its model)
        raise error  # outside the except block: no __context__ chain keeps the frames either

    def _explain(self, exc: BaseException, compiling: bool) -> TemplateError | LoadCancelled:
        name = self.name
        if isinstance(exc, _Interrupt):
            if exc.reason == "cancelled":
                if compiling:
                    return LoadCancelled(f"{name}: loading was cancelled")
                return TemplateCancelled(f"{name}: rendering its chat template was cancelled")
            return TemplateError(f"{name}: its chat template " + {
                "timeout": f"did not finish within {RENDER_SECONDS:g} s",
                "size": f"produced more than {MAX_PROMPT_CHARS} characters",
                "memory": f"used more than {MAX_RENDER_MEMORY >> 20} MiB of memory",
            }[exc.reason])
        if isinstance(exc, _TemplateRaised):
            return TemplateError(f"{name}: its chat template raised: {exc}")
        if isinstance(exc, jinja2.TemplateSyntaxError):
            return TemplateError(f"{name}: its chat template failed: {exc.message} (line {exc.lineno})")
        if isinstance(exc, jinja2.TemplateError | _Refused):
            return TemplateError(f"{name}: its chat template failed: {exc}")
        if isinstance(exc, MemoryError):
            return TemplateError(f"{name}: its chat template ran out of memory")
        return TemplateError(f"{name}: its chat template failed: {type(exc).__name__}: {exc}")


def _collect(pieces: Iterator[str]) -> str:
    """The streamed output, stopped at :data:`MAX_PROMPT_CHARS` characters."""
    out: list[str] = []
    size = 0
    try:
        for piece in pieces:
            size += len(piece)
            if size > MAX_PROMPT_CHARS:
                raise _Interrupt("size")
            out.append(piece)
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    return "".join(out)
