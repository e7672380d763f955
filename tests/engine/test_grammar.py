"""Structured output without a model: every bad schema or grammar is one GrammarError line, and
what could crash llama.cpp's recursive parser is refused before it sees it."""

from __future__ import annotations

import json
import threading

import pytest

from specchat.engine.grammar import (
    MAX_ALTERNATIVES,
    MAX_NESTING,
    MAX_RULES,
    check_gbnf,
    check_structured,
    parse_check,
    schema_to_gbnf,
)
from specchat.engine.settings import GrammarError, SamplingSettings, StructuredOutput
from specchat.errors import UserError
from specchat.harness.suite import BUILTIN, load_suite, with_schemas


def one_line_error(call, *args) -> str:
    with pytest.raises(GrammarError) as info:
        call(*args)
    message = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in message and len(message) <= 400
    return message


def test_the_builtin_json_prompts_schemas_convert_and_parse():
    with_schema = [p for p in BUILTIN if p.schema]
    assert {p.id for p in with_schema} == {"json-person", "json-extract"}
    for p in with_schema:
        gbnf = schema_to_gbnf(p.schema)
        assert "root ::=" in gbnf
        parse_check(gbnf)


@pytest.mark.parametrize("text, expected", [
    ('{"type": "object",', "not valid JSON"),
    ('[1, 2]', "must be a JSON object"),
    ('{"type": "frobnicate"}', "not a schema llama.cpp can follow"),
    ('{"type": "array", "items": {"type": "string"}, "minItems": 1000000000}', "minItems 1000000000 is out of range"),
    ('{"type": "string", "maxLength": -5}', "out of range"),
    ('{"type": "string", "pattern": "^a{999999999}$"}', "the pattern repeats"),
    ('{"$ref": "https://example.com/schema.json"}', "only local references"),
    ('{"$ref": "#/definitions/missing"}', "not a schema llama.cpp can follow"),
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ("", "is empty"),
])
def test_a_bad_schema_is_one_line(text, expected):
    assert expected in one_line_error(schema_to_gbnf, text)


@pytest.mark.parametrize("text, expected", [
    ('root ::= ("yes" | "no"', "expecting ')' at the end"),
    ("root ::= foo", "Undefined rule identifier 'foo'"),
    ('root ::= root "a" | "b"', "left recursion"),
    ('start ::= "a"', "does not contain a 'root' symbol"),
    ('root ::= "a"{', "expecting an int"),
    ("root := 'a'", "expecting ::="),
])
def test_a_bad_grammar_quotes_llama_cpps_reason_in_one_line(text, expected):
    message = one_line_error(parse_check, text)
    assert "not a valid GBNF grammar" in message and expected in message


@pytest.mark.parametrize("text, expected", [
    ("root ::= " + "(" * 5000 + '"a"' + ")" * 5000, f"nests groups 5000 deep (at most {MAX_NESTING})"),
    ("root ::= a0\n" + "".join(f"a{i} ::= a{i + 1}\n" for i in range(20_000)) + 'a20000 ::= "x"\n',
     f"more than {MAX_RULES} rules"),
    ('root ::= x{0,2000} x{0,2000}\nx ::= "a"', f"more than {MAX_RULES} rules"),
    ("root ::= " + " | ".join(f'"{i}"' for i in range(5000)), f"(at most {MAX_ALTERNATIVES})"),
    ('root ::= "a\0b"', "NUL character"),
    ('root ::= "\ud800"', "not valid UTF-8"),
    ('root ::= "a"{99999}', f"more than {MAX_RULES} rules"),
    ("root ::= " + '"a" ' * 300_000, "KiB"),
])
def test_what_would_overflow_the_parsers_stack_or_cost_seconds_a_token_is_refused_first(text, expected):
    # 5,000 nested groups or a chain of 20,000 rules crash the process inside llama.cpp (SIGSEGV,
    # measured): reaching this line at all means they were refused before the C parser ran
    assert expected in one_line_error(parse_check, text)


def test_the_largest_grammar_within_the_bounds_parses_on_a_512_kib_thread_stack():
    """macOS gives secondary threads 512 KiB: the bounds must hold there, not only on Linux's 8 MiB."""
    deep = "(" * MAX_NESTING + '"a"' + ")" * MAX_NESTING
    n = MAX_RULES - MAX_NESTING - 8
    chain = f"root ::= {deep} a0\n" + "".join(f"a{i} ::= a{i + 1}\n" for i in range(n)) + f'a{n} ::= "x"\n'
    check_gbnf(chain)
    outcome: list[object] = []

    def run() -> None:
        try:
            parse_check(chain)
            outcome.append("parsed")
        except GrammarError as exc:
            outcome.append(exc)

    old = threading.stack_size(512 << 10)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join(30)
    finally:
        threading.stack_size(old)
    assert outcome == ["parsed"]


def test_tokens_by_name_need_a_vocabulary_and_are_left_to_the_answer():
    parse_check("root ::= <think> [a-z]+")  # checked with the model's vocabulary when an answer starts


def test_check_structured_covers_kind_size_and_text():
    check_structured(StructuredOutput())  # none: nothing to check
    check_structured(StructuredOutput("grammar", 'root ::= "yes" | "no"'))
    assert "must be one of" in one_line_error(check_structured, StructuredOutput("regex", "a+"))
    assert "is empty" in one_line_error(check_structured, StructuredOutput("json_schema", "   "))
    assert "KiB" in one_line_error(check_structured, StructuredOutput("grammar", "#" * (300 << 10)))
    with pytest.raises(ValueError):  # SamplingSettings.validate checks the kind too (the CLI turns it into a line)
        SamplingSettings(structured=StructuredOutput("xml", "x")).validate()


def test_suite_lines_may_carry_a_schema_and_structured_runs_get_a_task_of_their_own(tmp_path):
    suite = tmp_path / "suite.jsonl"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    suite.write_text(json.dumps({"id": "a", "task": "json", "messages": [{"role": "user", "content": "x"}],
                                 "schema": schema}) + "\n" + json.dumps({"id": "b", "messages": []}) + "\n")
    prompts = load_suite(str(suite))
    assert json.loads(prompts[0].schema) == schema and prompts[1].schema == ""
    assert [(p.id, p.task, p.constrained) for p in with_schemas(prompts, "both")] == [
        ("a", "json", False), ("a+schema", "json+schema", True), ("b", "custom", False)]
    assert [(p.task, p.constrained) for p in with_schemas(prompts, "on")] == [("json+schema", True),
                                                                              ("custom", False)]
    assert with_schemas(prompts, "off") == prompts
