"""Export round-level telemetry as CSV (one row per round) or JSON (rounds, answers, totals, definitions).

The scope is one chat or everything since the app started.  CSV is for spreadsheets and
pandas: a header row of :data:`~.records.ROUND_FIELDS`, then one row per round; unknown
values are empty cells and flags are 1/0.  JSON is for anyone who wants to check our
numbers: it carries the metric definitions the numbers follow, the running totals of
the scope, each answer's engine totals and the same round rows (unknown values null).

Files are written next to their destination and renamed into place (:func:`specchat.files.write_text_atomically`),
so an export that fails half-way never leaves a truncated file under the user's chosen name; only a
regular file is ever replaced (a symbolic link is written through to its file; a folder, a device or
a link to one is refused).  Every failure is one :class:`ExportError` line naming the file and why,
which the window shows, as it shows where an export went.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from specchat import files
from specchat.errors import UserError

from .recorder import ALL_CHATS, TelemetryRecorder
from .records import METRIC_DEFINITIONS, ROUND_FIELDS, AnswerRecord, RoundRecord

FORMAT = "specchat-telemetry"
FORMAT_VERSION = 1


class ExportError(UserError):
    """An export that was not written: one line naming the file and why (nothing was left under its name)."""


def round_row(record: RoundRecord) -> dict[str, Any]:
    """One round as a flat dict in :data:`ROUND_FIELDS` order (None stays None)."""
    return {name: getattr(record, name) for name in ROUND_FIELDS}


def write_rounds_csv(records: Iterable[RoundRecord], out: TextIO) -> int:
    """Write the header and one row per round to an open text file; returns the number of rows."""
    writer = csv.DictWriter(out, fieldnames=ROUND_FIELDS, lineterminator="\n")
    writer.writeheader()
    n = 0
    for record in records:
        writer.writerow({k: _cell(v) for k, v in round_row(record).items()})
        n += 1
    return n


def _cell(value: Any) -> Any:
    """Unknown is an empty cell; a flag is 1 or 0 (what spreadsheets and pandas read back as numbers)."""
    if value is None:
        return ""
    return int(value) if isinstance(value, bool) else value


def _answer_dict(answer: AnswerRecord) -> dict[str, Any]:
    out = {f.name: getattr(answer, f.name) for f in fields(answer)}
    s = answer.stats
    if s is not None:  # flat, as in format version 1: mode, the counts, fallbacks, then the derived numbers
        out["stats"] = {"mode": s.mode, **s.counts.to_dict(), "fallbacks": list(s.fallbacks),
                        "decode_tok_s": s.decode_tok_s, "prefill_tok_s": s.prefill_tok_s,
                        "token_acceptance": s.token_acceptance, "sequence_acceptance": s.sequence_acceptance,
                        "mean_k": s.mean_k, "mean_accepted": s.mean_accepted, "fallback_share": s.fallback_share}
    return out


def telemetry_document(recorder: TelemetryRecorder, chat_id: Any = ALL_CHATS) -> dict[str, Any]:
    """The JSON export as a dict: definitions, totals and answers of the scope, then its rounds."""
    everything = chat_id is ALL_CHATS
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "scope": "all" if everything else "chat",
        "chat_id": None if everything else chat_id,
        "metric_definitions": dict(METRIC_DEFINITIONS),
        "plain_rate": recorder.plain_rate,
        "plain_rate_source": recorder.plain_rate_source,
        "totals": recorder.totals(chat_id).as_dict(),
        "answers": [_answer_dict(a) for a in recorder.answers(chat_id)],
        "fields": list(ROUND_FIELDS),
        "rounds": [round_row(r) for r in recorder.rounds(chat_id)],
    }


def write_export(dest: Path | str, data: str | bytes) -> Path:
    """Write an export (text, or an image's bytes) to ``dest`` atomically; the file written, or
    :class:`ExportError`: a folder, a device or a link to one at ``dest``, a folder that cannot be written."""
    try:
        files.write_bytes_atomically(Path(dest), data.encode("utf-8") if isinstance(data, str) else data)
    except OSError as exc:
        raise ExportError(f"could not export to {dest}: {exc.strerror or exc}") from None
    return Path(dest)


def export_csv(recorder: TelemetryRecorder, dest: Path | str, *, chat_id: Any = ALL_CHATS) -> int:
    """Write one chat's rounds (or all since start) to ``dest`` as CSV; returns the number of rows
    (:class:`ExportError` when it cannot)."""
    buf = io.StringIO()
    n = write_rounds_csv(recorder.rounds(chat_id), buf)
    write_export(dest, buf.getvalue())
    return n


def export_json(recorder: TelemetryRecorder, dest: Path | str, *, chat_id: Any = ALL_CHATS) -> dict[str, Any]:
    """Write one chat's telemetry (or all since start) to ``dest`` as JSON; returns what was written.

    Chat and request ids that JSON cannot hold are written as text; NaN never appears
    (unknown values are null).
    """
    doc = telemetry_document(recorder, chat_id)
    write_export(dest, json.dumps(doc, indent=1, default=str, allow_nan=False) + "\n")
    return doc


def export_rounds(recorder: TelemetryRecorder, dest: Path | str, *, chat_id: Any = ALL_CHATS) -> str:
    """Export to ``dest``, as JSON when its name ends in ``.json``, else as CSV; the line that says where
    the rounds went ("exported 16 rounds to PATH"), or :class:`ExportError` saying why not."""
    if str(dest).lower().endswith(".json"):
        n = len(export_json(recorder, dest, chat_id=chat_id)["rounds"])
    else:
        n = export_csv(recorder, dest, chat_id=chat_id)
    return f"exported {n} round{'' if n == 1 else 's'} to {dest}"
