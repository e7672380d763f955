"""A fake model and a fake pair: the real generation loop, controller, worker thread and
window, without a GGUF file or llama.cpp doing any work.

``FakeModel`` implements :class:`~specchat.engine.runtime.LoadedModel`'s interface over a
byte vocabulary (ids 0-255 are bytes, then two special tokens).  Its "language model" is a
table: after the assistant header of the chat template, the n-th answer token is byte n of
an answer text chosen by the prompt, and the end-of-turn token comes after
``answer_tokens``.  Logits are one-hot-like rows (the chosen token +10, all others -10),
so greedy decoding is deterministic and exact.  A draft model is the same table with a
fixed share of positions wrong, which gives a known acceptance.  ``decode_s`` makes every
decode take time, so an answer can be caught mid-stream.

``fake_pair_factory(spec)`` is what ``GenerationService(pair_factory=...)`` takes.
"""

from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_cpp.llama_chat_format import CHATML_CHAT_TEMPLATE

from specchat.engine.chat import ChatFormat
from specchat.engine.controller import CostModel
from specchat.engine.pair import CancelToken, PairConfig, SpeculativePair
from specchat.engine.progress import LoadPhase, LoadProgress, ProgressSink
from specchat.engine.runtime import DecodeAborted, LlamaError, LoadCancelled, LoadedModel, ModelOptions

EOT, IM_START = 256, 257
SPECIALS = {"<|im_end|>": EOT, "<|im_start|>": IM_START}
N_VOCAB = 258
HEADER = list(b"assistant\n")  # follows <|im_start|> where the model's turn begins

ANSWERS = (
    "Speculative decoding lets a small draft model propose tokens that the large target model "
    "checks in one batch. **Accepted** tokens cost almost nothing; a rejected one costs a round. ",
    "Here is a function:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nIt adds two numbers. ",
    "1. Load the pair.\n2. Calibrate the costs.\n3. Draft, verify, repeat until the answer ends. ",
)


class FakeClock:
    """Seconds as the fake models spend them: each decode advances it by what the spec's costs say (a
    target decode of n tokens its fitted verify cost, plus ``RECAPTURE_S`` where shapes are kept and
    llama.cpp would re-capture; a draft decode ``draft_cost_s``).  ``install(monkeypatch)`` makes it the
    clock the generation loop and the drafters time rounds with, so what the controller learns is the
    fake's stated costs, whatever the machine running the test is doing."""

    RECAPTURE_S = 0.004

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def install(self, monkeypatch) -> FakeClock:
        import types

        from specchat.engine import drafters, generate

        for module in (generate, drafters):
            monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=self, monotonic=time.monotonic,
                                                                     sleep=time.sleep, time=time.time))
        monkeypatch.setattr(f"{__name__}._CLOCK", self)
        return self


_CLOCK: FakeClock | None = None  # the installed clock (FakeClock.install), None: rounds take real time


@dataclass(frozen=True)
class FakeSpec:
    """How the fake pair behaves; the defaults stream a 120-token answer at once."""

    answer_tokens: int = 120  # then the end-of-turn token
    decode_s: float = 0.0  # seconds every decode call takes (per call, not per token)
    miss_every: int = 4  # the draft is wrong at every n-th answer position (0: never)
    unsure_every: int = 0  # the draft is unsure (top probability about 0.52) at every n-th answer position
    n_ctx: int = 2048
    load_s: float = 0.0  # how long a load takes (checked for cancel every 10 ms)
    fail_load: str = ""  # a load raises LlamaError with this message
    can_trim: bool = True
    costs: dict[int, float] = field(default_factory=lambda: {1: 0.010, 2: 0.011, 3: 0.012, 5: 0.014, 9: 0.018})
    draft_cost_s: float = 0.001
    shape_sensitive: bool = False  # decode costs depend on the batch shape (llama.cpp's CUDA graphs)
    threads: int = 1  # the threads each model is "loaded" with (set_threads records what the loop asks for)


class FakeModel(LoadedModel):
    """The runtime's interface over a table; see the module doc."""

    def __init__(self, path: Path, spec: FakeSpec, *, draft: bool = False) -> None:  # noqa: D107
        # LoadedModel.__init__ would load a GGUF file through llama.cpp: not called on purpose
        self.path = Path(path)
        self.options = ModelOptions(n_ctx=spec.n_ctx)
        self.spec = spec
        self.is_draft = draft
        self.n_ctx = spec.n_ctx
        self.n_batch = 512
        self.n_outputs = 64
        self.n_threads = self.threads_now = spec.threads
        self.thread_calls: list[int] = []  # every set_threads, in order
        self.n_vocab = N_VOCAB
        self.can_trim = spec.can_trim
        self.can_shift = spec.can_trim  # a table has no positions to re-rotate: it shifts wherever it trims
        self.dropped: list[tuple[int, int]] = []  # every context shift: (start, count)
        self.add_bos = False
        self.tokens: list[int] = []
        self.decode_calls = 0
        self.shape_sensitive = spec.shape_sensitive
        self.shapes: list[int] = []  # the batch size of every decode, in order
        self._rows: list[np.ndarray] = []
        self._closed = False

    def set_threads(self, n: int) -> None:
        self.thread_calls.append(n)
        self.threads_now = max(1, min(n, self.n_threads))

    # -- the table ------------------------------------------------------------------

    def next_token(self, context: list[int]) -> int:
        """The target's greedy choice after ``context`` (the draft's, with its misses)."""
        start = _answer_start(context)
        if start is None:
            return EOT
        pos = len(context) - start
        if pos >= self.spec.answer_tokens:
            return EOT
        answer = ANSWERS[zlib.crc32(bytes(t for t in context[:start] if t < 256)) % len(ANSWERS)].encode()
        token = answer[pos % len(answer)]
        if self.is_draft and self.spec.miss_every and pos % self.spec.miss_every == self.spec.miss_every - 1:
            token = (token + 1) % 256
        return token

    def _cost(self, n: int) -> float:
        """What a decode of n tokens costs on the fake clock (the one just recorded in ``shapes``)."""
        if self.is_draft:
            seconds = self.spec.draft_cost_s * (1 if n == 1 else CostModel(dict(self.spec.costs)).verify(n)
                                                / self.spec.costs[1])
        else:
            seconds = CostModel(dict(self.spec.costs)).verify(n)
        s = self.shapes
        if self.shape_sensitive and (len(s) < 3 or not s[-1] == s[-2] == s[-3]):
            seconds += FakeClock.RECAPTURE_S
        return seconds

    def recaptures(self, since: int = 0) -> int:
        """Decodes from ``since`` on that llama.cpp's CUDA backend would re-capture a graph for:
        it replays only after two calls of the same shape."""
        shapes = self.shapes[since:]
        return sum(1 for i, n in enumerate(shapes) if i < 2 or n != shapes[i - 1] or n != shapes[i - 2])

    def _row(self, token: int) -> np.ndarray:
        row = np.full(N_VOCAB, -10.0, dtype=np.float32)
        row[token] = 10.0
        return row

    def _row_after(self, context: list[int]) -> np.ndarray:
        """The logits after ``context``: one-hot-like, but for the draft's unsure positions (``unsure_every``),
        where a second token trails the choice by 0.1 (the choice's probability about 0.52)."""
        token = self.next_token(context)
        row = self._row(token)
        start = _answer_start(context)
        every = self.spec.unsure_every
        if self.is_draft and every and start is not None and (len(context) - start) % every == every - 1:
            row[(token + 1) % 256] = 9.9
        return row

    # -- LoadedModel's interface -------------------------------------------------------

    def close(self) -> None:
        self._closed = True

    def meta(self, key: str) -> str | None:
        return {"tokenizer.ggml.eos_token_id": str(EOT)}.get(key)

    def chat_template(self) -> str | None:
        return None  # ChatFormat falls back to ChatML, which this vocabulary speaks

    def describe(self) -> str:
        return "fake table model"

    @property
    def size_bytes(self) -> int:
        return 1_000_000 if self.is_draft else 10_000_000

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        out: list[int] = []
        rest = text
        while rest:
            hits = [(rest.find(s), s) for s in SPECIALS if parse_special and s in rest]
            if not hits:
                out.extend(rest.encode())
                break
            at, special = min(hits)
            out.extend(rest[:at].encode())
            out.append(SPECIALS[special])
            rest = rest[at + len(special):]
        return out

    def piece(self, token: int) -> bytes:
        return bytes([token]) if token < 256 else b""

    def is_eog(self, token: int) -> bool:
        return token == EOT

    def token_text(self, token: int) -> str:
        return next((s for s, t in SPECIALS.items() if t == token), chr(token) if token < 256 else "")

    def decode(self, tokens: list[int], *, logits: str | int = "last") -> None:
        if not tokens:
            return
        if self._closed:
            raise LlamaError(f"{self.path.name}: decode after close")
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise LlamaError(f"context full: {len(self.tokens)} + {len(tokens)} tokens > {self.n_ctx}")
        self.decode_calls += 1
        self.shapes.append(len(tokens))
        if _CLOCK is not None:
            _CLOCK.t += self._cost(len(tokens))
        if self.spec.decode_s:
            time.sleep(self.spec.decode_s)
        if self.abort_token is not None and self.abort_token.cancelled:  # as llama.cpp's abort callback stops it
            raise DecodeAborted(f"{self.path.name}: stopped")
        start = len(self.tokens)
        self.tokens.extend(tokens)
        if logits == "none":
            self._rows = []
        elif logits == "last":
            self._rows = [self._row_after(self.tokens)]
        elif isinstance(logits, int):  # a row for each of the last n tokens
            self._rows = [self._row_after(self.tokens[: start + i + 1])
                          for i in range(max(len(tokens) - logits, 0), len(tokens))]
        else:
            self._rows = [self._row_after(self.tokens[: start + i + 1]) for i in range(len(tokens))]

    def trim(self, n: int) -> None:
        del self.tokens[n:]

    def drop(self, start: int, count: int) -> None:
        self.dropped.append((start, count))
        del self.tokens[start : start + count]

    def clear(self) -> None:
        self.tokens.clear()

    def logits(self, i: int) -> np.ndarray:
        try:
            return self._rows[i]
        except IndexError:
            raise LlamaError(f"no logits for batch row {i}") from None

    @property
    def ctx(self):
        raise LlamaError("the fake model has no llama.cpp context: use greedy sampling without penalties")


def _answer_start(context: list[int]) -> int | None:
    """Index of the first answer token: just after the last ``<|im_start|>assistant\\n``."""
    for i in range(len(context) - 1, -1, -1):
        if context[i] == IM_START:
            head = context[i + 1 : i + 1 + len(HEADER)]
            return i + 1 + len(HEADER) if head == HEADER else None
    return None


CALIBRATION_STEPS = 12  # the timed decodes a slowed fake load reports


def _fake_progress(progress: ProgressSink, config: PairConfig, share: float) -> None:
    """Where a real load would be after ``share`` of its time: the target's weights in the first
    half, the draft's (if any) to 70%, then the calibration's timed decodes."""
    target, draft = Path(config.target).name, Path(config.draft).name if config.draft is not None else None
    if share < 0.5:
        progress(LoadProgress(LoadPhase.TARGET, target, share / 0.5, 1.0))
    elif share < 0.7 and draft is not None:
        progress(LoadProgress(LoadPhase.DRAFT, draft, (share - 0.5) / 0.2, 1.0))
    elif share >= 0.7:
        step = min(CALIBRATION_STEPS, 1 + int((share - 0.7) / 0.3 * CALIBRATION_STEPS))
        progress(LoadProgress(LoadPhase.CALIBRATING, "the draft" if draft else target, step, CALIBRATION_STEPS))


def fake_pair(config: PairConfig, spec: FakeSpec = FakeSpec(), cancel: CancelToken | None = None,
              progress: ProgressSink | None = None) -> SpeculativePair:
    """A pair of fake models for ``config`` (the files need not exist); a slowed load (``load_s``)
    tells ``progress`` its steps as a real one would, every 10 ms."""
    start = time.monotonic()
    deadline = start + spec.load_s
    while time.monotonic() < deadline:
        if cancel is not None and cancel.cancelled:
            raise LoadCancelled("loading was cancelled")
        if progress is not None:
            _fake_progress(progress, config, (time.monotonic() - start) / spec.load_s)
        time.sleep(0.01)
    if spec.fail_load:
        raise LlamaError(spec.fail_load)
    target = FakeModel(config.target, spec)
    draft = FakeModel(config.draft, spec, draft=True) if config.draft is not None else None
    costs = CostModel(dict(spec.costs), {"model": spec.draft_cost_s, "lookup": 0.0})
    return SpeculativePair.from_models(config, target, draft, costs)


class FakePairFactory:
    """``pair_factory`` for a GenerationService: counts loads; the spec can change between loads."""

    def __init__(self, spec: FakeSpec = FakeSpec()) -> None:
        self.spec = spec
        self.loads: list[PairConfig] = []
        self.pairs: list[SpeculativePair] = []  # what was built (read them only while the worker is idle)
        self._lock = threading.Lock()

    def __call__(self, config: PairConfig, cancel: CancelToken, progress: ProgressSink | None = None) -> SpeculativePair:
        with self._lock:
            self.loads.append(config)
            spec = self.spec
        pair = fake_pair(config, spec, cancel, progress)
        with self._lock:
            self.pairs.append(pair)
        return pair


def fake_pair_factory(spec: FakeSpec = FakeSpec()) -> FakePairFactory:
    return FakePairFactory(spec)


# A chat template that loops (nested range() loops: only the render deadline or a cancel ends it).
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
# ChatML (which the fake model speaks), but from the second user turn on it loops
SLOW_LATER = "{% if messages|length > 2 %}" + LOOPS + "{% endif %}" + CHATML_CHAT_TEMPLATE


class TemplateFactory(FakePairFactory):
    """The fake pair with a chat template of the test's choosing."""

    def __init__(self, template: str, spec: FakeSpec | None = None) -> None:
        super().__init__(spec or FakeSpec())
        self.template = template

    def __call__(self, config: PairConfig, cancel: CancelToken, progress: ProgressSink | None = None) -> SpeculativePair:
        pair = super().__call__(config, cancel, progress)
        pair.chat_format = ChatFormat(self.template, "", "<|im_end|>", name=config.target.name)
        return pair
