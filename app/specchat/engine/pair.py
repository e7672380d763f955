"""A loaded target (and optional draft): everything one generation thread owns.

Construction checks the pair before loading anything: a draft whose tokenizer
differs from the target's is refused with the first reason, so no decoding
ever runs on a mismatched pair.  Then both models load, the decode costs of
this machine are calibrated (or read from the cache), and the controller
starts from them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specchat.models.compatibility import check_pair
from specchat.models.fit import OUTPUT_ROWS
from specchat.models.gguf_header import GGUFError

from .calibration import calibrate
from .cancel import CancelToken
from .chat import ChatFormat, ChatPrompt
from .contention import MachineWatch
from .controller import CostModel, DraftController
from .drafters import ModelDrafter, build_drafters
from .events import Event
from .generate import generate
from .progress import LoadPhase, ProgressSink, report
from .runtime import LlamaError, LoadCancelled, LoadedModel, ModelOptions, default_threads, replays_shapes
from .settings import ControllerSettings, Drafter, Mode, SamplingSettings
from .threads import ThreadFit


class IncompatiblePair(LlamaError):
    """The draft cannot serve the target; the message names the first reason."""




@dataclass(frozen=True, slots=True)
class PairConfig:
    target: Path
    draft: Path | None = None
    target_options: ModelOptions = ModelOptions()
    draft_options: ModelOptions | None = None  # None: like the target's
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    calibration_cache: Path | None = None

    @property
    def label(self) -> str:
        """What the chat says while it loads: the target's file name."""
        return self.target.name

    @property
    def native_files(self) -> tuple[Path, ...]:
        """Model files llama.cpp runs in this process for this pair (app/specchat/native_work.py)."""
        return (self.target,) if self.draft is None else (self.target, self.draft)

    @property
    def opens(self) -> PairConfig:
        """What opening this pair depends on: configs that differ only in the controller's live
        fields open the same pair (the live fields come with each answer: SpeculativePair.retune)."""
        return replace(self, controller=self.controller.load_part())


def _thread_fit(config: PairConfig) -> ThreadFit | None:
    threads = config.target_options.n_threads
    return None if threads else ThreadFit(default_threads())


class SpeculativePair:
    def __init__(self, config: PairConfig, cancel: CancelToken | None = None,
                 progress: ProgressSink | None = None) -> None:
        """``cancel`` gives up the load (weights or calibration) with ``runtime.LoadCancelled``;
        ``progress`` hears each step (:mod:`.progress`), in this thread."""
        config.controller.validate()
        cancelled = (lambda: cancel.cancelled) if cancel is not None else None
        self.config = config
        # the decode threads fitted to what other work leaves free (judged from now: the load is ours), where
        # the count was left to SpecChat; the calibration runs on them too (two threads beside two busy
        # processes decode up to 40x slower than one: a load would take minutes)
        self.threads = _thread_fit(config)
        if config.draft is not None:
            try:
                verdict = check_pair(config.target, config.draft)
            except GGUFError as exc:
                raise LlamaError(str(exc)) from None
            if not verdict:
                raise IncompatiblePair(
                    f"{Path(config.draft).name} cannot draft for {Path(config.target).name}: {verdict.reason}"
                )
        if cancel is not None and cancel.cancelled:
            raise LoadCancelled("loading was cancelled")
        # the longest verify: a draft model's longest draft or prompt lookup's, and the bonus token
        k_max = max(config.controller.k_max, config.controller.lookup_k_max)
        # where decodes replay CUDA graphs, auto compares both models' choices over the prompt's last positions
        # (engine/generate.py: prompt_agreement): both contexts hold the rows of logits that takes
        rows = OUTPUT_ROWS if replays_shapes(config.target_options) else 16
        self.target = LoadedModel(config.target, config.target_options, n_outputs=max(k_max + 1, rows),
                                  cancelled=cancelled,
                                  progress=report(progress, LoadPhase.TARGET, Path(config.target).name))
        self.draft: LoadedModel | None = None
        try:
            # the template first: one that does not compile refuses the pair before the draft
            # loads and the calibration runs (the model would answer in a format it was not trained on)
            chat_format = ChatFormat.for_model(self.target, cancelled)
            if config.draft is not None:
                dopts = config.draft_options or config.target_options
                # same context size as the target: the draft mirrors the target's tokens
                dopts = replace(dopts, n_ctx=self.target.n_ctx, n_batch=max(dopts.n_batch, self.target.n_batch))
                self.draft = LoadedModel(config.draft, dopts, n_outputs=rows if self.target.shape_sensitive else 1,
                                         cancelled=cancelled,
                                         progress=report(progress, LoadPhase.DRAFT, Path(config.draft).name))
            what = "the draft" if self.draft is not None else Path(config.target).name
            self.fit_threads()
            costs = calibrate(self.target, self.draft, k_max, config.calibration_cache, cancelled,
                              report(progress, LoadPhase.CALIBRATING, what),
                              MachineWatch(ours=self.target.n_threads),  # a busy machine's timings are judged
                              report(progress, LoadPhase.WAITING, what))  # waiting for a quieter machine
            self._assemble(costs, chat_format)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_models(cls, config: PairConfig, target: LoadedModel, draft: LoadedModel | None,
                    costs: CostModel) -> SpeculativePair:
        """A pair over models that are already loaded, with known costs.

        The seam for models that are not llama.cpp files (the tests' table-driven fake
        model, which implements :class:`LoadedModel`'s interface); no check, no calibration.
        The pair owns the models from here: if it cannot be made, they are closed.
        """
        pair = cls.__new__(cls)
        pair.config, pair.target, pair.draft = config, target, draft
        pair.threads = _thread_fit(config)
        try:
            config.controller.validate()
            pair._assemble(costs, ChatFormat.for_model(target))
        except BaseException:
            pair.close()
            raise
        return pair

    def _assemble(self, costs: CostModel, chat_format: ChatFormat) -> None:
        config = self.config
        self.speculation_blocked = ""
        if not self.target.can_trim:
            self.speculation_blocked = "the target's memory (recurrent/hybrid model) cannot roll back rejected tokens"
        self.costs = costs
        self.controller = DraftController(config.controller, costs)
        self.drafters = build_drafters(self.target, self.draft, config.controller)  # the registry's, that can run
        model = self.drafters.get(Drafter.MODEL)
        self.model_drafter = model if isinstance(model, ModelDrafter) else None
        self.chat_format = chat_format

    def forget_answers(self) -> None:
        """Every drafter drops what it kept of earlier answers (prompt lookup's memory): the next answer
        is drafted as a session's first question would be (the bench's ``--first-sight``)."""
        for drafter in self.drafters.values():
            drafter.forget()

    def fit_threads(self) -> int:
        """Run the next decodes of both models on the threads other work leaves free (engine/threads.py);
        the count (the models' own where the user chose it)."""
        if self.threads is None:
            return self.target.threads_now
        n = self.threads.fit()
        for model in (self.target, self.draft):
            if model is not None:
                model.set_threads(n)
        return n

    def close(self) -> None:
        for m in (getattr(self, "draft", None), getattr(self, "target", None)):
            if m is not None:
                m.close()

    def __enter__(self) -> SpeculativePair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def retune(self, controller: ControllerSettings) -> None:
        """The controller's live settings (thresholds, k_min, p_min...) from the next answer on, with no
        reload; what the pair was loaded with (K max, the lookup n-gram, the windows) stays."""
        controller.validate()
        self.controller.retune(controller)

    def chat_prompt(self, messages: list[dict[str, str]], *, reasoning: bool | None = None,
                    cancel: CancelToken | None = None) -> ChatPrompt:
        """The prompt through the target's chat template: :class:`~.chat.TemplateError` when
        the template fails, :class:`~.chat.TemplateCancelled` when ``cancel`` stops it."""
        cancelled = (lambda: cancel.cancelled) if cancel is not None else None
        return self.chat_format.prompt(self.target, messages, reasoning=reasoning, cancelled=cancelled)

    def generate(
        self,
        prompt: Sequence[int],
        *,
        mode: Mode = Mode.AUTO,
        sampling: SamplingSettings | None = None,
        max_tokens: int = 512,
        stop: Sequence[str] = (),
        cancel: CancelToken | None = None,
    ) -> Iterator[Event]:
        return generate(self, list(prompt), mode=mode, sampling=sampling or SamplingSettings(), max_tokens=max_tokens, stop=stop,
                        cancel=cancel)
