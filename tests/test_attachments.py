"""Reading files to attach: text as it is, a PDF's text through pypdf in a child, anything else refused in
one line; and what the model reads of a question with files."""

from __future__ import annotations

import pytest

from helpers.pdfs import make_pdf
from specchat import attachments
from specchat.attachments import AttachmentError, decode_text, fence_for, message_text, read_file
from specchat.store import MAX_ATTACHMENT_BYTES


@pytest.mark.parametrize("name, mime", [("main.py", "text/x-python"), ("README.md", "text/markdown"),
                                        ("data.csv", "text/csv"), ("doc.json", "application/json"),
                                        ("notes.txt", "text/plain"), ("Makefile", "text/plain")])
def test_text_files_are_taken_as_they_are(tmp_path, name, mime):
    path = tmp_path / name
    path.write_bytes("line one\r\nzwei: ü\n".encode())
    file = read_file(path)
    assert (file.name, file.mime, file.data) == (name, mime, "line one\r\nzwei: ü\n".encode())


def test_a_bom_is_dropped_and_utf16_read(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfhello")
    (tmp_path / "b.txt").write_bytes("\ufeffhallo wörld".encode("utf-16-le"))
    assert read_file(tmp_path / "a.txt").data == b"hello"
    assert read_file(tmp_path / "b.txt").data == "hallo wörld".encode()


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00", b"abc\x00def", b"\xff\xfe\xfa caf\xe9"[2:]])
def test_binary_files_are_refused_in_one_line(tmp_path, data):
    path = tmp_path / "image.png"
    path.write_bytes(data)
    with pytest.raises(AttachmentError, match=r"^image.png is not text \(binary bytes\)"):
        read_file(path)
    assert decode_text(data) is None


def test_a_file_past_the_cap_is_refused_whole_saying_by_how_much(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * (MAX_ATTACHMENT_BYTES + 2048))
    with pytest.raises(AttachmentError, match="big.log is 1.0 MiB, 2 KiB over the 1.0 MiB a file may hold"):
        read_file(path)


def test_a_missing_file_or_a_folder_is_one_line(tmp_path):
    with pytest.raises(AttachmentError, match="cannot read gone.txt"):
        read_file(tmp_path / "gone.txt")
    (tmp_path / "dir").mkdir()
    with pytest.raises(AttachmentError, match="dir is not a file"):
        read_file(tmp_path / "dir")


def test_a_pdf_gives_its_text(tmp_path):
    path = tmp_path / "paper.pdf"
    path.write_bytes(make_pdf(["Speculative decoding", "drafts tokens cheaply"]))
    file = read_file(path)
    assert (file.name, file.mime) == ("paper.pdf", "application/pdf")
    text = file.data.decode()
    assert "Speculative decoding" in text and "drafts tokens cheaply" in text


def test_a_broken_pdf_is_one_line_and_the_app_lives(tmp_path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF")
    with pytest.raises(AttachmentError, match=r"^(cannot read the text of broken.pdf: |broken.pdf has no text)"):
        read_file(path)


def test_a_pdf_reader_that_hangs_is_given_up(tmp_path, monkeypatch):
    path = tmp_path / "slow.pdf"
    path.write_bytes(make_pdf(["x"]))
    monkeypatch.setattr(attachments, "pdf_command", lambda p: ["sleep", "30"])
    with pytest.raises(AttachmentError, match="reading the text of slow.pdf took more than 1 s; not attached"):
        read_file(path, timeout_s=1)


def test_a_pdf_past_the_page_cap_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "long.pdf"
    path.write_bytes(make_pdf(["x"]))
    monkeypatch.setattr(attachments, "PDF_MAX_PAGES", 0)
    monkeypatch.setattr(attachments, "_limit_memory", lambda: None)  # in the child only, never the test's process
    assert attachments.pdf_text_main([str(path)]) == 3
    assert "it has 1 pages; SpecChat reads at most 0" in capsys.readouterr().out


def test_the_pdf_child_caps_its_own_memory(tmp_path):
    import subprocess
    import sys

    code = ("import resource, specchat.attachments as a; a._limit_memory(); "
            "print(resource.getrlimit(resource.RLIMIT_AS)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == attachments.PDF_MEMORY_BYTES


def test_the_model_reads_each_file_fenced_under_its_name_then_the_question():
    text = message_text("rename f to g", [("a.py", "text/x-python", "def f():\n    pass\n"),
                                          ("notes.md", "text/markdown", "has ``` inside")])
    assert text == ("File: a.py\n```python\ndef f():\n    pass\n```\n\n"
                    "File: notes.md\n````markdown\nhas ``` inside\n````\n\nrename f to g")
    assert message_text("just a question", []) == "just a question"
    assert fence_for("````` five") == "``````"
