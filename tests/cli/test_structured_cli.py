"""specchat chat --json-schema FILE | --grammar FILE: checked before a model loads, one line per problem."""

from __future__ import annotations

import subprocess
import sys

import pytest


def specchat(*args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def one_line(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0]


@pytest.mark.parametrize("name, text, needles", [
    ("bad.gbnf", 'root ::= ("yes" | "no"\n', ("bad.gbnf", "not a valid GBNF grammar", "expecting ')'")),
    ("deep.gbnf", "root ::= " + "(" * 9000 + '"a"' + ")" * 9000, ("deep.gbnf", "nests groups 9000 deep")),
])
def test_a_bad_grammar_file_is_one_line_before_any_model_loads(tmp_path, name, text, needles):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    one_line(specchat("chat", "--target", tmp_path / "no-model.gguf", "--grammar", path, "hi"), *needles)


@pytest.mark.parametrize("text, needle", [
    ('{"type": "object",', "not valid JSON"),
    ('{"type": "array", "minItems": 100000000}', "out of range"),
])
def test_a_bad_schema_file_is_one_line(tmp_path, text, needle):
    path = tmp_path / "schema.json"
    path.write_text(text, encoding="utf-8")
    one_line(specchat("chat", "--target", tmp_path / "no-model.gguf", "--json-schema", path, "hi"), "schema.json",
             needle)


def test_file_problems_are_one_line(tmp_path):
    one_line(specchat("chat", "--json-schema", tmp_path / "missing.json", "hi"), "missing.json", "cannot read it")
    blob = tmp_path / "blob.gbnf"
    blob.write_bytes(b"\xff\xfe\x00\x01")
    one_line(specchat("chat", "--grammar", blob, "hi"), "not UTF-8")
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (300 << 10))
    one_line(specchat("chat", "--json-schema", huge, "hi"), "too large")


def test_schema_and_grammar_are_mutually_exclusive(tmp_path):
    proc = specchat("chat", "--json-schema", "a.json", "--grammar", "b.gbnf", "hi")
    assert proc.returncode == 2 and "not allowed with" in proc.stderr


@pytest.mark.real_models
def test_an_unsatisfiable_grammar_ends_the_answer_in_one_line_and_the_process_is_not_aborted(qwen_target, tmp_path):
    grammar = tmp_path / "dead.gbnf"
    grammar.write_text('root ::= "ok" [\\x00]\n', encoding="utf-8")
    run = specchat("chat", "--target", qwen_target, "--mode", "baseline", "--ctx", "1024", "--grammar", grammar,
                   "--max-tokens", "16", "Say ok.")
    assert 0 < run.returncode < 128, run.stderr[-2000:]  # an error exit, not a signal (llama.cpp's abort is 134)
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("specchat:")]
    assert lines and "cannot be satisfied" in lines[-1]


@pytest.mark.real_models
def test_a_yes_no_grammar_answers_yes_or_no(qwen_target, tmp_path):
    grammar = tmp_path / "yn.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n', encoding="utf-8")
    run = specchat("chat", "--target", qwen_target, "--mode", "lookup", "--ctx", "1024", "--grammar", grammar,
                   "Is water wet? Answer yes or no.")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0] in ("yes", "no")  # the answer, then the stats line
