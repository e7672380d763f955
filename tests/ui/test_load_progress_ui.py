"""Loading a pair shows in the chat itself: a slim bar and a line under the header, gone when ready.

The fake pair's slowed load (``FakeSpec.load_s``) reports what a real one does: the target's
weights, the draft's, then the calibration's timed decodes (tests/helpers/fakes.py).
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec


def test_the_pane_shows_the_load_and_the_calibration_and_clears_when_the_pair_is_ready(qtbot, fake_app):
    app = fake_app(FakeSpec(load_s=1.5, answer_tokens=20))
    app.add_chat()
    s = app.start(qtbot)  # the shown chat's pair loads at once
    line = s.window.pane.load_line
    qtbot.waitUntil(lambda: line.text.startswith("Loading fake-target.gguf… ") and line.text.endswith("%"),
                    timeout=10_000)
    assert line.isVisible() and line.bar.maximum() > 0
    qtbot.waitUntil(lambda: line.text.startswith("Calibrating the draft: "), timeout=10_000)
    assert " of 12 timed decodes" in line.text and line.bar.value() > 0
    with qtbot.waitSignal(s.answers.pairLoaded, timeout=10_000):
        pass
    assert line.text == "" and not line.isVisible()
    assert s.window.pane.notice.isHidden()


def test_a_failed_load_leaves_its_failure_line_and_no_bar(qtbot, fake_app):
    app = fake_app(FakeSpec(load_s=0.5, fail_load="fake-target.gguf: llama.cpp could not load the model"))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    qtbot.waitUntil(lambda: pane.load_line.text.startswith("Loading fake-target.gguf"), timeout=10_000)
    with qtbot.waitSignal(s.answers.pairFailed, timeout=10_000):
        pass
    assert pane.load_line.isHidden() and pane.load_line.text == ""
    assert pane.notice.isVisible() and "could not load the model" in pane.notice.text()


def test_a_question_asked_while_the_pair_loads_says_it_waits_for_the_load(qtbot, fake_app):
    app = fake_app(FakeSpec(load_s=1.5, answer_tokens=20))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    qtbot.waitUntil(lambda: s.answers.load_progress is not None, timeout=10_000)
    send(qtbot, pane, "Hello?")
    live = pane.conversation.messages[-1]
    qtbot.waitUntil(lambda: live.footer.startswith("waiting for the model pair to load: Loading fake-")
                    or live.footer.startswith("waiting for the model pair to load: Calibrating"), timeout=10_000)
    wait_idle(qtbot, s)
    assert s.store.messages(pane.chat_id)[-1].state == "done" and pane.load_line.isHidden()


def test_stopping_a_question_that_waits_for_the_load_leaves_the_load_going(qtbot, fake_app):
    """Cancel mid-load behaves as before: the question goes, the pair goes on loading."""
    app = fake_app(FakeSpec(load_s=1.0, answer_tokens=20))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Hello?")
    assert pane.send_button.text() == "Stop"
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
    assert [m.role for m in s.store.messages(pane.chat_id)] == ["user"]
    assert pane.load_line.isVisible()
    with qtbot.waitSignal(s.answers.pairLoaded, timeout=10_000):
        pass
    assert pane.load_line.isHidden() and len(app.factory.loads) == 1
