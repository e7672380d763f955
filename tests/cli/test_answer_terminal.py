"""An answer's text reaches a terminal without its control sequences, and a pipe exactly as the model wrote it."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from specchat.cli.commands import _print_answer
from specchat.engine import TokensEmitted
from specchat.errors import for_terminal


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


HOSTILE = "ok\x1b]0;owned\x07 \x1b[2J\u202eevil\nnext\tline"


def _emit(answer: str, reasoning: str = "") -> TokensEmitted:
    return TokensEmitted(token_ids=(1,), origins=(), text=reasoning + answer, answer=answer, reasoning=reasoning)


def test_a_terminal_gets_no_escape_sequence_from_an_answer(monkeypatch) -> None:
    out, err = Tty(), Tty()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    _print_answer([_emit(HOSTILE, reasoning="think\x1b[31mred")])
    shown = out.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "ok\\x1b]0;owned\\x07" in shown and "\nnext\tline" in shown  # newlines and tabs stay
    assert "\x1b" not in err.getvalue() and "think\\x1b[31mred" in err.getvalue()


def test_a_pipe_gets_the_answer_exactly(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    _print_answer([_emit(HOSTILE)])
    assert out.getvalue() == HOSTILE


@given(st.text())
def test_terminal_text_is_printable_but_for_newlines_and_tabs(text: str) -> None:
    shown = for_terminal(text, Tty())
    assert all(c.isprintable() or c in "\n\t" for c in shown)
    assert for_terminal(text, io.StringIO()) == text
