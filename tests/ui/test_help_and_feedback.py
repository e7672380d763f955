"""The small things a user notices: the plots say what they show, Copy says it copied, a search shows
where its words are in the open chat, and an import of GGUF files says what it added and skipped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QGuiApplication, QHelpEvent
from PySide6.QtWidgets import QApplication, QMessageBox, QToolTip

from helpers.app_driver import send, wait_idle
from helpers.gguf_samples import write_gguf
from helpers.tiny_drafters import Tokenizer, write_eagle3
from specchat.models.registry import Registry
from specchat.ui.plots import PLOTS
from specchat.ui.telemetry_panel import NUMBERS_HELP
from specchat.ui.theme import current

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


def started(qtbot, fake_app, *messages: tuple[str, str], title: str = "Notes"):
    app = fake_app()
    chat = app.add_chat(title)
    s = app.start(qtbot)
    for role, text in messages:
        s.store.add_message(chat, role, text)
    s.window.chats.refresh()
    s.window.open_chat(chat)
    s.window.pane.show_chat(chat)
    s.window.finder.refresh()
    return s


# -- the plots -----------------------------------------------------------------------------------

def test_every_plot_says_what_it_shows_and_what_good_looks_like(qtbot, fake_app):
    s = started(qtbot, fake_app)
    panel = s.window.telemetry
    panel.show()
    for spec in PLOTS:
        tip = getattr(panel, f"p_{spec.key}").toolTip()
        assert tip == spec.help and "Good:" in tip, spec.key
    # in README's own words ("What the numbers mean")
    assert "accepted draft tokens / drafted tokens" in README and "accepted draft tokens / drafted tokens" in \
        panel.p_acc.toolTip()
    assert "tokens after the first / decode" in panel.p_speed.toolTip()
    assert "rounds decoded plainly because acceptance fell below the thresholds" in NUMBERS_HELP
    assert panel.numbers.toolTip() == NUMBERS_HELP and "above 1.00x speculation pays" in NUMBERS_HELP


def test_hovering_a_plot_shows_its_tooltip(qtbot, fake_app):
    s = started(qtbot, fake_app)
    panel = s.window.telemetry
    panel.show()
    qtbot.waitUntil(lambda: panel.plots.isVisible() and panel.p_k.sceneBoundingRect().height() > 20, timeout=10_000)
    view = panel.plots
    at = view.mapFromScene(panel.p_k.sceneBoundingRect().center())
    QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, at, view.viewport().mapToGlobal(at)))
    qtbot.waitUntil(QToolTip.isVisible, timeout=10_000)
    assert "Draft length K" in QToolTip.text()
    QToolTip.hideText()


# -- Copy ------------------------------------------------------------------------------------------

def test_copy_under_an_answer_says_copied_then_copy_again(qtbot, fake_app):
    s = started(qtbot, fake_app, ("user", "a question"), ("assistant", "the answer text"))
    w = next(m for m in s.window.pane.conversation.messages if m.role == "assistant")
    assert ">Copy<" in w.footer_label.text()
    w.footer_label.linkActivated.emit("copyall")  # what a click on the link sends
    assert QGuiApplication.clipboard().text() == "the answer text"
    assert "Copied ✓" in w.footer_label.text()
    qtbot.waitUntil(lambda: ">Copy<" in w.footer_label.text(), timeout=15_000)  # back after a moment


def test_copy_the_last_answer_says_copied(qtbot, fake_app):
    s = started(qtbot, fake_app, ("user", "a question"), ("assistant", "the last answer"))
    s.window.actions_by_slot["copy_last_answer"].trigger()
    assert QGuiApplication.clipboard().text() == "the last answer"
    assert s.window.statusBar().currentMessage().startswith("Copied the last answer")
    w = next(m for m in s.window.pane.conversation.messages if m.role == "assistant")
    assert "Copied ✓" in w.footer_label.text()


# -- search ----------------------------------------------------------------------------------------

FILLER = "\n\n".join(f"Paragraph {i} says nothing of note, at some length to fill the pane." for i in range(40))


def highlighted(label, colour: str) -> bool:
    return QColor(colour).name() in label.text().lower()


def test_search_highlights_its_words_in_the_open_chat_and_steps_through_them(qtbot, fake_app):
    s = started(qtbot, fake_app, ("user", "Tell me about the zebra."),
                ("assistant", FILLER + "\n\nThe zebra is striped.\n\n" + FILLER + "\n\nA last zebra fact."))
    window, theme = s.window, current()
    window.search_chats()
    qtbot.keyClicks(window.chats.search, "zebra")
    qtbot.waitUntil(lambda: bool(window.finder.matches), timeout=10_000)
    assert len(window.finder.matches) == 3  # once in the question, twice in the answer
    assert window.statusBar().currentMessage().startswith("match 1 of 3")
    first = window.finder.matches[0].label
    assert highlighted(first, theme.match_current)
    last = window.finder.matches[2].label
    assert highlighted(last, theme.match) and not highlighted(last, theme.match_current)
    bar = window.pane.conversation.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=10_000)
    window.find_previous()  # around the end: the last match, far down the answer, is scrolled to
    assert window.statusBar().currentMessage().startswith("match 3 of 3")
    assert highlighted(window.finder.matches[2].label, theme.match_current)
    qtbot.waitUntil(lambda: bar.value() > bar.maximum() // 2, timeout=10_000)
    window.find_next()  # and on to the first again, at the top
    qtbot.waitUntil(lambda: bar.value() < bar.maximum() // 2, timeout=10_000)
    window.chats.search.clear()  # no search: no highlight
    assert not window.finder.matches
    assert all(QColor(theme.match).name() not in label.text().lower()
               for w in window.pane.conversation.messages for label in w.body.labels())


def test_a_highlight_stays_on_the_words_when_an_answer_finishes_and_keeps_the_current_match(qtbot, fake_app):
    short = FILLER[:600]  # the fake pair's context is 2,048 bytes
    s = started(qtbot, fake_app, ("user", "Any tip?"), ("assistant", short + "\n\nOne tip.\n\n" + short))
    window, theme = s.window, current()
    window.chats.search.setText("ti")  # in every answer the fake pair gives (its first 120 characters)
    qtbot.waitUntil(lambda: len(window.finder.matches) == 2, timeout=10_000)
    window.find_next()  # the second match, in the answer, is current
    send(qtbot, window.pane, "And the target?")
    wait_idle(qtbot, s)
    answer = window.pane.conversation.messages[-1]
    qtbot.waitUntil(lambda: any(highlighted(label, theme.match) for label in answer.body.labels()), timeout=10_000)
    assert window.finder.current == 1 and len(window.finder.matches) >= 3
    assert window.statusBar().currentMessage().startswith(f"match 2 of {len(window.finder.matches)}")


def test_opening_a_chat_with_no_search_leaves_the_status_line_alone(qtbot, fake_app):
    s = started(qtbot, fake_app, ("user", "one apple"))
    other = s.store.create_chat("Other", s.window.pane.settings()).id
    s.window.statusBar().showMessage("exported to chats.md")  # what an export or an import says
    s.window.open_chat(other)
    assert s.window.statusBar().currentMessage() == "exported to chats.md"


def test_enter_in_the_search_field_goes_to_the_next_match(qtbot, fake_app):
    s = started(qtbot, fake_app, ("user", "one apple"), ("assistant", "two apple, three apple"))
    window = s.window
    window.chats.search.setText("apple")
    qtbot.waitUntil(lambda: len(window.finder.matches) == 3, timeout=10_000)
    window.chats.search.returnPressed.emit()
    assert window.finder.current == 1 and window.statusBar().currentMessage().startswith("match 2 of 3")


# -- importing GGUF files ---------------------------------------------------------------------------

@pytest.mark.parametrize("with_junk", [True, False], ids=["one skipped", "all added"])
def test_an_import_says_what_it_added_and_what_it_skipped(qtbot, fake_app, tmp_path, with_junk):
    s = started(qtbot, fake_app)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    files = [write_gguf(tmp_path / "big-target.gguf", n_tensors=3), write_gguf(tmp_path / "small-draft.gguf")]
    if with_junk:
        junk = tmp_path / "junk.gguf"
        junk.write_bytes(b"not a model")
        files.append(junk)
    handle = dialog.import_paths(files)
    assert handle is not None
    qtbot.waitUntil(lambda: dialog.import_box is not None and dialog.import_box.isVisible(), timeout=20_000)
    box = dialog.import_box
    assert box.text().startswith("Added 2 models") and ("1 file skipped" in box.text()) == with_junk
    details = box.informativeText()
    assert "added big-target.gguf: a model: a target, or the draft of a larger one" in details
    assert "added small-draft.gguf" in details
    assert ("skipped junk.gguf: not a GGUF file" in details) == with_junk  # the name once, then why
    assert box.icon() == (QMessageBox.Icon.Warning if with_junk else QMessageBox.Icon.Information)
    assert dialog.installed.count() == 2
    box.close()
    # the same files again: already in the library, nothing added twice
    again = dialog.import_paths(files[:1])
    assert again is not None
    qtbot.waitUntil(lambda: dialog.import_box is not None and dialog.import_box.isVisible(), timeout=20_000)
    assert dialog.import_box.text() == "1 already in the library"
    assert "already in the library: big-target.gguf" in dialog.import_box.informativeText()
    dialog.import_box.close()


def test_importing_a_trained_drafter_names_its_kind(tmp_path, qwen_draft):
    tok = Tokenizer.from_gguf(qwen_draft)
    head = write_eagle3(tmp_path / "eagle3-target.gguf", tok, seed=2)
    report = Registry(tmp_path / "registry.json").import_files([head, tmp_path / "missing.gguf"])
    assert [m.file_name for m in report.added] == [head.name]
    assert "a trained drafter for its target (llama-server --spec-type draft-eagle3" in report.lines()[0]
    assert report.skipped[0][0] == "missing.gguf" and report.skipped[0][1]
    assert str(tmp_path) not in report.skipped[0][1]  # the name says which file; the reason says why


def test_a_match_is_marked_in_the_text_never_in_a_tag_or_an_entity():
    from specchat.ui.find_in_chat import highlighted, text_spans

    html = "<p><a href='copy:0' style='color:#0b57d0'>Copy</a> a &amp; b, A copy</p>"
    parts = re.split(r"(<[^>]*>)", html)
    spans = {i: [(span, "background:#ff0") for span in text_spans(part, ["copy", "amp", "style"])]
             for i, part in enumerate(parts) if i % 2 == 0 and text_spans(part, ["copy", "amp", "style"])}
    marked = highlighted(html, spans)
    assert marked.count("<span style='background:#ff0'>") == 2  # "Copy" and "copy", not the href, style or &amp;
    assert "<a href='copy:0' style='color:#0b57d0'>" in marked and "&amp;" in marked
