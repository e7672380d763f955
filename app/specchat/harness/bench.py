"""The benchmark: plain vs speculative decode speed on the same prompts, same run.

Modes run interleaved per prompt and repeat, in alternating order (so drift on
a shared machine hits every mode alike), caches are cleared before every run
(prefill is measured fresh), and per (prompt, mode) the median run of the
repeats counts.  Multipliers are ratios of rates measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from specchat import metrics
from specchat.engine.events import Done, Error, Event, Fallback, RoundStats, TokensEmitted
from specchat.engine.pair import SpeculativePair
from specchat.engine.settings import Drafter, Mode, SamplingSettings, Structured, StructuredOutput
from specchat.metrics import Counts, CountsView
from specchat.modes import MODE_DRAFTERS

from .suite import BenchPrompt


@dataclass(frozen=True, slots=True)
class BenchRun(CountsView):
    """One generation of the benchmark: what it wrote and its counts (the figures are read from them)."""

    mode: str
    task: str
    prompt_id: str
    repeat: int
    token_ids: list[int]
    output: str
    stop_reason: str
    fallbacks: list[str]
    counts: Counts = Counts()

    def to_json(self) -> dict:
        """The per-run keys of the command line contract (docs/ARCHITECTURE.md), then every raw count."""
        return {
            "mode": self.mode, "task": self.task, "prompt_id": self.prompt_id, "repeat": self.repeat,
            "tokens": self.tokens, "token_ids": list(self.token_ids), "output": self.output,
            "decode_tok_s": self.decode_tok_s, "prefill_tok_s": self.prefill_tok_s, "drafted": self.drafted,
            "accepted": self.accepted, "token_acceptance": self.token_acceptance,
            "sequence_acceptance": self.sequence_acceptance, "rounds": self.rounds, "decode_s": self.decode_s,
            "draft_s": self.draft_s, "verify_s": self.verify_s, "overhead_s": self.overhead_s,
            "mean_k": self.mean_k, "stop_reason": self.stop_reason, "fallbacks": list(self.fallbacks),
            **self.counts.to_dict(),
        }

    @classmethod
    def from_json(cls, doc: dict) -> BenchRun:
        """Read a run back.  A file from before the counts were complete gets ``decoded`` from ``tokens``;
        other counts it lacks are 0, so the figures that need them are undefined (a dash), not guessed."""
        counts = Counts.from_dict(doc)
        if "decoded" not in doc:
            counts = replace(counts, decoded=metrics.decoded_tokens(counts.tokens) if counts.decode_s > 0 else 0)
        return cls(mode=doc["mode"], task=doc["task"], prompt_id=doc["prompt_id"], repeat=int(doc.get("repeat", 0)),
                   token_ids=list(doc.get("token_ids", [])), output=doc.get("output", ""),
                   stop_reason=doc.get("stop_reason", ""), fallbacks=list(doc.get("fallbacks", [])), counts=counts)


@dataclass(frozen=True, slots=True)
class BenchRow:
    task: str
    mode: str
    decode_tok_s: float
    multiplier: float | None
    token_acceptance: float | None
    sequence_acceptance: float | None
    prefill_tok_s: float
    mean_k: float
    overhead_share: float  # overhead / decode time
    tokens: int
    # the multiplier's 95% interval from the runs paired with the base's (same prompt and repeat): the
    # geometric mean of the pairs' ratios and its low and high end (metrics.paired_interval); None: fewer
    # than two pairs
    paired: tuple[float, float, float] | None = None


def run_one(pair: SpeculativePair, prompt: BenchPrompt, mode: Mode, repeat: int, *, max_tokens: int,
            sampling: SamplingSettings, rounds: list[RoundStats] | None = None, first_sight: bool = False) -> BenchRun:
    """One generation from cold caches; its rounds are appended to ``rounds`` when given."""
    runner = local_runner(pair, mode, max_tokens=max_tokens, sampling=sampling, first_sight=first_sight)
    return collect_run(runner(prompt), mode.value, prompt, repeat, rounds=rounds)


Runner = Callable[[BenchPrompt], Iterable[Event]]
"""One contender of a bench: a prompt's answer as engine events (the local engine in a mode, or a server)."""


def prompt_sampling(prompt: BenchPrompt, sampling: SamplingSettings) -> SamplingSettings:
    """``sampling``, held to the prompt's schema when the prompt is run under it."""
    if not prompt.constrained:
        return sampling
    return replace(sampling, structured=StructuredOutput(Structured.JSON_SCHEMA, prompt.schema))


def memory_line(modes: Sequence[Mode], first_sight: bool, *, servers: bool = False) -> str:
    """What the bench's header says of prompt lookup's memory of earlier answers (it can copy one)."""
    if not any(Drafter.LOOKUP in MODE_DRAFTERS[m] for m in modes):
        return "lookup memory: no mode here uses prompt lookup"
    if first_sight:
        return ("lookup memory: emptied before every run (--first-sight): each is measured as a session's first "
                "question" + ("; a server keeps its own (llama-server's ngram-mod pool)" if servers else ""))
    return ("lookup memory: kept across runs: a repeat, or a prompt whose answer resembles an earlier one, can copy "
            "it as Regenerate does (--first-sight measures every run as new)")


def local_runner(pair: SpeculativePair, mode: Mode, *, max_tokens: int, sampling: SamplingSettings,
                 first_sight: bool = False) -> Runner:
    """``first_sight``: every run starts with prompt lookup's memory of earlier answers emptied, so a repeat
    (or a prompt whose answer looks like an earlier one) is measured as a session's first question; without
    it a repeat can copy the earlier answer, as Regenerate does."""
    def run(prompt: BenchPrompt) -> Iterable[Event]:
        if first_sight:
            pair.forget_answers()
        pair.target.clear()
        if pair.draft is not None:
            pair.draft.clear()
        tokens = pair.chat_prompt(list(prompt.messages)).tokens
        return pair.generate(tokens, mode=mode, sampling=prompt_sampling(prompt, sampling), max_tokens=max_tokens)
    return run


def collect_run(events: Iterable[Event], label: str, prompt: BenchPrompt, repeat: int, *,
                rounds: list[RoundStats] | None = None) -> BenchRun:
    """One answer's events as a bench run (an Error ends the bench: a run that failed has no figures)."""
    ids: list[int] = []
    text: list[str] = []
    fallbacks: list[str] = []
    done: Done | None = None
    for ev in events:
        if isinstance(ev, TokensEmitted):
            ids.extend(ev.token_ids)
            text.append(ev.text)
        elif isinstance(ev, Fallback):
            fallbacks.append(ev.reason)
        elif isinstance(ev, RoundStats) and rounds is not None:
            rounds.append(ev)
        elif isinstance(ev, Error):
            raise RuntimeError(f"{prompt.id} ({label}): {ev.message}")
        elif isinstance(ev, Done):
            done = ev
    assert done is not None
    return BenchRun(mode=label, task=prompt.task, prompt_id=prompt.id, repeat=repeat, token_ids=ids,
                    output="".join(text), stop_reason=done.stop_reason.value, fallbacks=fallbacks,
                    counts=done.stats.counts)


def run_contenders(contenders: Sequence[tuple[str, Runner]], prompts: Sequence[BenchPrompt], *, repeat: int,
                   progress: Callable[[BenchRun], None] | None = None) -> list[BenchRun]:
    """Every contender on every prompt, interleaved and in alternating order like :func:`run_bench`."""
    runs: list[BenchRun] = []
    for prompt in prompts:
        for r in range(repeat):
            for label, runner in (contenders if r % 2 == 0 else list(reversed(contenders))):
                run = collect_run(runner(prompt), label, prompt, r)
                runs.append(run)
                if progress:
                    progress(run)
    return runs


@dataclass(frozen=True, slots=True)
class ReferenceRun:
    """llama-bench-style raw decode right after a baseline run: same prompt, depth and token count."""

    prompt_id: str
    repeat: int
    tokens: int
    raw_decode_tok_s: float
    baseline_decode_tok_s: float

    @property
    def ratio(self) -> float:
        return self.baseline_decode_tok_s / self.raw_decode_tok_s if self.raw_decode_tok_s else 0.0


def run_bench(pair: SpeculativePair, prompts: Sequence[BenchPrompt], modes: Sequence[Mode], *, max_tokens: int,
              repeat: int, sampling: SamplingSettings, reference: bool = False,
              progress: Callable[[BenchRun], None] | None = None,
              rounds: list[RoundStats] | None = None, first_sight: bool = False
              ) -> tuple[list[BenchRun], list[ReferenceRun]]:
    """Every run of the schedule; each run's rounds are appended to ``rounds`` when given (a cost profile
    of this machine is made from them)."""
    runs: list[BenchRun] = []
    refs: list[ReferenceRun] = []
    for prompt in prompts:
        for r in range(repeat):
            # forward on even repeats, backward on odd ones: a drift during the run hits every mode alike
            for mode in (modes if r % 2 == 0 else list(reversed(modes))):
                run = run_one(pair, prompt, mode, r, max_tokens=max_tokens, sampling=sampling, rounds=rounds,
                              first_sight=first_sight)
                runs.append(run)
                if progress:
                    progress(run)
                if reference and mode is Mode.BASELINE and run.tokens > 1:
                    tokens = pair.chat_prompt(list(prompt.messages)).tokens
                    raw = raw_decode_rate(pair, tokens, run.tokens - 1)
                    refs.append(ReferenceRun(prompt.id, r, run.tokens, raw, run.decode_tok_s))
    return runs, refs


def median_runs(runs: Sequence[BenchRun]) -> list[BenchRun]:
    """Per (prompt, mode), the run with the median decode speed."""
    groups: dict[tuple[str, str], list[BenchRun]] = {}
    for run in runs:
        groups.setdefault((run.prompt_id, run.mode), []).append(run)
    out = []
    for group in groups.values():
        ordered = sorted(group, key=lambda r: r.decode_tok_s)
        out.append(ordered[(len(ordered) - 1) // 2])
    return out


def summarize(runs: Sequence[BenchRun], modes: Sequence[Mode | str], *, base: str = Mode.BASELINE.value
              ) -> list[BenchRow]:
    """Per task and mode (and "all"), the median runs' counts pooled: the figures of the sums.
    Multipliers are against the ``base`` mode's runs (plain decoding)."""
    med = median_runs(runs)
    tasks = list(dict.fromkeys(r.task for r in med)) + ["all"]
    rows = []
    labels = [m.value if isinstance(m, Mode) else str(m) for m in modes]
    for task in tasks:
        base_runs = [r for r in med if r.mode == base and task in ("all", r.task)]
        base_rate = Counts.total(r.counts for r in base_runs).decode_tok_s if base_runs else None
        # every run, not the medians: the interval is of the pairs measured side by side
        base_by_run = {(r.prompt_id, r.repeat): r.decode_tok_s for r in runs
                       if r.mode == base and task in ("all", r.task)}
        for label in labels:
            sel = [r for r in med if r.mode == label and task in ("all", r.task)]
            if not sel:
                continue
            total = Counts.total(r.counts for r in sel)
            pairs = [(r.decode_tok_s, base_by_run[(r.prompt_id, r.repeat)]) for r in runs
                     if r.mode == label and task in ("all", r.task) and (r.prompt_id, r.repeat) in base_by_run]
            rows.append(BenchRow(
                task=task, mode=label, decode_tok_s=total.decode_tok_s or 0.0,
                multiplier=metrics.multiplier(total.decode_tok_s, base_rate),
                token_acceptance=total.token_acceptance, sequence_acceptance=total.sequence_acceptance,
                prefill_tok_s=total.prefill_tok_s or 0.0, mean_k=total.mean_k or 0.0,
                overhead_share=metrics.ratio(total.overhead_s, total.decode_s) or 0.0, tokens=total.tokens,
                paired=metrics.paired_interval(pairs) if label != base else None,
            ))
    return rows


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def interval_text(paired: tuple[float, float, float] | None) -> str:
    """A multiplier's paired 95% interval in a table cell ("0.91-1.03"), or a dash."""
    return "-" if paired is None else f"{paired[1]:.2f}-{paired[2]:.2f}"


def format_table(rows: Sequence[BenchRow]) -> str:
    """The bench's table.  "95% paired" is the range the multiplier's true value lies in, judged from how
    much the ratio varied between the prompts and repeats run side by side (at least two of them)."""
    width = max([9] + [len(r.mode) for r in rows])
    head = f"{'task':<9} {'mode':<{width}} {'decode tok/s':>12} {'x plain':>8} {'95% paired':>10} {'tok acc':>8} " \
           f"{'seq acc':>8} {'mean K':>7} {'overhead':>9} {'prefill tok/s':>13}"
    lines = [head, "-" * len(head)]
    last = None
    for r in rows:
        if last is not None and r.task != last:
            lines.append("")
        last = r.task
        mult = "-" if r.multiplier is None else f"{r.multiplier:.2f}x"
        lines.append(
            f"{r.task:<9} {r.mode:<{width}} {r.decode_tok_s:>12.1f} {mult:>8} {interval_text(r.paired):>10} "
            f"{_pct(r.token_acceptance):>8} "
            f"{_pct(r.sequence_acceptance):>8} {r.mean_k:>7.1f} {r.overhead_share:>9.1%} {r.prefill_tok_s:>13.1f}"
        )
    return "\n".join(lines)


def raw_decode_rate(pair: SpeculativePair, prompt_tokens: Sequence[int], n_tokens: int) -> float:
    """llama-bench-style plain decode: single-token llama_decode calls, no sampling, no Python loop logic.

    The reference for "plain decoding within 3% of llama.cpp's own speed": same
    model, same context, same threads, same depth, in the same process.
    """
    m = pair.target
    m.clear()
    m.decode(list(prompt_tokens), logits="last")
    tok = int(prompt_tokens[-1])
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        m.decode([tok], logits="last")
        m.logits(-1)
    dt = time.perf_counter() - t0
    m.clear()
    return n_tokens / dt
