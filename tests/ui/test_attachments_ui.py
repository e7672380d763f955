"""Files in the window: dropped or pasted into the composer (or chosen), shown as chips, sent with the
question into the model's prompt, kept as chips on the message after a restart; a binary file is one
line, a PDF is read by its child without blocking the window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QUrl

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from helpers.pdfs import make_pdf


@pytest.fixture(autouse=True)
def _no_qt_warnings(qtlog):
    yield
    bad = [r.message for r in qtlog.records if r.type_name in ("QtWarningMsg", "QtCriticalMsg", "QtFatalMsg")
           and "propagateSizeHints" not in r.message]
    assert not bad, bad


def files_mime(*paths) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def prompt_text(app) -> str:
    return "".join(chr(t) for t in app.factory.pairs[-1].target.tokens if t < 256)


def test_a_pasted_file_goes_with_the_question_and_stays_a_chip(qtbot, fake_app, tmp_path):
    app = fake_app(FakeSpec(answer_tokens=20))
    chat = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    source = tmp_path / "util.py"
    source.write_text("def f(x):\n    return x + 1\n")
    assert pane.composer.canInsertFromMimeData(files_mime(source))
    pane.composer.insertFromMimeData(files_mime(source))  # what a paste or a drop of a file does
    assert pane.composer.toPlainText() == ""  # attached, not typed in as its path
    text = QMimeData()
    text.setText("plain words")
    pane.composer.insertFromMimeData(text)  # a paste of text is text, as ever
    assert pane.composer.toPlainText() == "plain words" and len(pane.pending) == 1
    pane.composer.clear()
    assert [t for t in pane.pending_chips.texts() if "util.py" in t] and pane.pending_chips.isVisible()
    assert "1 file, about 8 tokens" in pane.files_line.text()
    send(qtbot, pane, "rename f to g")
    wait_idle(qtbot, s)
    assert not pane.pending and not pane.pending_chips.isVisible()
    assert "File: util.py\n```python\ndef f(x):\n    return x + 1\n```\n\nrename f to g" in prompt_text(app)
    question = s.store.messages(chat)[0]
    assert [a.name for a in s.store.attachments(question.id)] == ["util.py"]
    app.stop()
    s = app.start(qtbot)
    shown = [w for w in s.window.pane.conversation.messages if w.role == "user"][0]
    assert shown.file_chips.isVisible() and "util.py" in shown.file_chips.texts()[0]


def test_a_file_alone_is_a_question_and_a_chip_can_be_taken_off(qtbot, fake_app, tmp_path):
    app = fake_app(FakeSpec(answer_tokens=10))
    chat = app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "b.csv").write_text("x,y\n1,2\n")
    pane.attach_files([tmp_path / "a.md", tmp_path / "b.csv"])
    pane.pending_chips.removeRequested.emit(0)  # the ✕ on a.md
    assert [f.name for f in pane.pending] == ["b.csv"]
    send(qtbot, pane, "")
    wait_idle(qtbot, s)
    assert s.store.get_chat(chat).title == "b.csv"
    assert "File: b.csv\n```csv\nx,y\n1,2\n```" in prompt_text(app)


def test_a_binary_file_is_one_line_and_nothing_is_attached(qtbot, fake_app, tmp_path):
    app = fake_app(FakeSpec(answer_tokens=10))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00")
    pane.attach_files([tmp_path / "photo.jpg"])
    assert not pane.pending and pane.notice.isVisible()
    assert pane.notice.text().startswith("photo.jpg is not text")


def test_a_pdf_is_read_by_its_child_while_the_window_goes_on(qtbot, fake_app, tmp_path):
    app = fake_app(FakeSpec(answer_tokens=10))
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    (tmp_path / "paper.pdf").write_bytes(make_pdf(["Lookup decoding copies text"]))
    pane.attach_files([tmp_path / "paper.pdf"])
    assert pane.reader.busy and pane.files_line.text() == "reading a PDF…"  # returned at once
    send(qtbot, pane, "summarize it")
    assert "still being read" in pane.notice.text() and not s.store.messages(s.window.chat_id)
    qtbot.waitUntil(lambda: not pane.reader.busy, timeout=30_000)
    assert [f.name for f in pane.pending] == ["paper.pdf"]
    assert "Lookup decoding copies text" in pane.pending[0].data.decode()
