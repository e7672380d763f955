"""Round-level telemetry exports as CSV and JSON, for one chat or everything since start."""

import csv
import json

import pytest

from helpers.event_streams import R, answer_events, feed_all
from specchat.engine.events import Fallback
from specchat.telemetry import ROUND_FIELDS, TelemetryRecorder, export_csv, export_json

REASON = "model drafter: token acceptance 20% < 50% over the last 16 rounds; plain decoding for 64 tokens"


@pytest.fixture
def recorder() -> TelemetryRecorder:
    rec = TelemetryRecorder()
    rec.set_plain_rate(25.0)
    t = feed_all(rec, 1, 11, answer_events([R(4, 4, 3)] * 10))
    rounds = [R(4, 4, 0)] * 3 + [R(4, 4, 1, fallback_after=(Fallback(REASON),))] + [R(0, 0, 0, plain_by_fallback=True)] * 2
    feed_all(rec, 2, 12, answer_events(rounds), t0=t + 1)
    return rec


def test_csv_round_trips_with_a_header_row(recorder, tmp_path):
    path = tmp_path / "rounds.csv"
    assert export_csv(recorder, path) == 16
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == ROUND_FIELDS
    assert len(rows) == 16
    first = rows[0]
    assert (first["chat_id"], first["request_id"], first["drafter"]) == ("11", "1", "model")
    assert [int(first[f]) for f in ("k", "drafted", "accepted", "emitted")] == [4, 4, 3, 4]
    assert float(first["tok_s"]) == pytest.approx(4 / 0.042)
    assert float(first["token_acceptance"]) == 0.75
    fallback = rows[13]
    assert fallback["fallback"] == "1" and fallback["fallback_reason"] == REASON
    assert rows[14]["in_fallback"] == "1" and rows[14]["fallback"] == "0"
    assert [int(r["seq"]) for r in rows] == list(range(16))


def test_csv_of_one_chat(recorder, tmp_path):
    path = tmp_path / "chat12.csv"
    assert export_csv(recorder, path, chat_id=12) == 6
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["chat_id"] for r in rows} == {"12"} and len(rows) == 6


def test_unknown_values_are_empty_cells(tmp_path):
    rec = TelemetryRecorder()
    feed_all(rec, 1, None, answer_events([R(0, 0, 0)]))  # no draft yet: no acceptance
    path = tmp_path / "plain.csv"
    export_csv(rec, path)
    with path.open(newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["token_acceptance"] == "" and row["chat_id"] == ""


def test_json_has_definitions_totals_answers_and_rounds(recorder, tmp_path):
    path = tmp_path / "telemetry.json"
    export_json(recorder, path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "specchat-telemetry" and doc["scope"] == "all"
    defs = doc["metric_definitions"]
    assert defs["token_acceptance"] == "accepted draft tokens / drafted tokens"
    assert defs["sequence_acceptance"] == "rounds whose whole draft was accepted / rounds with a draft"
    assert defs["decode_tok_s"].startswith("tokens emitted after the first / decode wall time")
    assert defs["multiplier"].startswith("speculative decode tok/s / plain decode tok/s")
    totals = doc["totals"]
    assert totals["answers"] == 2 and totals["drafted"] == 56 and totals["accepted"] == 31
    assert totals["token_acceptance"] == pytest.approx(31 / 56)
    assert totals["sequence_acceptance"] == 0.0
    assert totals["multiplier"] == pytest.approx(totals["tok_s"] / 25.0)
    assert doc["plain_rate"] == 25.0 and doc["plain_rate_source"] == "set"
    assert [a["request_id"] for a in doc["answers"]] == [1, 2]
    assert doc["answers"][1]["stats"]["fallbacks"] == [REASON]
    assert doc["answers"][0]["stats"]["token_acceptance"] == 0.75
    assert doc["fields"] == list(ROUND_FIELDS)
    assert len(doc["rounds"]) == 16 and set(doc["rounds"][0]) == set(ROUND_FIELDS)


def test_json_of_one_chat(recorder, tmp_path):
    path = tmp_path / "chat11.json"
    doc = export_json(recorder, path, chat_id=11)
    assert json.loads(path.read_text())["totals"] == doc["totals"]
    assert doc["scope"] == "chat" and doc["chat_id"] == 11
    assert doc["totals"]["answers"] == 1 and doc["totals"]["token_acceptance"] == 0.75
    assert len(doc["rounds"]) == 10 and len(doc["answers"]) == 1


def test_exports_leave_no_temporary_files(recorder, tmp_path):
    export_csv(recorder, tmp_path / "a.csv")
    export_json(recorder, tmp_path / "a.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.json"]
