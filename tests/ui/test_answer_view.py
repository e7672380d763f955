"""The answer view: markdown rendered block by block while it streams, code highlighted.

A streamed answer must end up exactly as the same text rendered at once (a message
loaded from the store), finished blocks must be rendered once (the per-update cost is
the growing block's, not the answer's), and the copy links must copy their own block.
"""

from __future__ import annotations

import pytest
from PySide6.QtGui import QGuiApplication

from specchat.ui import markdown
from specchat.ui.markdown import TAIL_HIGHLIGHT_CHARS, MarkdownStream, RunStream, highlight, render
from specchat.ui.message_widget import MessageWidget
from specchat.ui.theme import DARK, LIGHT

ANSWER = """# Plan

Some *intro* text with `inline` code
on two lines.

- one
- two

```python
def add(a, b):
    return a + b
```

| a | b |
|---|---|
| 1 | 2 |

> a quote

```
plain <b>not bold</b>
```

1. first
2. second

Done."""


def chunks(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` pieces of about equal length, mid-line and mid-word."""
    step = max(1, len(text) // n)
    return [text[i:i + step] for i in range(0, len(text), step)]


def stream(widget: MessageWidget, text: str, n: int) -> None:
    """Feed ``text`` as the answer service does: the whole text so far, then the finished message."""
    so_far = ""
    widget.streaming = True
    for piece in chunks(text, n):
        so_far += piece
        widget.content = so_far
        widget.refresh()
    widget.set_content(text)


@pytest.mark.parametrize("n", [1, 7, 50, len(ANSWER)])
def test_streamed_in_any_chunks_the_answer_ends_as_the_message_rendered_at_once(qtbot, n):
    live = MessageWidget("assistant")
    qtbot.addWidget(live)
    stream(live, ANSWER, n)
    stored = MessageWidget("assistant", ANSWER)  # as show_chat builds a finished message
    qtbot.addWidget(stored)
    assert live.body.text() == stored.body.text() == render(ANSWER)[0]
    assert live.body.codes() == ["def add(a, b):\n    return a + b\n", "plain <b>not bold</b>\n"]


def test_finished_blocks_are_rendered_once_only_the_tail_again(monkeypatch):
    calls = []
    real = markdown._render
    monkeypatch.setattr(markdown, "_render", lambda tokens, theme, limit, *span: calls.append(1) or real(tokens, theme, limit, *span))
    text = "\n\n".join(f"Paragraph {i} says something about block {i}." for i in range(50))
    s = MarkdownStream(LIGHT)
    blocks, so_far = [], ""
    for piece in chunks(text, 500):
        so_far += piece
        u = s.update(so_far)
        assert not u.reset
        blocks += u.finished
    updates = len(chunks(text, 500))
    # the last line is not whole yet, so paragraph 48 may still be its first line's paragraph
    assert len(blocks) == 48 and "Paragraph 48" in u.tail.html
    u = s.update(text, final=True)
    blocks += u.finished
    assert len(blocks) == 49 and "Paragraph 48" not in u.tail.html and "Paragraph 49" in u.tail.html
    # 49 finished blocks once each, and the tail once per update: not 500 updates x 50 blocks
    assert len(calls) <= 49 + updates + 1


def test_a_finished_block_keeps_its_label_while_the_answer_grows(qtbot):
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.streaming = True
    w.content = "First paragraph.\n\nSecond\n"
    w.refresh()
    assert len(w.body.blocks) == 1
    first = w.body.labels()[0]
    text = first.text()
    w.content += "grows\n\nand a third\n"
    w.refresh()
    assert w.body.labels()[0] is first and first.text() == text
    assert len(w.body.blocks) == 2 and "third" in w.body.tail.html


@pytest.mark.parametrize("partial", [
    "Intro\n\n```python\ndef f():\n    return '<b>'",  # an open fence
    "Intro\n\n```",  # a fence just opened
    "Intro\n\n```py",  # its language half written
    "Intro\n\n~~~\nx\n",  # another fence character
    "Intro\n\n| a | b |\n|---|",  # a table header without rows
    "Intro\n#",  # a heading, or the start of "#hashtag"
])
def test_an_answer_cut_anywhere_renders_sanely_and_finishes_as_the_whole(qtbot, partial):
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.streaming = True
    w.content = partial
    w.refresh()
    shown = w.body.text()
    assert "Intro" in shown and "<script" not in shown
    if "<b>" in partial:
        assert "&lt;b&gt;" in shown and "<pre" in shown  # the open fence shows as code, escaped
    whole = partial + "tag and more\n```\n\nAfter."
    w.content = whole
    w.refresh()
    w.set_content(whole)
    assert w.body.text() == render(whole)[0]


def test_a_partial_line_that_could_end_a_paragraph_does_not(qtbot):
    """"***" alone would be a rule; "***bold***" continues the paragraph above it."""
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.streaming = True
    for text in ("para\n***", "para\n***bold***"):
        w.content = text
        w.refresh()
    w.set_content("para\n***bold***")
    assert w.body.text() == render("para\n***bold***")[0]
    assert "<hr" not in w.body.text()


def test_each_copy_link_copies_its_own_code_block(qtbot):
    text = "A\n\n```python\nfirst = 1\n```\n\nB\n\n```sh\necho second\n```\n\nC\n\n```\nthird\n```\n"
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    stream(w, text, 13)
    copied = []
    w.copyRequested.connect(copied.append)
    owners = [label for label in w.body.labels() if "copy:" in label.text()]
    assert len(owners) == 3
    for label, code in zip(owners, ["first = 1\n", "echo second\n", "third\n"], strict=True):
        label.linkActivated.emit("copy:0")
        assert copied[-1] == code and QGuiApplication.clipboard().text() == code
    n = len(copied)
    for bad in ("copy:7", "copy:x", "copy:-1", "javascript:alert(1)"):  # links an answer can write itself
        owners[0].linkActivated.emit(bad)
    assert len(copied) == n
    w.footer_label.linkActivated.emit("copyall")
    assert copied[-1] == text


def test_python_code_is_highlighted_with_colours():
    out = highlight("def f(x):\n    return 'hi'  # done\n", "python", LIGHT)
    assert out.count("<span style='color:") >= 3
    assert ">def</span>" in out
    # the code's text survives highlighting, character for character
    assert "f(x)" in out.replace("<span style='color:#0000FF'>f</span>", "f")


def test_an_unknown_or_missing_language_is_plain_and_escaped():
    code = "<script>alert('x')</script> & <b>"
    for lang in ("no-such-language", ""):
        out = highlight(code, lang, LIGHT)
        assert "<span" not in out and "<script>" not in out
        assert "&lt;script&gt;" in out and "&amp;" in out
    html, codes = render(f"```no-such-language\n{code}\n```")
    assert "<script>" not in html and "&lt;script&gt;" in html and codes == [code + "\n"]


def test_highlighting_follows_the_theme():
    light, dark = highlight("def f(): pass", "python", LIGHT), highlight("def f(): pass", "python", DARK)
    assert light != dark


def test_a_long_growing_code_block_is_plain_until_finished():
    code = "x = 1\n" * (TAIL_HIGHLIGHT_CHARS // 6 + 10)
    text = f"Intro\n\n```python\n{code}"
    s = MarkdownStream(LIGHT)

    def code_of(block) -> str:
        return block.html.split("<pre", 1)[1].split("</pre>", 1)[0]

    assert "<span" not in code_of(s.update(text).tail)  # lexing it each frame would cost more than a frame
    assert "<span" in code_of(s.update(text + "```", final=True).tail)
    short = MarkdownStream(LIGHT).update("```python\nx = 1\n")
    assert "<span" in code_of(short.tail)  # a short growing block is highlighted already


def test_the_tinted_view_streams_paragraphs_once_and_marks_draft_text(qtbot):
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.tint = True
    w.streaming = True
    runs: list[tuple[str, bool]] = []
    w.segments = runs
    for i in range(30):
        runs.append((f"word{i} ", i % 2 == 0))
        if i % 10 == 9:
            runs.append(("\n\n", False))
        w.content = "".join(t for t, _ in runs)
        w.refresh()
    # markdown's rule, as in the plain view: a block is finished once a later one has begun; the third is the tail
    assert len(w.body.blocks) == 2 and w.body is w.tint_view and "word29" in w.body.tail.html
    assert f"background:{LIGHT.draft_tint}" in w.body.text() and "word29" in w.body.text()
    first = w.body.labels()[0]
    w.refresh()
    assert w.body.labels()[0] is first


def test_run_stream_starts_again_when_given_other_runs():
    s = RunStream()
    runs = [("one\n\ntwo", False)]
    s.update(runs)
    u = s.update([("other text", False)])
    assert u.reset and u.tail is not None and "other text" in u.tail.html


def test_reasoning_collapsed_counts_words_and_opens(qtbot):
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.streaming = True
    for part in ("Let me ", "think about ", "it.\n\nSecond thought"):
        w.reasoning += part
        w.refresh()
    assert "(7 words)" in w.reasoning_toggle.text()
    w.reasoning_toggle.linkActivated.emit("think")
    assert w.reasoning_open and "Second thought" in w.reasoning_view.text()
    assert "Let me think about it." in w.reasoning_view.text()
