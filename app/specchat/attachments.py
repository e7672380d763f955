"""Files a user attaches to a question: read into the text a model reads, and put into the message sent.

Qt-free.  :func:`read_file` turns a path into a :class:`~specchat.store.NewAttachment` (its name, type and
text as UTF-8 bytes) or raises :class:`AttachmentError`, one line saying why: text-like files (source code,
Markdown, plain text, CSV, JSON, ...; any file whose bytes are UTF-8 or UTF-16 with a BOM and hold no NUL)
are taken as they are; a PDF's text is extracted by pypdf in a child process (``specchat --pdf-text PATH``),
so a hostile PDF costs at most :data:`PDF_TIMEOUT_S` seconds and :data:`PDF_MEMORY_BYTES` of memory and
never the app, and is bounded to :data:`PDF_MAX_PAGES` pages of a file of at most :data:`PDF_MAX_BYTES`.
Nothing is ever cut: past the store's caps (1 MiB of text a file) a file is refused whole.

:func:`message_text` is what a question with files says to the model: each file fenced under its name, then
the question.  The answer service builds the chat's history with it, so the local backend's context policy
counts the files like any text, and the lookup drafter, which draws from the prompt's tokens, drafts from
them ("change X in this file" copies the file's lines).
"""

from __future__ import annotations

import json
import mimetypes
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from specchat.errors import UserError, exit_description
from specchat.store import Store
from specchat.store.records import MAX_ATTACHMENT_BYTES, NewAttachment, clean_attachment_name

PDF_MAX_BYTES = 64 << 20  # a PDF file
PDF_MAX_PAGES = 2000
PDF_TIMEOUT_S = 60.0
PDF_MEMORY_BYTES = 2 << 30  # the child's address space (Linux, macOS: RLIMIT_AS)
PDF_MIME = "application/pdf"

# What the chooser offers and the composer takes without sniffing; any other file is taken when its bytes
# are text.  The type stored is the first that applies: this table, Python's mimetypes, text/plain.
TEXT_TYPES: dict[str, str] = {
    ".txt": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown", ".rst": "text/x-rst",
    ".csv": "text/csv", ".tsv": "text/tab-separated-values", ".json": "application/json",
    ".jsonl": "application/jsonl", ".yaml": "application/yaml", ".yml": "application/yaml",
    ".toml": "application/toml", ".xml": "application/xml", ".html": "text/html", ".css": "text/css",
    ".ini": "text/plain", ".cfg": "text/plain", ".log": "text/plain",
    ".py": "text/x-python", ".pyi": "text/x-python", ".js": "text/javascript", ".mjs": "text/javascript",
    ".ts": "text/x-typescript", ".tsx": "text/x-typescript", ".jsx": "text/javascript",
    ".c": "text/x-c", ".h": "text/x-c", ".cc": "text/x-c++", ".cpp": "text/x-c++", ".hpp": "text/x-c++",
    ".rs": "text/x-rust", ".go": "text/x-go", ".java": "text/x-java", ".kt": "text/x-kotlin",
    ".swift": "text/x-swift", ".rb": "text/x-ruby", ".php": "text/x-php", ".cs": "text/x-csharp",
    ".sh": "text/x-shellscript", ".bash": "text/x-shellscript", ".zsh": "text/x-shellscript",
    ".sql": "application/sql", ".lua": "text/x-lua", ".r": "text/x-r", ".m": "text/x-objc",
    ".scala": "text/x-scala", ".zig": "text/x-zig", ".dart": "text/x-dart", ".vue": "text/x-vue",
    ".tex": "text/x-tex", ".diff": "text/x-diff", ".patch": "text/x-diff",
}
# The languages code fences name (a highlighter's hint for the model; nothing depends on it).
_FENCE_LANG = {
    "text/x-python": "python", "text/javascript": "javascript", "text/x-typescript": "typescript",
    "text/x-c": "c", "text/x-c++": "cpp", "text/x-rust": "rust", "text/x-go": "go", "text/x-java": "java",
    "application/json": "json", "text/markdown": "markdown", "text/csv": "csv", "application/yaml": "yaml",
    "application/toml": "toml", "text/x-shellscript": "bash", "application/sql": "sql", "text/html": "html",
    "text/css": "css", "application/xml": "xml", "text/x-ruby": "ruby", "text/x-kotlin": "kotlin",
    "text/x-swift": "swift", "text/x-php": "php", "text/x-csharp": "csharp", "text/x-diff": "diff",
}
CHOOSER_FILTER = ("Text, code and PDF (" + " ".join(f"*{e}" for e in TEXT_TYPES if e.count(".") == 1)
                  + " *.pdf);;All files (*)")


class AttachmentError(UserError):
    """A file that cannot be attached: one line naming it and why."""


def read_file(path: Path | str, *, timeout_s: float = PDF_TIMEOUT_S) -> NewAttachment:
    """The file at ``path`` as an attachment: its name, type and text (UTF-8 bytes), or AttachmentError."""
    path = Path(path)
    name = _name(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise AttachmentError(f"{name} is not a file")
    except OSError as exc:
        raise AttachmentError(f"cannot read {name}: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".pdf" or _is_pdf(path):
        if size > PDF_MAX_BYTES:
            raise AttachmentError(f"{name} is {_mib(size)}; a PDF may be at most {_mib(PDF_MAX_BYTES)}")
        text = pdf_text(path, timeout_s=timeout_s)
        return _checked(NewAttachment(name, PDF_MIME, text.encode("utf-8")))
    if size > MAX_ATTACHMENT_BYTES:
        raise AttachmentError(f"{name} is {_mib(size)}, {_mib(size - MAX_ATTACHMENT_BYTES)} over the "
                              f"{_mib(MAX_ATTACHMENT_BYTES)} a file may hold")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_ATTACHMENT_BYTES + 1)
    except OSError as exc:
        raise AttachmentError(f"cannot read {name}: {exc.strerror or exc}") from None
    return from_bytes(name, data)


def from_bytes(name: str, data: bytes, mime: str = "") -> NewAttachment:
    """Text a user pasted or dropped as bytes (or a file read): AttachmentError unless it is text."""
    name = _name(name)
    text = decode_text(data)
    if text is None:
        raise AttachmentError(f"{name} is not text (binary bytes); SpecChat attaches text files, code and PDFs")
    return _checked(NewAttachment(name, mime or mime_of(name), text.encode("utf-8")))


def decode_text(data: bytes) -> str | None:
    """``data`` as text: UTF-8 (a BOM dropped) or UTF-16/32 with its BOM; None for binary bytes (a NUL, or
    not UTF-8).  Line ends stay as they are."""
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
                       (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom):
            try:
                text = data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                return None
            return None if "\x00" in text else text
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def mime_of(name: str) -> str:
    lower = name.lower()
    for ext, mime in TEXT_TYPES.items():
        if lower.endswith(ext):
            return mime
    if lower.endswith(".pdf"):
        return PDF_MIME
    guessed = mimetypes.guess_type(lower, strict=False)[0]
    return guessed if guessed and (guessed.startswith("text/") or guessed.endswith(("json", "xml"))) else "text/plain"


def _checked(file: NewAttachment) -> NewAttachment:
    try:
        return file.checked()
    except ValueError as exc:
        raise AttachmentError(str(exc)) from None


def _name(path: Path | str) -> str:
    try:
        return clean_attachment_name(str(path))
    except ValueError as exc:
        raise AttachmentError(str(exc)) from None


def _mib(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _is_pdf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(5) == b"%PDF-"
    except OSError:
        return False


# -- PDF text, in a child process ------------------------------------------------------------------------

def pdf_command(path: Path) -> list[str]:
    """The child: this program again (``specchat --pdf-text PATH``), as the CPU probe's."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--pdf-text", str(path)]
    return [sys.executable, "-m", "specchat", "--pdf-text", str(path)]


def pdf_text(path: Path, *, timeout_s: float = PDF_TIMEOUT_S) -> str:
    """The text of the PDF at ``path`` (pages joined by a blank line), extracted in a child process with
    a time and a memory limit; AttachmentError for a PDF that is broken, encrypted, too long, has no text
    (a scan) or takes past the limits.  (The window runs the same child without waiting for it.)"""
    name = _name(path)
    try:
        done = subprocess.run(pdf_command(path), capture_output=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AttachmentError(timeout_line(name, timeout_s)) from None
    except OSError as exc:
        raise AttachmentError(f"cannot start the PDF reader for {name}: {exc.strerror or exc}") from None
    return pdf_answer(name, done.returncode, done.stdout)


def timeout_line(name: str, timeout_s: float) -> str:
    return f"reading the text of {name} took more than {timeout_s:.0f} s; not attached"


def pdf_answer(name: str, returncode: int | None, stdout: bytes) -> str:
    """The text the PDF child answered (``returncode``, its ``stdout``), or AttachmentError saying why not."""
    try:
        doc = json.loads(stdout.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        doc = None
    if returncode != 0:
        why = doc.get("error") if isinstance(doc, dict) else None
        if not isinstance(why, str):
            why = f"the PDF reader {exit_description(returncode)}"
        raise AttachmentError(f"cannot read the text of {name}: {why}")
    text = doc.get("text") if isinstance(doc, dict) else None
    if not isinstance(text, str):
        raise AttachmentError(f"cannot read the text of {name}: the PDF reader's answer does not read")
    if not text.strip():
        raise AttachmentError(f"{name} has no text to read (a scan or images only)")
    return text


def _limit_memory() -> None:
    """The child's own cap on its address space (where the OS has one): a PDF built to exhaust memory ends
    in a MemoryError, said in one line, not in the machine swapping."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (PDF_MEMORY_BYTES, PDF_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass


def pdf_text_main(argv: Sequence[str]) -> int:
    """``specchat --pdf-text PATH``: one JSON object on stdout, ``{"text": ...}`` (exit 0) or
    ``{"error": ...}`` (exit 3)."""
    def answer(doc: dict[str, str], code: int) -> int:
        sys.stdout.write(json.dumps(doc))
        sys.stdout.flush()
        return code

    if len(argv) != 1:
        return answer({"error": "usage: specchat --pdf-text PATH"}, 2)
    _limit_memory()
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError

        reader = PdfReader(argv[0], strict=False)
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    return answer({"error": "it is encrypted (a password is needed)"}, 3)
            except (PyPdfError, NotImplementedError) as exc:
                return answer({"error": f"it is encrypted ({exc})"}, 3)
        pages = len(reader.pages)
        if pages > PDF_MAX_PAGES:
            return answer({"error": f"it has {pages} pages; SpecChat reads at most {PDF_MAX_PAGES}"}, 3)
        parts: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            size += len(text.encode("utf-8", "surrogatepass")) + 2
            if size > MAX_ATTACHMENT_BYTES:
                return answer({"error": f"its text is more than the {_mib(MAX_ATTACHMENT_BYTES)} a file may hold"}, 3)
            parts.append(text.strip("\n"))
        return answer({"text": "\n\n".join(parts).encode("utf-8", "replace").decode("utf-8")}, 0)
    except MemoryError:
        return answer({"error": "it needs more memory than the PDF reader may use"}, 3)
    except RecursionError:
        return answer({"error": "it nests too deep"}, 3)
    except Exception as exc:  # pypdf raises many kinds on a broken file; each is one line here
        return answer({"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:200]}, 3)


# -- what the model reads ---------------------------------------------------------------------------------

def fence_for(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text`` (at least three)."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def message_text(question: str, files: Iterable[tuple[str, str, str]]) -> str:
    """A question with its files as the model reads it: each file (name, mime, text) fenced under its
    name, then the question.  Without files, the question as it is."""
    blocks = []
    for name, mime, text in files:
        fence = fence_for(text)
        body = text if text.endswith("\n") or not text else text + "\n"
        blocks.append(f"File: {name}\n{fence}{_FENCE_LANG.get(mime, '')}\n{body}{fence}")
    if not blocks:
        return question
    return "\n\n".join(blocks) + ("\n\n" + question if question else "")


def chat_messages(store: Store, chat_id: int, system_prompt: str = "") -> tuple[dict[str, str], ...]:
    """What a chat's next turn sends: the system prompt, then each shown question (with its files, as
    :func:`message_text` puts them) and each answer with text."""
    return tuple(m for _id, m in chat_messages_with_ids(store, chat_id, system_prompt))


def chat_messages_with_ids(store: Store, chat_id: int,
                           system_prompt: str = "") -> tuple[tuple[int | None, dict[str, str]], ...]:
    """:func:`chat_messages`, each with the id of the stored message it is (None: the system prompt):
    what the context policy left out of a prompt is told back by these ids."""
    files = store.chat_attachments(chat_id)
    msgs: list[tuple[int | None, dict[str, str]]] = (
        [(None, {"role": "system", "content": system_prompt})] if system_prompt else [])
    for m in store.messages(chat_id):
        if m.role == "user":
            attached = [(a.name, a.mime, store.attachment_text(a)) for a in files.get(m.id, ())]
            msgs.append((m.id, {"role": "user", "content": message_text(m.content, attached)}))
        elif m.role == "assistant" and m.content:
            msgs.append((m.id, {"role": m.role, "content": m.content}))
    return tuple(msgs)
