"""A pair of local models as a :class:`~.protocol.Backend`.

:meth:`LocalBackend.open` loads the pair from its GGUF files (through a pair factory:
:func:`load_pair`, or the tests' fake); :meth:`LocalBackend.answer` renders the chat
through the target's template and runs the generation loop, its text split once
(:func:`~specchat.engine.phases.split_answer`).  Owned by the thread that opened it: llama.cpp
contexts are not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Protocol

from specchat.context_policy import SETTING, STOP_LABEL, ContextPolicy, fit_messages, label, reserve
from specchat.engine.answer import AnswerEvent, AnswerRequest, Started
from specchat.engine.cancel import CancelToken
from specchat.engine.chat import TemplateCancelled
from specchat.engine.events import Done, Error, GenerationStats, StopReason
from specchat.engine.pair import PairConfig, SpeculativePair
from specchat.engine.phases import split_answer
from specchat.engine.progress import ProgressSink
from specchat.engine.runtime import LlamaError, LoadCancelled, backend_info
from specchat.errors import UserError
from specchat.models.fit import estimate_files
from specchat.models.gguf_header import GGUFError
from specchat.telemetry.samplers import estimated_shares

from .pairs import fit_problem
from .protocol import PairInfo


class PairFactory(Protocol):
    """Makes a loaded pair from its config: :func:`load_pair`, or the tests' fake."""

    def __call__(self, config: PairConfig, cancel: CancelToken,
                 progress: ProgressSink | None = None) -> SpeculativePair: ...


def load_pair(config: PairConfig, cancel: CancelToken, progress: ProgressSink | None = None) -> SpeculativePair:
    """The real pair factory: the models from their GGUF files (checked, loaded, calibrated),
    each step told to ``progress``.

    A pair that clearly cannot fit in free memory (the header-only estimate) is refused
    with the reason before llama.cpp allocates anything.
    """
    problem = fit_problem(config)
    if problem:
        raise LlamaError(problem)
    return SpeculativePair(config, cancel, progress)


class LocalBackend:
    def __init__(self, pair: SpeculativePair) -> None:
        self.pair = pair

    @classmethod
    def open(cls, config: PairConfig, cancel: CancelToken, progress: ProgressSink | None = None, *,
             pair_factory: PairFactory = load_pair) -> LocalBackend:
        """Load the pair (:class:`LlamaError` when it cannot be; :class:`LoadCancelled` when ``cancel``
        was set before it was ready: a load given up never reports a superseded pair); ``progress``
        hears the weights and the calibration (:mod:`specchat.engine.progress`)."""
        backend = cls(pair_factory(config, cancel, progress))
        if cancel.cancelled:
            backend.close()
            raise LoadCancelled("the load was given up")
        return backend

    @cached_property
    def info(self) -> PairInfo:
        pair = self.pair
        info = backend_info()
        paths = [pair.config.target] + ([pair.config.draft] if pair.config.draft else [])
        try:
            on_gpu = info["backend"] != "CPU" and pair.config.target_options.n_gpu_layers != 0
            shares = estimated_shares(estimate_files(paths, n_ctx=pair.target.n_ctx), on_gpu=on_gpu)
        except (GGUFError, OSError):
            shares = ()
        return PairInfo(
            target=pair.target.path.name, draft=pair.draft.path.name if pair.draft else None,
            backend=info["backend"], n_ctx=pair.target.n_ctx,
            supports_reasoning_switch=pair.chat_format.supports_reasoning_switch,
            speculation_blocked=pair.speculation_blocked,
            verify_ms={n: v * 1e3 for n, v in pair.costs.verify_s.items()},
            draft_ms=pair.costs.draft_s["model"] * 1e3 if "model" in pair.costs.draft_s else None,
            target_bytes=pair.target.size_bytes, draft_bytes=pair.draft.size_bytes if pair.draft else 0,
            memory_shares=shares,
        )

    def answer(self, request: AnswerRequest, cancel: CancelToken) -> Iterator[AnswerEvent]:
        """:class:`~specchat.engine.chat.TemplateError` (a UserError, one line naming the model) when the
        template fails; the pair stays usable.  A stop while the template renders is ``Done(CANCELLED)``.

        A chat longer than the context is cut by ``request.context_policy`` (the oldest turns left
        out until the prompt leaves the answer its reserve); what stays in the target's KV cache is
        reused by the loop's ``keep_prefix``: the kept start (system prompt, and the first exchange
        under truncate-middle), and the turns after a cut by a context shift where the model can
        shift (:meth:`~specchat.engine.runtime.LoadedModel.keep_prefix`), else prefilled again."""
        budget = self.pair.target.n_ctx - reserve(self.pair.target.n_ctx, request.max_tokens)
        if request.fresh_prompt:  # nothing reused from the last answer: the prompt prefilled whole, as at a start
            self.pair.target.clear()
            if self.pair.draft is not None:
                self.pair.draft.clear()
        if request.prompt:
            yield from self._complete(request, budget, cancel)
            return
        try:
            fitted = fit_messages(
                request.messages, request.context_policy, budget,
                lambda msgs: self.pair.chat_prompt(msgs, reasoning=request.reasoning, cancel=cancel),
                lambda prompt: len(prompt.tokens))
        except TemplateCancelled:  # stopped (or the app closing) while the template rendered
            yield Done(StopReason.CANCELLED, GenerationStats.empty())
            return
        prompt = fitted.prompt
        if request.controller is not None:
            self.pair.retune(request.controller)
        yield Started(len(prompt.tokens), prompt.starts_in_reasoning, fitted.left_out, fitted.left_out_at)
        over = len(prompt.tokens) + 1 - self.pair.target.n_ctx
        if over > 0:  # even what the policy may send does not fit: one line that says by how much, never a cut
            message = too_long(len(prompt.tokens), self.pair.target.n_ctx, request.context_policy, fitted.left_out)
            yield Error(message)
            yield Done(StopReason.ERROR, GenerationStats.empty(request.mode.value), message)
            return
        yield from split_answer(self.pair.generate(prompt.tokens, mode=request.mode, sampling=request.sampling,
                                                   max_tokens=request.max_tokens, stop=request.stop, cancel=cancel),
                                prompt.starts_in_reasoning)

    def _complete(self, request: AnswerRequest, budget: int, cancel: CancelToken) -> Iterator[AnswerEvent]:
        """A raw prompt, no template: the text as it is (special tokens written out are read as such, as
        llama-server reads them), with the model's start token."""
        tokens = self.pair.target.tokenize(request.prompt, add_special=True, parse_special=True)
        if len(tokens) > budget:
            raise UserError(f"the prompt is {len(tokens)} tokens; this context ({self.pair.target.n_ctx}) leaves "
                            f"{budget} for it with {request.max_tokens} to answer")
        if request.controller is not None:
            self.pair.retune(request.controller)
        yield Started(len(tokens), False)
        yield from split_answer(self.pair.generate(tokens, mode=request.mode, sampling=request.sampling,
                                                   max_tokens=request.max_tokens, stop=request.stop, cancel=cancel),
                                False)

    def close(self) -> None:
        self.pair.close()


def too_long(tokens: int, n_ctx: int, policy: ContextPolicy | str, left_out: int = 0) -> str:
    """The one line for a prompt the context cannot hold, saying by how much and what would help."""
    over = tokens + 1 - n_ctx
    cut = f" with {left_out} earlier message{'s' if left_out != 1 else ''} left out" if left_out else ""
    if ContextPolicy(policy) is ContextPolicy.STOP:
        advice = (f"this chat's setting “{SETTING}” is “{STOP_LABEL}”: set it to “{label(ContextPolicy.ROLLING_WINDOW)}” "
                  f"or “{label(ContextPolicy.TRUNCATE_MIDDLE)}” (Chat settings) to leave out earlier turns, "
                  "shorten the question or its files, or raise the context size")
    else:
        advice = "the question with its files alone is too long: shorten it or raise the context size"
    return f"the prompt is {tokens} tokens{cut} and the context holds {n_ctx}: {over} too many; {advice}"
