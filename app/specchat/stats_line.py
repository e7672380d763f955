"""The stats line under an answer: what it measured, in words, and nothing it did not measure.
One formatter for the window's footers and ``specchat chat``'s last line (Qt-free).

Time to first token, decode speed, tokens, which drafter ran (and, when ``auto`` refused one,
why), accepted of drafted tokens, the multiplier over plain decoding and why it stopped.  The
multiplier is shown only against the plain runs of the same pair nearest in time, at least
:data:`~specchat.store.MIN_PLAIN_RUNS` of them (:func:`specchat.store.plain_reference`), with how
many it rests on and the spread over them; below that it says how many are still missing.
"""

from __future__ import annotations

from specchat.engine.controller import RECHECKED
from specchat.engine.settings import StructuredOutput
from specchat.metrics import runs_phrase
from specchat.modes import PLAIN_MODE, Drafter, Mode
from specchat.store import MessageStats, PlainReference

# why an answer stopped (engine.events.StopReason values), in words
STOP_WORDS = {
    "eog": "the model finished",
    "stop_string": "a stop string",
    "max_tokens": "the token limit",
    "context_full": "the context is full",
    "cancelled": "stopped by you",
    "error": "an error",
}
DRAFTER_WORDS = {Drafter.MODEL.value: "draft model", Drafter.LOOKUP.value: "lookup"}


def stats_line(stats: MessageStats | None, state: str | None, reference: PlainReference | None = None) -> str:
    """The footer of a stored answer; ``reference``: the plain runs its multiplier rests on
    (None: it has none to rest on, a plain answer or a server's)."""
    if stats is None:
        return {"streaming": "generating…", "stopped": "stopped", "error": "error"}.get(state or "", "")
    if stats.error:
        return f"error: {stats.error}"
    parts = [f"{stats.decode_tok_s:.1f} tok/s", f"{stats.tokens} tokens"]
    if stats.prefill_s > 0:
        parts.append(f"first token {_seconds(stats.prefill_s)}")
    parts.append(drafter_text(stats))
    if stats.token_acceptance is not None:
        parts.append(f"{stats.token_acceptance:.0%} draft accepted ({stats.accepted} of {stats.drafted} drafted)")
        parts.append(f"mean K {stats.mean_k:.1f}")
    parts.append(stats.phases.summary())  # reasoning and answer apart, when the answer reasoned
    parts.append(StructuredOutput(stats.structured, "").label if stats.structured else "")  # acceptance is under it
    parts.append(vs_plain(stats, reference))
    parts.append(threads_text(stats))
    parts.append(f"stop: {STOP_WORDS.get(stats.stop_reason, stats.stop_reason)}" if stats.stop_reason else "")
    parts.append(context_text(stats))
    return " · ".join(p for p in parts if p)


def drafter_text(stats: MessageStats) -> str:
    """Which drafter ran: "auto used lookup: the draft model cannot pay here, best case 0.80x"."""
    mode = stats.mode or ""
    if mode == PLAIN_MODE:
        return "plain decoding"
    notes = "; ".join(folded_notes(stats.notes))
    if not stats.drafters:
        if stats.drafted:  # an answer stored before drafters were recorded, or a server's (with auto's why)
            return f"{mode}: {notes}" if notes else mode
        used = "drafted nothing" if mode == Mode.AUTO.value else "nothing drafted"
    elif len(stats.drafters) == 1:
        used = DRAFTER_WORDS.get(stats.drafters[0][0], stats.drafters[0][0])
    else:
        used = " and ".join(f"{DRAFTER_WORDS.get(n, n)} ({d} drafted)" for n, d, _ in stats.drafters)
    if mode == Mode.AUTO.value and stats.drafters:
        used = f"auto used {used}"
    elif mode == Mode.AUTO.value:
        used = f"auto {used}"
    return f"{used}: {notes}" if notes else used


def folded_notes(notes: tuple[str, ...]) -> list[str]:
    """An answer's notes with auto's repeated re-checks folded into the last one ("re-checked 5 times, last at
    1.87x the calibrated costs"): a long answer on a drifting machine re-checks every few rounds."""
    at = [i for i, n in enumerate(notes) if n.startswith(RECHECKED)]
    if len(at) < 2:
        return list(notes)
    return [f"re-checked {len(at)} times, last at {n[len(RECHECKED):]}" if i == at[-1] else n
            for i, n in enumerate(notes) if i == at[-1] or i not in at]


def vs_plain(stats: MessageStats, reference: PlainReference | None) -> str:
    """"1.42x vs plain (5 plain runs, 1.30-1.51x)", or what is missing for one."""
    if reference is None or stats.mode == PLAIN_MODE:
        return ""
    if stats.busy:  # its own rate was measured beside other work: no multiplier claimed from it
        return "vs plain: not claimed (this answer ran on a busy machine)"
    x = reference.multiplier(stats.counts.decode_tok_s)
    spread = reference.spread(stats.counts.decode_tok_s)
    if x is None or spread is None:
        return f"vs plain: not measured yet ({runs_phrase(reference.runs)})"
    lo, hi = spread
    return f"{x:.2f}x vs plain ({runs_phrase(reference.runs)}, {lo:.2f}–{hi:.2f}x)"


def threads_text(stats: MessageStats) -> str:
    """"1 of 2 threads: other work held the rest" when the answer ran on fewer threads than it was loaded
    with (engine/threads.py); "" when it ran on all of them or was not fitted."""
    if stats.threads is None or stats.threads[0] >= stats.threads[1]:
        return ""
    fewest, most = stats.threads
    return f"{fewest} of {most} threads: other work held the rest"


def _seconds(s: float) -> str:
    if s < 0.01:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


def context_text(stats: MessageStats) -> str:
    """How much of the context the answer used (its prompt and its tokens), and what the chat's
    context policy left out of the prompt; "" where the context is not known."""
    if not stats.n_ctx:
        return ""
    # the last token is sampled, not decoded: an answer that filled the context counts n_ctx + 1
    used = f"context {min(stats.prompt_tokens + stats.tokens, stats.n_ctx):,} / {stats.n_ctx:,}"
    if stats.left_out:
        used += f" ({stats.left_out} earlier message{'s' if stats.left_out != 1 else ''} not sent)"
    return used
