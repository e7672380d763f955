"""What speculation buys per task tag, accumulated over every finished answer.

Whether drafting pays depends on the kind of text: code and JSON repeat themselves and
are easy to guess, creative writing is not.  Each finished answer ("done" or "stopped")
leaves one row in ``task_runs`` with raw counts, never ratios, so that totals are exact:
the counts of a tag are summed, then :mod:`specchat.metrics` turns the sums into token
and sequence acceptance, decode tok/s and the multiplier (speculative vs plain decode
tok/s of the same tag), exactly as it does for one answer.

Plain means mode "off" (the chat setting) or "baseline" (the engine's name for it); every
other mode (draft, lookup, auto) counts as speculative.  Rows outlive their chats: they
describe the machine and the models, not the conversation.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specchat import metrics

from .db import transaction

if TYPE_CHECKING:
    from .chats import Store
    from .records import MessageStats

PLAIN_MODES = ("off", "baseline")
TASK_TAGS = ("code", "chat", "json", "summary", "creative")  # the built-in tags; any other text is allowed


@dataclass(frozen=True, slots=True)
class TaskRow:
    tag: str
    answers: int  # finished answers with a measurable decode phase
    plain_answers: int
    speculative_answers: int
    tokens: int  # tokens emitted, all modes
    drafted: int  # speculative answers only
    accepted: int
    token_acceptance: float | None  # None: nothing drafted yet
    sequence_acceptance: float | None  # None: no round had a draft
    plain_tok_s: float | None  # None: no plain answer yet
    speculative_tok_s: float | None  # None: no speculative answer yet
    multiplier: float | None  # None if either speed is missing


def record_run(
    conn: sqlite3.Connection,
    message_id: int | None,
    tag: str,
    stats: MessageStats,
    *,
    target: Path | str | None = None,
    draft: Path | str | None = None,
    created_at: float,
) -> bool:
    """Add one answer's counts (inside the caller's transaction); False if unmeasurable.

    An answer with fewer than two tokens or no decode time has no decode speed, and
    would only dilute the totals.
    """
    if stats.tokens < 2 or stats.decode_s <= 0:
        return False
    conn.execute(
        "INSERT INTO task_runs (message_id, tag, mode, target, draft, tokens, decode_s, drafted, accepted,"
        " rounds_with_draft, rounds_fully_accepted, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            message_id,
            tag,
            stats.mode or "off",
            str(target) if target else None,
            str(draft) if draft else None,
            stats.tokens,
            stats.decode_s,
            stats.drafted,
            stats.accepted,
            stats.rounds_with_draft,
            stats.rounds_fully_accepted,
            created_at,
        ),
    )
    return True


def task_table(store: Store, *, target: Path | str | None = None) -> list[TaskRow]:
    """One row per task tag: built-in tags first (in their usual order), then the user's.

    Speeds measured with different target models are not comparable, so the window
    should pass the current ``target`` to get a multiplier for the model in use; without
    it every answer is counted.
    """
    sql = (
        "SELECT tag, mode IN (?, ?) AS plain, count(*) AS answers, sum(tokens) AS tokens,"
        " sum(tokens - 1) AS decoded, sum(decode_s) AS decode_s, sum(drafted) AS drafted,"
        " sum(accepted) AS accepted, sum(rounds_with_draft) AS rwd, sum(rounds_fully_accepted) AS rfa"
        " FROM task_runs"
    )
    params: list[object] = list(PLAIN_MODES)
    if target is not None:
        sql += " WHERE target = ?"
        params.append(str(target))
    sql += " GROUP BY tag, plain"
    by_tag: dict[str, dict[bool, sqlite3.Row]] = {}
    for row in store.connection.execute(sql, params).fetchall():
        by_tag.setdefault(row["tag"], {})[bool(row["plain"])] = row

    def order(tag: str) -> tuple[int, str]:
        return (TASK_TAGS.index(tag), "") if tag in TASK_TAGS else (len(TASK_TAGS), tag.casefold())

    table = []
    for tag in sorted(by_tag, key=order):
        plain, spec = by_tag[tag].get(True), by_tag[tag].get(False)
        plain_tok_s = _tok_s(plain)
        spec_tok_s = _tok_s(spec)
        drafted = spec["drafted"] if spec else 0
        accepted = spec["accepted"] if spec else 0
        rwd = spec["rwd"] if spec else 0
        table.append(
            TaskRow(
                tag=tag,
                answers=(plain["answers"] if plain else 0) + (spec["answers"] if spec else 0),
                plain_answers=plain["answers"] if plain else 0,
                speculative_answers=spec["answers"] if spec else 0,
                tokens=(plain["tokens"] if plain else 0) + (spec["tokens"] if spec else 0),
                drafted=drafted,
                accepted=accepted,
                token_acceptance=metrics.token_acceptance(accepted, drafted),
                sequence_acceptance=metrics.sequence_acceptance(spec["rfa"] if spec else 0, rwd),
                plain_tok_s=plain_tok_s,
                speculative_tok_s=spec_tok_s,
                multiplier=metrics.multiplier(spec_tok_s, plain_tok_s),
            )
        )
    return table


def reset_task_stats(store: Store, tag: str | None = None) -> int:
    """Forget the measurements (of one tag, or all); returns how many answers were dropped."""
    with transaction(store.connection) as conn:
        if tag is None:
            cur = conn.execute("DELETE FROM task_runs")
        else:
            cur = conn.execute("DELETE FROM task_runs WHERE tag = ?", (tag,))
    return cur.rowcount


def _tok_s(row: sqlite3.Row | None) -> float | None:
    return metrics.decode_tok_s(row["decoded"], row["decode_s"]) if row is not None else None
