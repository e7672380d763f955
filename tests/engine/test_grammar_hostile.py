"""Hostile grammars and schemas: each is accepted, or refused in one line by the bounded check;
the check's child process takes the cost, never this one; an answer's grammar that grows past its
bound ends in one line."""

from __future__ import annotations

import json

import pytest

from specchat.engine import grammar as G
from specchat.engine.settings import GrammarError, Structured, StructuredOutput


def _nested(depth: int) -> str:
    body = '"a"?'
    for _ in range(depth):
        body = f"({body})*"
    return f"root ::= {body}\n"


def _ref_chain(n: int) -> str:
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "array", "items": {"type": "string"}}
    return json.dumps({"$defs": defs, "$ref": "#/$defs/d0"})


HOSTILE = [
    *[(Structured.GRAMMAR, _nested(d)) for d in range(2, 7)],
    (Structured.GRAMMAR, 'root ::= x\nx ::= (y*)*\ny ::= ("a"? | "b"?)*\n'),
    (Structured.GRAMMAR, 'root ::= s\ns ::= [ -~\\n] s "b"? | [ -~\\n] s "c"? | ""\n'),  # ambiguous: stacks double
    (Structured.GRAMMAR, 'root ::= "[" v "]"\nv ::= ( "a" v? ","? | "a" v? " "? | "a" v? )\n'),
    (Structured.GRAMMAR, 'root ::= (a | b | c)+\na ::= "x" "y"? "z"?\nb ::= "x" "y"? "w"?\nc ::= "x" ("y" | "z")?\n'),
    (Structured.GRAMMAR, 'root ::= ("a"? "b"? "c"? "d"? "e"? "f"? "g"? "h"?){0,40}\n'),
    (Structured.JSON_SCHEMA, '{"type":"string","pattern":"^((a|a?)(a|b?)*)*$"}'),
    (Structured.JSON_SCHEMA, '{"type":"array","items":{"type":"array","items":{"type":"array","items":{}}}}'),
    (Structured.JSON_SCHEMA, '{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":2}'),
    (Structured.JSON_SCHEMA, '{"type":"array","items":{"type":"array","maxItems":40},"maxItems":40}'),
    (Structured.JSON_SCHEMA, json.dumps({"type": "object", "properties": {
        f"p{i}": {"type": "array", "items": {"type": "object", "properties": {"q": {"type": "string"}}}}
        for i in range(200)}})),
    (Structured.JSON_SCHEMA, _ref_chain(40)),
    (Structured.JSON_SCHEMA, _ref_chain(300)),
]


@pytest.mark.parametrize(("kind", "text"), HOSTILE, ids=[f"{k.value}-{i}" for i, (k, _) in enumerate(HOSTILE)])
def test_a_hostile_grammar_is_accepted_or_refused_in_one_line(kind: Structured, text: str) -> None:
    try:
        G.check_structured(StructuredOutput(kind, text))
    except GrammarError as exc:
        line = str(exc)
        assert "\n" not in line and line.startswith(("the JSON schema", "the GBNF grammar"))
    # this process survived and is usable: a good grammar still checks
    G.check_structured(StructuredOutput(Structured.GRAMMAR, 'root ::= "yes" | "no"\n'))


def test_stacks_that_double_are_refused_naming_the_bound() -> None:
    text = 'root ::= s\ns ::= [ -~\\n] s "b"? | [ -~\\n] s "c"? | ""\n'
    with pytest.raises(GrammarError, match=f"too costly: .* parse stacks \\(at most {G.MAX_STACKS}\\)"):
        G.check_structured(StructuredOutput(Structured.GRAMMAR, text))


def test_a_check_past_its_deadline_or_memory_is_refused_naming_the_limit(monkeypatch) -> None:
    monkeypatch.setattr(G, "CHECK_SECONDS", 0.0)
    with pytest.raises(GrammarError, match="its check took over 0 s"):
        G.check_structured(StructuredOutput(Structured.GRAMMAR, 'root ::= "a"\n'))


def test_a_cancelled_check_kills_its_child() -> None:
    with pytest.raises(GrammarError, match="was cancelled"):
        G.check_structured(StructuredOutput(Structured.GRAMMAR, 'root ::= "a"\n'), lambda: True)


def test_the_check_hands_back_the_converted_grammar() -> None:
    gbnf = G._run_check(Structured.JSON_SCHEMA, '{"type":"boolean"}', "the JSON schema")
    assert "true" in gbnf and "root" in gbnf


def test_an_answers_grammar_past_its_stack_bound_ends_in_one_line() -> None:
    """The bound an answer checks after every accept: driven here character by character (no
    vocabulary), past MAX_ANSWER_STACKS, the next check ends it naming the token."""
    data = b'root ::= s\ns ::= [a-z] s "b"? | [a-z] s "c"? | ""\n'
    handle, _ = G._parse(None, data)
    grammar = G.Grammar(handle, None, "the GBNF grammar", lambda t: b"", data)
    try:
        if grammar.stacks() is None:
            pytest.skip("this llama.cpp build does not expose the grammar's stacks")
        api = G._get_internals()
        while (grammar.stacks() or 0) <= G.MAX_ANSWER_STACKS:
            api.accept(grammar._state, ord("a"))
        grammar.accepted = 7
        with pytest.raises(GrammarError, match="grew too costly at token 7: [0-9]+ parse stacks") as info:
            grammar._bound(0.0)
        assert "\n" not in str(info.value)
    finally:
        grammar.close()


def test_a_slow_step_ends_the_answer() -> None:
    data = b'root ::= "a"\n'
    handle, _ = G._parse(None, data)
    grammar = G.Grammar(handle, None, "the GBNF grammar", lambda t: b"", data)
    try:
        with pytest.raises(GrammarError, match="one step took 2.0 s"):
            grammar._bound(2.0)
    finally:
        grammar.close()
