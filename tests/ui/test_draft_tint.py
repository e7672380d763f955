"""The draft tint: the same markdown, code blocks and highlighting as the plain view, the tint on top;
switched from a message's footer and remembered."""

from __future__ import annotations

import re

from PySide6.QtCore import QSettings
from PySide6.QtGui import QTextDocument

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.ui.markdown import MONO, TintStream, render_blocks
from specchat.ui.message_widget import MessageWidget
from specchat.ui.theme import LIGHT

CSS = f"background:{LIGHT.draft_tint}"
RUNS = [
    ("Here is the fix:\n\n```python\ndef f(x):\n", False),
    ("    if x:\n        return x + 1\n", True),  # accepted draft tokens: indented code
    ("    return 0\n```\n\nIt **adds one** when ", False),
    ("x is set.", True),
]
TEXT = "".join(t for t, _ in RUNS)


def layout(html: str) -> str:
    """The text as a Qt label lays it out (what a user reads)."""
    doc = QTextDocument()
    doc.setHtml(html)
    return doc.toPlainText()


def tinted_text(html: str) -> list[str]:
    return [m for m in re.findall(rf"<span style='{re.escape(CSS)}'>([^<]*)</span>", html)]


def test_tinted_and_plain_views_of_a_code_block_lay_out_the_same_text(qtbot) -> None:
    plain = "".join(b.html for b in render_blocks(TEXT, LIGHT))
    u = TintStream(LIGHT, CSS).update(TEXT, RUNS, final=True)
    tinted = "".join(b.html for b in (*u.finished, *([u.tail] if u.tail else [])))
    assert layout(tinted) == layout(plain)
    assert "```" not in layout(tinted)  # never raw fences
    assert "        return x + 1" in layout(tinted)  # indentation kept
    code = tinted.split("<pre", 1)[1].split("</pre>", 1)[0]
    assert f"font-family:{MONO}" in code  # in the monospace block
    assert code.count("<span style='color:") == plain.split("<pre", 1)[1].split("</pre>", 1)[0].count(
        "<span style='color:")  # highlighted as the plain view is
    assert "<b>" in tinted or "<strong>" in tinted  # the markdown is rendered around the tint


def test_the_tint_marks_the_draft_runs_and_nothing_else(qtbot) -> None:
    u = TintStream(LIGHT, CSS).update(TEXT, RUNS, final=True)
    tinted = "".join(b.html for b in (*u.finished, *([u.tail] if u.tail else [])))
    marked = "".join(tinted_text(tinted))
    assert marked.replace(" ", "").replace("\n", "") == "ifx:returnx+1xisset."
    assert "def" not in marked and "return 0" not in marked and "Copy" not in marked


def test_a_streamed_tinted_answer_ends_as_the_one_rendered_at_once(qtbot) -> None:
    w = MessageWidget("assistant")
    qtbot.addWidget(w)
    w.tint, w.streaming = True, True
    runs: list[tuple[str, bool]] = []
    w.segments = runs
    for text, marked in RUNS:
        for i in range(0, len(text), 3):
            runs.append((text[i:i + 3], marked))
            w.content = "".join(t for t, _ in runs)
            w.refresh()
    w.set_content(TEXT)
    whole = MessageWidget("assistant", TEXT)
    qtbot.addWidget(whole)
    whole.segments, whole.tint = list(RUNS), True
    whole.refresh()
    assert layout(w.body.text()) == layout(whole.body.text()) == layout(w.markdown_view.text() or
                                                                           "".join(b.html for b in render_blocks(TEXT)))
    assert "".join(tinted_text(w.body.text())) == "".join(tinted_text(whole.body.text()))


def test_the_footer_switch_tints_every_answer_and_is_remembered(qtbot, fake_app, tmp_path) -> None:
    app = fake_app(FakeSpec(answer_tokens=80, miss_every=5))
    app.add_chat()
    ini = str(tmp_path / "window.ini")
    s = app.start(qtbot, window_state=QSettings(ini, QSettings.Format.IniFormat))
    send(qtbot, s.window.pane, "Tint me.")
    wait_idle(qtbot, s)
    shown = s.window.pane.conversation.messages[-1]
    assert "Tint draft tokens" in shown.footer_label.text() and shown.body is shown.markdown_view
    shown._on_link("tint")  # the footer's link
    assert s.window.actions_by_slot["set_tint"].isChecked() and shown.body is shown.tint_view
    assert "Hide draft tint" in shown.footer_label.text() and CSS in shown.body.text()
    app.stop()
    s = app.start(qtbot, window_state=QSettings(ini, QSettings.Format.IniFormat))
    shown = s.window.pane.conversation.messages[-1]
    assert s.window.actions_by_slot["set_tint"].isChecked() and shown.body is shown.tint_view
    assert CSS in shown.body.text()
    shown._on_link("tint")
    assert not s.window.actions_by_slot["set_tint"].isChecked() and shown.body is shown.markdown_view


def test_a_tinted_code_block_is_as_tall_as_the_plain_one(qtbot) -> None:
    runs = [("```python\nx = 1\n", False), ("y = 2\n", True), ("```\n", True)]  # the draft ends the block
    text = "".join(t for t, _ in runs)
    plain, tinted = MessageWidget("assistant", text), MessageWidget("assistant", text)
    for w in (plain, tinted):
        qtbot.addWidget(w)
        w.resize(600, 400)
    tinted.segments, tinted.tint = runs, True
    tinted.refresh()
    assert CSS in tinted.body.text()
    assert tinted.body.labels()[0].sizeHint().height() == plain.body.labels()[0].sizeHint().height()
