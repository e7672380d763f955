"""What speculation buys per task tag, accumulated over every finished answer.

Whether drafting pays depends on the kind of text: code and JSON repeat themselves and
are easy to guess, creative writing is not.  Each finished answer ("done" or "stopped")
leaves one row in ``task_runs`` holding its :class:`~specchat.metrics.Counts`, one column
per count and never a ratio, so that totals are exact: the counts of a tag are summed
in SQL, and the sums' own figures (token and sequence acceptance, decode tok/s) are the
table's.  The multiplier is speculative vs plain decode tok/s of the same tag and target model,
shown only once each side rests on :data:`~specchat.metrics.MIN_PLAIN_RUNS` answers.

Plain means mode "baseline" (schema 1 also wrote "off"; the migration renamed it);
every other mode (draft, lookup, auto) counts as speculative.  Rows outlive their chats:
they describe the machine and the models, not the conversation.

Each run keeps the machine's verdict while it was measured (``busy``: 1 busy, 0 quiet, NULL not
judged, every run from before schema 7; :mod:`specchat.engine.contention` judges).  A busy run's timings
are other work's as much as the models': the table's figures and a pair's plain reference leave it out,
and the table says how many it left out (:attr:`TaskRow.busy_runs`).

Versions (regenerate, edit: chats.py) neither copy nor drop rows: an answer paged away keeps
its message id and its one row, so it counts once, shown or not, in the table and in its pair's
plain reference (it measured the machine as truly as the answer that replaced it).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from specchat import metrics
from specchat.metrics import ANSWER, COUNT_FIELDS, MIN_PLAIN_RUNS, REASONING, Counts, PhaseSplit

from .db import transaction
from .records import PLAIN_MODE, TASK_TAGS, normalize_mode

if TYPE_CHECKING:
    from .records import MessageStats

log = logging.getLogger(__name__)


class _Database(Protocol):
    """What the task statistics read: the store's connection (a Store; no import of it, no circle)."""

    @property
    def connection(self) -> sqlite3.Connection: ...

__all__ = ["MIN_PLAIN_RUNS", "PLAIN_MODE", "TASK_TAGS", "PlainReference", "TaskRow", "mode_runs", "pair_plain_runs",
           "plain_reference", "record_run", "reset_task_stats", "task_table"]

PLAIN_RUNS = 10  # the plain runs nearest in time that a reference pools (machine load drifts)

# A stored run is read only when every count has its declared type and a sane range: a whole number of
# tokens or rounds up to 2^40 (no answer comes near; the sums of 2^23 such runs still fit SQLite's 64
# bits), and a finite number of seconds up to 10^9 (SQLite keeps an infinity; NaN it stores as NULL).
# Any other row (written by hand, or by a SpecChat that had a bug) is left out of every figure, and
# said in one line.
RUN_MAX_COUNT = 1 << 40
RUN_MAX_SECONDS = 1e9


def _valid_run(alias: str = "", *, run: bool = True) -> str:
    """SQL that is true for a row of task_runs (``run``; else of task_phase_runs) whose counts may be
    summed and whose tag and models are text."""
    terms = [f"typeof({alias}tag) = 'text' AND ({alias}target IS NULL OR typeof({alias}target) = 'text')"] if run else []
    for name, kind in metrics.FIELD_KINDS.items():
        col = f"{alias}{name}"
        if kind is float:
            terms.append(f"typeof({col}) IN ('integer', 'real') AND {col} BETWEEN 0 AND {RUN_MAX_SECONDS!r}")
        else:
            terms.append(f"typeof({col}) = 'integer' AND {col} BETWEEN 0 AND {RUN_MAX_COUNT}")
    return "(" + " AND ".join(terms) + ")"


VALID_RUN = _valid_run()
def _busy(alias: str = "") -> str:
    """SQL that is true for a run measured on a busy machine (NULL, 0, or anything else: counted)."""
    return f"({alias}busy IS 1)"


BUSY = _busy()


def _storable(c: Counts) -> bool:
    """The counts are what :data:`VALID_RUN` reads back."""
    try:
        c.check()
    except ValueError:
        return False
    return all(getattr(c, f) <= (RUN_MAX_SECONDS if kind is float else RUN_MAX_COUNT)
               for f, kind in metrics.FIELD_KINDS.items())


def _say_skipped(conn: sqlite3.Connection) -> None:
    """One line when some stored runs do not read (they are left out of the figures)."""
    bad = conn.execute(f"SELECT count(*) FROM task_runs WHERE NOT {VALID_RUN}").fetchone()[0]
    if bad:
        log.warning("task statistics: %d stored run(s) hold counts that are not numbers in range, or a tag or "
                    "model that is not text; left out", bad)


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One tag's answers, pooled: the plain ones and the speculative ones apart."""

    tag: str
    plain_answers: int  # finished answers with a measurable decode phase
    speculative_answers: int
    plain: Counts  # the plain answers' counts, summed
    speculative: Counts  # the speculative answers' counts, summed
    phases: PhaseSplit = PhaseSplit()  # the speculative answers' rounds in and after a reasoning block
    target: str | None = None  # the target model file (speeds of two targets never pool)
    busy_runs: int = 0  # runs of this tag and target measured on a busy machine: left out of every figure

    @property
    def answers(self) -> int:
        return self.plain_answers + self.speculative_answers

    @property
    def tokens(self) -> int:  # tokens emitted, all modes
        return self.plain.tokens + self.speculative.tokens

    @property
    def drafted(self) -> int:
        return self.speculative.drafted

    @property
    def accepted(self) -> int:
        return self.speculative.accepted

    @property
    def token_acceptance(self) -> float | None:  # None: nothing drafted yet
        return self.speculative.token_acceptance

    @property
    def sequence_acceptance(self) -> float | None:  # None: no round had a draft
        return self.speculative.sequence_acceptance

    @property
    def plain_tok_s(self) -> float | None:  # None: no plain answer yet
        return self.plain.decode_tok_s

    @property
    def speculative_tok_s(self) -> float | None:  # None: no speculative answer yet
        return self.speculative.decode_tok_s

    @property
    def enough(self) -> bool:
        """Both sides rest on :data:`MIN_PLAIN_RUNS` answers or more: the multiplier is a figure, not noise."""
        return min(self.plain_answers, self.speculative_answers) >= MIN_PLAIN_RUNS

    @property
    def multiplier(self) -> float | None:
        """Speculative over plain decode tok/s; None while either side has under :data:`MIN_PLAIN_RUNS` answers."""
        return metrics.multiplier(self.speculative_tok_s, self.plain_tok_s) if self.enough else None


@dataclass(frozen=True, slots=True)
class PlainReference:
    """The plain runs an answer's "x vs plain" rests on: of the same pair (target and draft files),
    the :data:`PLAIN_RUNS` nearest to it in time (what else loaded the machine changes with time)."""

    rates: tuple[float, ...] = ()  # each plain run's decode tok/s
    counts: Counts = Counts()  # their counts, pooled

    @property
    def runs(self) -> int:
        return len(self.rates)

    @property
    def enough(self) -> bool:
        return self.runs >= MIN_PLAIN_RUNS

    def multiplier(self, tok_s: float | None) -> float | None:
        """``tok_s`` over the pooled plain rate; None under :data:`MIN_PLAIN_RUNS` runs."""
        return metrics.multiplier(tok_s, self.counts.decode_tok_s) if self.enough else None

    def spread(self, tok_s: float | None) -> tuple[float, float] | None:
        """The multiplier against the fastest and the slowest plain run (how noisy the reference is)."""
        if not self.enough or not tok_s:
            return None
        return tok_s / max(self.rates), tok_s / min(self.rates)


def plain_reference(store: _Database, message_id: int) -> PlainReference | None:
    """What the answer ``message_id`` compares with: None for an answer that is not a measured
    speculative run of a local pair (plain, a server's, unmeasured), else the plain runs of its
    pair nearest to it in time (maybe fewer than :data:`MIN_PLAIN_RUNS`, maybe none)."""
    conn = store.connection
    row = conn.execute("SELECT mode, target, draft, created_at FROM task_runs WHERE message_id = ?"
                       " ORDER BY id DESC LIMIT 1", (message_id,)).fetchone()
    if row is None or row["mode"] == PLAIN_MODE or not row["target"]:
        return None
    return _plain_runs(conn, row["target"], row["draft"], row["created_at"])


def pair_plain_runs(store: _Database, target: Path | str, draft: Path | str | None, at: float) -> PlainReference:
    """The plain runs of the pair (``target``, ``draft``) nearest to ``at`` (a load: now): what the
    telemetry panel's "x vs plain" starts from, so a reload keeps the pair's count."""
    return _plain_runs(store.connection, str(target), str(draft) if draft else None, at)


def _plain_runs(conn: sqlite3.Connection, target: str, draft: str | None, at: float) -> PlainReference:
    """One pair's plain runs nearest to ``at``; a plain answer that was stopped (cancelled, its chat
    deleted, the app closed) measured a part of an answer and is left out, as the panel leaves it out."""
    columns = ", ".join(COUNT_FIELDS)
    runs = conn.execute(
        f"SELECT {columns} FROM task_runs WHERE mode = ? AND target = ? AND draft IS ? AND {VALID_RUN} AND NOT {BUSY}"
        " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = task_runs.message_id AND m.state = 'stopped')"
        " ORDER BY abs(created_at - ?), id DESC LIMIT ?",
        (PLAIN_MODE, target, draft, at, PLAIN_RUNS)).fetchall()
    counts = [Counts.from_dict({f: r[f] for f in COUNT_FIELDS}) for r in runs]
    rates = tuple(r for r in (c.decode_tok_s for c in counts) if r)
    return PlainReference(rates, Counts.total(counts))


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
    """Add one answer's counts (inside the caller's transaction), with the machine's verdict on it
    (``stats.busy``); False if unmeasurable.

    An answer without a decode phase (fewer than two tokens, or no decode time) has no
    decode speed, and would only dilute the totals.
    """
    counts = stats.counts
    if counts.decoded < 1 or counts.decode_s <= 0:
        return False
    for c in (counts, stats.phases.reasoning, stats.phases.answer):
        if not _storable(c):  # never a run the readers would leave out
            log.warning("an answer's counts were not recorded in the task statistics: not numbers in range (%s)", c)
            return False
    columns = ", ".join(COUNT_FIELDS)
    marks = ", ".join("?" * len(COUNT_FIELDS))
    conn.execute(
        f"INSERT INTO task_runs (message_id, tag, mode, target, draft, created_at, busy, {columns})"
        f" VALUES (?, ?, ?, ?, ?, ?, ?, {marks})",
        (message_id, tag, normalize_mode(stats.mode) or PLAIN_MODE, str(target) if target else None,
         str(draft) if draft else None, created_at, None if stats.busy is None else int(stats.busy),
         *(getattr(counts, f) for f in COUNT_FIELDS)),
    )
    if stats.phases.has_reasoning:
        run_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        for phase, c in ((REASONING, stats.phases.reasoning), (ANSWER, stats.phases.answer)):
            conn.execute(f"INSERT INTO task_phase_runs (run_id, phase, {columns}) VALUES (?, ?, {marks})",
                         (run_id, phase, *(getattr(c, f) for f in COUNT_FIELDS)))
    return True


def task_table(store: _Database, *, target: Path | str | None = None) -> list[TaskRow]:
    """One row per task tag and target model: built-in tags first (in their usual order), then the
    user's; within a tag, targets by name.

    Speeds measured with different target models are not comparable, so they are never pooled;
    ``target`` keeps the rows of one model.  Runs measured on a busy machine are left out of the figures
    and counted (:attr:`TaskRow.busy_runs`).
    """
    sums = ", ".join(f"sum({f}) AS {f}" for f in COUNT_FIELDS)
    sql = (f"SELECT tag, target, mode = ? AS plain, {BUSY} AS is_busy, count(*) AS answers, {sums}"
           f" FROM task_runs WHERE {VALID_RUN}")
    params: list[object] = [PLAIN_MODE]
    if target is not None:
        sql += " AND target = ?"
        params.append(str(target))
    sql += " GROUP BY tag, target, plain, is_busy"
    groups: dict[tuple[str, str | None], dict[bool, tuple[int, Counts]]] = {}
    busy: dict[tuple[str, str | None], int] = {}
    _say_skipped(store.connection)
    for row in store.connection.execute(sql, params).fetchall():
        key = (row["tag"], row["target"])
        if row["is_busy"]:
            busy[key] = busy.get(key, 0) + row["answers"]
            groups.setdefault(key, {})
            continue
        counts = Counts.from_dict({f: row[f] for f in COUNT_FIELDS})
        groups.setdefault(key, {})[bool(row["plain"])] = (row["answers"], counts)

    def order(key: tuple[str, str | None]) -> tuple[int, str, str]:
        tag, model = key
        rank = (TASK_TAGS.index(tag), "") if tag in TASK_TAGS else (len(TASK_TAGS), tag.casefold())
        return (*rank, Path(model).name.casefold() if model else "")

    phases = _phases(store, params[1:])
    none = (0, Counts())
    table = []
    for key in sorted(groups, key=order):
        (n_plain, plain), (n_spec, spec) = groups[key].get(True, none), groups[key].get(False, none)
        table.append(TaskRow(tag=key[0], plain_answers=n_plain, speculative_answers=n_spec, plain=plain,
                             speculative=spec, phases=phases.get(key, PhaseSplit()), target=key[1],
                             busy_runs=busy.get(key, 0)))
    return table


def _phases(store: _Database, target: list[object]) -> dict[tuple[str, str | None], PhaseSplit]:
    """Per tag and target, the speculative answers' reasoning and answer phases, summed."""
    sums = ", ".join(f"sum(p.{f}) AS {f}" for f in COUNT_FIELDS)
    sql = (f"SELECT r.tag AS tag, r.target AS target, p.phase AS phase, {sums}"
           " FROM task_phase_runs p JOIN task_runs r ON r.id = p.run_id"
           f" WHERE r.mode != ? AND {_valid_run('r.')} AND {_valid_run('p.', run=False)} AND NOT {_busy('r.')}"
           + (" AND r.target = ?" if target else "") + " GROUP BY r.tag, r.target, p.phase")
    out: dict[tuple[str, str | None], PhaseSplit] = {}
    for row in store.connection.execute(sql, [PLAIN_MODE, *target]).fetchall():
        counts = Counts.from_dict({f: row[f] for f in COUNT_FIELDS})
        key = (row["tag"], row["target"])
        out[key] = out.get(key, PhaseSplit()).add(row["phase"], counts)
    return out


def reset_task_stats(store: _Database, tag: str | None = None) -> int:
    """Forget the measurements (of one tag, or all); returns how many answers were dropped."""
    with transaction(store.connection) as conn:
        if tag is None:
            conn.execute("DELETE FROM task_phase_runs")
            cur = conn.execute("DELETE FROM task_runs")
        else:
            conn.execute("DELETE FROM task_phase_runs WHERE run_id IN (SELECT id FROM task_runs WHERE tag = ?)", (tag,))
            cur = conn.execute("DELETE FROM task_runs WHERE tag = ?", (tag,))
    return cur.rowcount


def mode_runs(store: _Database, tag: str, target: Path | str, draft: Path | str | None, modes: tuple[str, ...],
              limit: int = PLAIN_RUNS) -> list[tuple[str, Counts]]:
    """The newest ``limit`` finished answers of each of ``modes`` for one task tag and pair, oldest first, as
    (mode, counts): what ``auto`` on a managed llama-server decides from (backends/server_auto.py); a stopped
    answer measured a part of one and is left out."""
    columns = ", ".join(COUNT_FIELDS)
    out: list[tuple[float, int, str, Counts]] = []
    for mode in modes:
        rows = store.connection.execute(
            f"SELECT id, created_at, {columns} FROM task_runs WHERE tag = ? AND mode = ? AND target = ?"
            f" AND draft IS ? AND {VALID_RUN}"
            " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = task_runs.message_id AND m.state = 'stopped')"
            " ORDER BY created_at DESC, id DESC LIMIT ?",
            (tag, mode, str(target), str(draft) if draft else None, limit)).fetchall()
        out += [(r["created_at"], r["id"], mode, Counts.from_dict({f: r[f] for f in COUNT_FIELDS})) for r in rows]
    return [(mode, counts) for _at, _id, mode, counts in sorted(out, key=lambda t: (t[0], t[1]))]
