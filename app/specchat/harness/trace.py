"""Agreement traces: what the drafters would have got right, position by position.

At temperature 0 the target's answer is its greedy path, and a greedy draft
model proposes the same tokens whatever machine runs it (near-ties aside).  So
which draft tokens the target accepts depends on the models and the prompt,
not on the hardware; only what each round costs does.  A trace records the
first half once; :mod:`specchat.harness.simulate` adds any machine's costs.

For every position i of the target's greedy answer t_0 .. t_{N-1} at which a
round can start (the committed context is the prompt and t_0 .. t_i):

- ``draft_match[i]``: how many of the draft model's next ``k_max`` greedy tokens
  equal t_{i+1}, t_{i+2}, ... (where the target would accept them);
- ``draft_p[i][j]``: the draft's top probability at drafted position j, over the
  whole vocabulary (SpecChat's ``p_min`` test), and ``draft_p10[i][j]`` over its
  ten best tokens only (llama.cpp's draft sampler is top-k 10 and tests that):
  both in thousandths, so a ``p_min`` stop can be replayed for any threshold;
- ``lookup_len[i]`` / ``lookup_match[i]``: the prompt-lookup drafter's proposal
  length (at most ``k_max``) and how much of it the target would accept;
  ``lookup_agree[i]``: the length of the match behind it (``PromptLookupDrafter.last_match``,
  which the controller's plan reads; optional: traces recorded before it have none).

A greedy draft's proposals are the continuation of one rollout: when the
rollout at position i got t_{i+1} right, the proposal at i+1 is the same
rollout one token on, so the recorder extends it by one decode instead of
drafting ``k_max`` tokens again (about ``k_max / (accepted + 1)`` draft decodes
per position instead of ``k_max``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specchat import __version__, files
from specchat.engine.drafters import PromptLookupDrafter
from specchat.engine.generate import PROMPT_ROWS, prompt_agreement
from specchat.engine.runtime import LoadedModel
from specchat.engine.sampling import last_choices
from specchat.engine.verify import accepted_count
from specchat.errors import UserError

from .suite import BenchPrompt

if TYPE_CHECKING:
    from specchat.engine.pair import SpeculativePair

TRACE_FORMAT = "specchat-agreement-trace"
TRACE_VERSION = 1
DEFAULT_K_MAX = 16  # llama.cpp's published setting drafts up to 16 (llama-swap's example, --draft-max 16)
MAX_TRACE_BYTES = 64 << 20
MAX_K = 64
MAX_TOKENS = 1 << 16  # positions per prompt: far more than any bench answer


class TraceError(UserError, ValueError):
    """A trace file that cannot be read or is not a trace."""


@dataclass(frozen=True, slots=True)
class PromptTrace:
    id: str
    task: str
    prompt_tokens: int
    max_tokens: int
    tokens: list[int]  # the target's greedy answer, its end-of-generation token included when it ended
    ended: bool  # the answer ended with an end-of-generation token (else it hit max_tokens)
    draft_match: list[int] = field(default_factory=list)  # one per round position: len(tokens) - 1
    draft_p: list[list[int]] = field(default_factory=list)
    draft_p10: list[list[int]] = field(default_factory=list)
    lookup_len: list[int] = field(default_factory=list)
    lookup_match: list[int] = field(default_factory=list)
    lookup_agree: list[int] = field(default_factory=list)  # one per round position, or none (not recorded)
    # the prompt's agreement auto measures at prefill (engine/generate.py: prompt_agreement); None: not recorded
    prompt_agreement: float | None = None

    @property
    def visible_tokens(self) -> int:
        """Tokens the answer shows (its end-of-generation token is not shown)."""
        return len(self.tokens) - 1 if self.ended else len(self.tokens)


@dataclass(frozen=True, slots=True)
class Trace:
    target: str
    draft: str
    k_max: int
    lookup_ngram: int
    prompts: list[PromptTrace]
    specchat: str = __version__
    recorded: str = ""  # UTC time, ISO 8601
    seconds: float = 0.0  # how long the recording took

    def to_json(self) -> str:
        """Compact JSON: one prompt a line, so a diff of two recordings stays readable."""
        head = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "target": self.target, "draft": self.draft,
                "k_max": self.k_max, "lookup_ngram": self.lookup_ngram, "specchat": self.specchat,
                "recorded": self.recorded, "seconds": round(self.seconds, 1),
                "p_scale": 1000, "temperature": 0}
        body = ",\n".join(json.dumps(asdict(p), separators=(",", ":")) for p in self.prompts)
        return json.dumps(head, separators=(",", ":"))[:-1] + ',"prompts":[\n' + body + "\n]}\n"

    def save(self, path: Path) -> None:
        files.write_text_atomically(path, self.to_json())


# -- recording ------------------------------------------------------------------


def _choice(logits: np.ndarray) -> tuple[int, int, int]:
    """The draft's greedy token and its probability in thousandths: over the whole vocabulary, and
    over the ten best logits (llama.cpp's draft sampler)."""
    top = int(np.argmax(logits))
    shifted = logits - logits[top]
    p_full = 1.0 / float(np.exp(shifted, dtype=np.float32).sum())
    best10 = np.partition(shifted, -10)[-10:] if shifted.size > 10 else shifted
    p10 = 1.0 / float(np.exp(best10, dtype=np.float32).sum())
    return top, round(p_full * 1000), round(p10 * 1000)


def greedy_answer(target: LoadedModel, prompt: list[int], max_tokens: int) -> tuple[list[int], bool]:
    """The target's greedy answer, decoded one token at a time as plain decoding does."""
    target.clear()
    target.decode(prompt, logits="last")
    out: list[int] = []
    while True:
        tok = int(np.argmax(target.logits(-1)))
        out.append(tok)
        if target.is_eog(tok):
            return out, True
        if len(out) >= max_tokens:
            return out, False
        target.decode([tok], logits="last")


class _Rollout:
    """The draft model's greedy continuation of the committed context, kept across positions."""

    def __init__(self, draft: LoadedModel, k_max: int) -> None:
        self.draft = draft
        self.k_max = k_max
        self.tokens: list[int] = []
        self.p: list[int] = []
        self.p10: list[int] = []

    def advance(self, context: list[int], newest: int) -> None:
        """The context grew by ``newest``: keep the rollout's tail if it predicted that token."""
        if self.tokens and self.tokens[0] == newest:
            del self.tokens[0], self.p[0], self.p10[0]
        else:
            self.tokens.clear()
            self.p.clear()
            self.p10.clear()
        self._extend(context)

    def _extend(self, context: list[int]) -> None:
        m = self.draft
        seq = context + self.tokens
        keep = min(m.keep_prefix(seq), len(seq) - 1)
        m.trim(keep)
        m.decode(seq[keep:], logits="last")
        while len(self.tokens) < self.k_max and len(m.tokens) + 1 < m.n_ctx:
            tok, p, p10 = _choice(m.logits(-1))
            self.tokens.append(tok)
            self.p.append(p)
            self.p10.append(p10)
            if len(self.tokens) < self.k_max:
                m.decode([tok], logits="last")


def record_prompt(target: LoadedModel, draft: LoadedModel | None, prompt: BenchPrompt, tokens: list[int], *,
                  max_tokens: int, k_max: int, lookup_ngram: int,
                  cancelled: Callable[[], bool] | None = None) -> PromptTrace:
    """Record one prompt: the prompt's agreement, the target's greedy answer, then what each drafter proposes
    along it."""
    agreement = measure_prompt_agreement(target, draft, tokens) if draft is not None else None
    answer, ended = greedy_answer(target, tokens, max_tokens)
    target.clear()
    positions = len(answer) - 1  # a round starts after every committed token but the last
    draft_match, draft_p, draft_p10 = [], [], []
    if draft is not None:
        draft.clear()
        rollout = _Rollout(draft, k_max)
        for i in range(positions):
            if cancelled is not None and cancelled():
                raise TraceError("recording the trace was cancelled")
            context = tokens + answer[: i + 1]
            rollout.advance(context, answer[i])
            draft_match.append(accepted_count(rollout.tokens, answer[i + 1:]))
            draft_p.append(list(rollout.p))
            draft_p10.append(list(rollout.p10))
        draft.clear()
    lookup_len, lookup_match, lookup_agree = lookup_columns(tokens, answer, k_max, lookup_ngram)
    return PromptTrace(prompt.id, prompt.task, len(tokens), max_tokens, answer, ended, draft_match, draft_p,
                       draft_p10, lookup_len, lookup_match, lookup_agree, agreement)


def measure_prompt_agreement(target: LoadedModel, draft: LoadedModel, tokens: list[int]) -> float | None:
    """What auto measures at this prompt's prefill where decodes replay CUDA graphs (engine/generate.py:
    prompt_agreement), both caches cleared first, as for a new chat.  Recorded on any backend: a context
    that holds fewer rows of logits takes the prompt's last positions in several decodes."""
    rows = min(PROMPT_ROWS, len(tokens))
    mine = _choices_over(target, tokens, rows)
    theirs = _choices_over(draft, tokens, rows, target.n_vocab)
    return prompt_agreement(mine, theirs)


def _choices_over(model: LoadedModel, tokens: list[int], rows: int, n_vocab: int | None = None) -> tuple[int, ...]:
    """The model's greedy choice after each of the last ``rows`` tokens, decoded from an empty cache in as many
    decodes as its rows of logits need (the cache is cleared after)."""
    model.clear()
    model.decode(tokens[: len(tokens) - rows], logits="none")
    out: list[int] = []
    step = max(model.n_outputs, 1)
    for at in range(len(tokens) - rows, len(tokens), step):
        chunk = tokens[at : at + step]
        model.decode(chunk, logits=len(chunk))
        out += last_choices(model, len(chunk), n_vocab)
    model.clear()
    return tuple(out)


def lookup_columns(prompt: list[int], answer: list[int], k_max: int,
                   lookup_ngram: int) -> tuple[list[int], list[int], list[int]]:
    """Prompt lookup along the answer: each position's proposal length, accepted tokens and match length."""
    lookup = PromptLookupDrafter(lookup_ngram, k_max)
    lookup_len, lookup_match, lookup_agree = [], [], []
    for i in range(len(answer) - 1):
        proposal = lookup.propose(prompt + answer[: i + 1], k_max)
        lookup_len.append(len(proposal))
        lookup_match.append(accepted_count(proposal, answer[i + 1:]))
        lookup_agree.append(lookup.last_match if proposal else 0)
    return lookup_len, lookup_match, lookup_agree


def agreement_trace(alpha: float, *, prompts: int = 8, tokens: int = 256, k_max: int = DEFAULT_K_MAX,
                    prompt_tokens: int = 64, seed: int = 0) -> Trace:
    """What the GPU kit's agreement pairs (``scripts/gpu_kit.py pairs``) give, as a trace.

    The target is a fixed bigram cycle and the draft follows its bigram on a share ``alpha`` of the
    tokens: the draft's choice after token t is right exactly when t is one of those.  Along the
    target's path each token is one with probability ``alpha``, independently, so the draft's
    proposal at position i is right for as long as a run of such tokens starting at i lasts.  The
    draft's logits are peaked (its top probability is about 1 right or wrong, so a ``p_min`` stop
    never fires), and the cycle runs over the whole vocabulary, so prompt lookup finds nothing.
    """
    if not 0.0 <= alpha <= 1.0:
        raise TraceError(f"an agreement share is between 0 and 1, not {alpha:g}")
    if not 1 <= k_max <= MAX_K or not 2 <= tokens <= MAX_TOKENS or not 1 <= prompts <= 1000:
        raise TraceError("an agreement trace has 1-1000 prompts of 2-65536 tokens, drafting 1-64")
    rng = np.random.default_rng([seed, round(alpha * 1000)])
    # the prompt's agreement: its last positions are the same cycle, each one the draft's with chance alpha
    # (a stream of its own, so the answers' draws stay those of the traces recorded before it)
    prompt_rng = np.random.default_rng([seed, round(alpha * 1000), 1])
    rows = min(PROMPT_ROWS, prompt_tokens)
    task = f"a={alpha:.2f}"
    out = []
    for n in range(prompts):
        follows = rng.random(tokens) < alpha  # follows[i]: the draft's choice after answer token i is right
        run = np.zeros(tokens + 1, dtype=np.int64)
        for i in range(tokens - 1, -1, -1):
            run[i] = run[i + 1] + 1 if follows[i] else 0
        positions = tokens - 1
        draft_match = [int(min(run[i], k_max, tokens - 1 - i)) for i in range(positions)]
        out.append(PromptTrace(f"agree-{n}", task, prompt_tokens, tokens, list(range(tokens)), False,
                               draft_match, [[1000] * k_max for _ in range(positions)],
                               [[1000] * k_max for _ in range(positions)], [0] * positions, [0] * positions,
                               prompt_agreement=float(prompt_rng.binomial(rows, alpha)) / rows))
    return Trace(f"agreement-pair target (bigram cycle), {tokens} tokens", f"agreement-pair draft, alpha {alpha:g}",
                 k_max, 3, out, recorded="synthetic")


def record_trace(pair: SpeculativePair, prompts: Sequence[BenchPrompt], *, max_tokens: int,
                 k_max: int = DEFAULT_K_MAX, progress: Callable[[PromptTrace], None] | None = None) -> Trace:
    """The trace of every prompt with this pair (the draft model's part is empty without a draft)."""
    if not 1 <= k_max <= MAX_K:
        raise TraceError(f"a trace drafts 1 to {MAX_K} tokens, not {k_max}")
    t0 = time.perf_counter()
    recorded = now_utc()
    out = []
    for prompt in prompts:
        tokens = pair.chat_prompt(list(prompt.messages)).tokens
        pt = record_prompt(pair.target, pair.draft, prompt, tokens, max_tokens=max_tokens, k_max=k_max,
                           lookup_ngram=pair.controller.settings.lookup_ngram)
        out.append(pt)
        if progress is not None:
            progress(pt)
    pair.target.clear()
    return Trace(pair.target.path.name, pair.draft.path.name if pair.draft is not None else "", k_max,
                 pair.controller.settings.lookup_ngram, out, recorded=recorded, seconds=time.perf_counter() - t0)


# -- reading --------------------------------------------------------------------


def _fail(source: str, what: str) -> TraceError:
    return TraceError(f"{source}: not a SpecChat agreement trace ({what})")


def _int_list(v: object, *, lo: int, hi: int) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in v)


def _prompt_from(doc: object, k_max: int, source: str, n: int) -> PromptTrace:
    if not isinstance(doc, dict):
        raise _fail(source, f"prompt {n} is not an object")
    where = f"prompt {n} ({str(doc.get('id', '?'))[:60]})"
    tokens = doc.get("tokens")
    if not _int_list(tokens, lo=0, hi=1 << 31) or not 1 <= len(tokens) <= MAX_TOKENS:  # type: ignore[arg-type]
        raise _fail(source, f"{where}: 'tokens' must be a list of 1 to {MAX_TOKENS} token ids")
    assert isinstance(tokens, list)
    positions = len(tokens) - 1
    for key in ("draft_match", "lookup_len", "lookup_match"):
        v = doc.get(key)
        if not _int_list(v, lo=0, hi=k_max) or len(v) not in ((0, positions) if key == "draft_match"  # type: ignore[arg-type]
                                                              else (positions,)):
            raise _fail(source, f"{where}: '{key}' must hold {positions} whole numbers from 0 to {k_max}")
    with_draft = bool(doc["draft_match"])
    for key in ("draft_p", "draft_p10"):
        v = doc.get(key)
        if not isinstance(v, list) or len(v) != (positions if with_draft else 0) or \
                not all(_int_list(row, lo=0, hi=1000) and len(row) <= k_max for row in v):
            raise _fail(source, f"{where}: '{key}' must hold a list of up to {k_max} thousandths per position")
    agree = doc.get("lookup_agree", [])
    if not _int_list(agree, lo=0, hi=1 << 20) or len(agree) not in (0, positions):
        raise _fail(source, f"{where}: 'lookup_agree' must hold {positions} whole numbers, or be left out")
    if any(m > ln for m, ln in zip(doc["lookup_match"], doc["lookup_len"], strict=True)):
        raise _fail(source, f"{where}: a lookup match is longer than its proposal")
    if with_draft and any(m > len(row) for m, row in zip(doc["draft_match"], doc["draft_p"], strict=True)):
        raise _fail(source, f"{where}: a draft match is longer than the draft")
    if any(m > positions - i for key in ("draft_match", "lookup_match") for i, m in enumerate(doc[key])):
        raise _fail(source, f"{where}: a draft match runs past the end of the answer")
    prompt_tokens, max_tokens = doc.get("prompt_tokens"), doc.get("max_tokens")
    if not _int_list([prompt_tokens, max_tokens], lo=1, hi=1 << 31) or len(tokens) > max_tokens:  # type: ignore[operator]
        raise _fail(source, f"{where}: 'prompt_tokens' and 'max_tokens' must be whole numbers, "
                            "the answer no longer than max_tokens")
    ended = doc.get("ended")
    if not isinstance(ended, bool):
        raise _fail(source, f"{where}: 'ended' must be true or false")
    agreement = doc.get("prompt_agreement")
    if agreement is not None and (isinstance(agreement, bool) or not isinstance(agreement, int | float)
                                  or not 0.0 <= agreement <= 1.0):
        raise _fail(source, f"{where}: 'prompt_agreement' must be a share from 0 to 1, or be left out")
    return PromptTrace(str(doc.get("id", f"prompt{n}"))[:200], str(doc.get("task", "custom"))[:60],
                       int(prompt_tokens), int(max_tokens), list(tokens), ended,  # type: ignore[arg-type]
                       list(doc["draft_match"]), [list(r) for r in doc["draft_p"]],
                       [list(r) for r in doc["draft_p10"]], list(doc["lookup_len"]), list(doc["lookup_match"]),
                       list(agree), None if agreement is None else float(agreement))


def load_trace(path: Path) -> Trace:
    source = str(path)
    try:
        raw, more = files.read_capped(path, MAX_TRACE_BYTES)
    except FileNotFoundError:
        raise TraceError(f"{source}: no such trace file") from None
    except OSError as exc:
        raise TraceError(f"{source}: cannot read the trace ({exc.strerror or exc})") from None
    if more:
        raise _fail(source, f"larger than {MAX_TRACE_BYTES >> 20} MiB")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _fail(source, f"not UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise _fail(source, "nested too deeply") from None
    except ValueError as exc:
        raise _fail(source, f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != TRACE_FORMAT:
        raise _fail(source, f"no \"format\": \"{TRACE_FORMAT}\"")
    if doc.get("version") != TRACE_VERSION:
        raise TraceError(f"{source}: trace version {str(doc.get('version'))[:20]} (this SpecChat reads version "
                         f"{TRACE_VERSION}; record it again with 'specchat bench --trace')")
    k_max, ngram = doc.get("k_max"), doc.get("lookup_ngram")
    if not _int_list([k_max, ngram], lo=1, hi=MAX_K):
        raise _fail(source, f"'k_max' and 'lookup_ngram' must be whole numbers from 1 to {MAX_K}")
    prompts = doc.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        raise _fail(source, "no prompts")
    seconds = doc.get("seconds", 0.0)
    return Trace(str(doc.get("target", ""))[:200], str(doc.get("draft", ""))[:200], int(k_max), int(ngram),  # type: ignore[arg-type]
                 [_prompt_from(p, int(k_max), source, n) for n, p in enumerate(prompts, 1)],  # type: ignore[arg-type]
                 specchat=str(doc.get("specchat", ""))[:40], recorded=str(doc.get("recorded", ""))[:40],
                 seconds=float(seconds) if isinstance(seconds, int | float) and math.isfinite(seconds) else 0.0)


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
