"""Files in a message on screen: chips (name and size) on a message and above the composer, and the reader
that turns chosen, dropped or pasted files into attachments without blocking the window.

A text file is read at once (at most 1 MiB, :func:`specchat.attachments.read_file`); a PDF's text comes
from the same child process the Qt-free reader runs (``specchat --pdf-text``), here a :class:`QProcess`
the event loop waits on, given up after :data:`specchat.attachments.PDF_TIMEOUT_S`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QTimer, Signal
from PySide6.QtWidgets import QLabel, QWidget

from specchat.attachments import (
    PDF_MAX_BYTES,
    PDF_TIMEOUT_S,
    AttachmentError,
    mime_of,
    pdf_answer,
    pdf_command,
    read_file,
    timeout_line,
)
from specchat.store import NewAttachment

from .fitting import FlowRow
from .theme import Theme, current

MAX_CHIPS_SHOWN = 8  # then "+N more"
CHIP_NAME_CHARS = 32  # a longer name is shortened in the middle (the chip's tooltip has it whole)


def size_text(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.0f} KB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MB"


def short_name(name: str, limit: int = CHIP_NAME_CHARS) -> str:
    """``name``, or its start and end around "…" when it is longer than ``limit`` characters: a chip stays
    narrower than the message however long the file's name (its ✕ in view)."""
    if len(name) <= limit:
        return name
    tail = limit // 3
    return f"{name[:limit - tail - 1]}…{name[-tail:]}"


def chip_html(name: str, size: int, theme: Theme, remove: str = "") -> str:
    """One chip: name · size, and a ✕ link when it can be taken off (``remove``: its href)."""
    cross = f" <a href='{remove}' style='color:{theme.muted}; text-decoration:none'>✕</a>" if remove else ""
    return (f"{html.escape(short_name(name))} <span style='color:{theme.muted}'>· {size_text(size)}</span>{cross}")


class ChipRow(QWidget):
    """A row of file chips; with ``removable``, each has a ✕ that asks to take it off."""

    removeRequested = Signal(int)  # the chip's index

    def __init__(self, removable: bool = False, parent: QWidget | None = None, theme: Theme | None = None) -> None:
        super().__init__(parent)
        self.removable = removable
        self.theme = theme or current()
        self.files: list[tuple[str, int]] = []
        # chips wrap onto more rows, and a name longer than the row is cut at its edge: a row of long
        # names never makes the message (or the composer) wider than the view
        self._layout = FlowRow(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._chips: list[QLabel] = []
        self.hide()

    def set_files(self, files: Iterable[tuple[str, int]]) -> None:
        self.files = list(files)
        self._rebuild()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self._rebuild()

    def texts(self) -> list[str]:
        """What the chips say (plain text), for tests and accessibility."""
        return [chip.text() for chip in self._chips]

    def _rebuild(self) -> None:
        while self._layout.count():
            item = self._layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self._chips = []
        t = self.theme
        for i, (name, size) in enumerate(self.files[:MAX_CHIPS_SHOWN]):
            chip = QLabel(chip_html(name, size, t, f"remove:{i}" if self.removable else ""))
            chip.setObjectName("file-chip")
            chip.setToolTip(f"{name}, {size_text(size)}")
            chip.setStyleSheet(f"#file-chip {{ background:{t.bubble_assistant}; border:1px solid {t.bubble_border};"
                               " border-radius:10px; padding:2px 8px; font-size:12px; }")
            chip.linkActivated.connect(self._on_link)
            self._layout.addWidget(chip)
            self._chips.append(chip)
        if len(self.files) > MAX_CHIPS_SHOWN:
            more = QLabel(f"+{len(self.files) - MAX_CHIPS_SHOWN} more")
            more.setStyleSheet(f"color:{t.muted}; font-size:12px;")
            self._layout.addWidget(more)
            self._chips.append(more)
        self.setVisible(bool(self.files))

    def _on_link(self, href: str) -> None:
        if href.startswith("remove:") and href[7:].isdigit():
            self.removeRequested.emit(int(href[7:]))


class FileReader(QObject):
    """Reads files to attach, in the order given: ``read`` for each file taken, ``failed`` with one line
    for each refused; ``busy`` while a PDF's child runs."""

    read = Signal(object)  # NewAttachment
    failed = Signal(str)
    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None, *, timeout_s: float = PDF_TIMEOUT_S) -> None:
        super().__init__(parent)
        self.timeout_s = timeout_s
        self._queue: list[Path] = []
        self._process: QProcess | None = None
        self._current: Path | None = None
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._give_up)

    @property
    def busy(self) -> bool:
        return self._process is not None

    def add(self, paths: Sequence[Path | str]) -> None:
        self._queue.extend(Path(p) for p in paths)
        if not self.busy:
            self._next()

    def cancel(self) -> None:
        """Forget what waits and end the child under way (the pane shows another chat, the window closes)."""
        self._queue.clear()
        if self._process is not None:
            self._end_process()
            self.busyChanged.emit(False)

    def _next(self) -> None:
        while self._queue:
            path = self._queue.pop(0)
            if mime_of(path.name) == "application/pdf":
                self._start_pdf(path)
                return
            try:
                self.read.emit(read_file(path))
            except AttachmentError as exc:
                self.failed.emit(str(exc))

    def _start_pdf(self, path: Path) -> None:
        try:
            if path.stat().st_size > PDF_MAX_BYTES:
                self.failed.emit(f"{path.name} is more than the {PDF_MAX_BYTES >> 20} MiB a PDF may be")
                self._next()
                return
        except OSError as exc:
            self.failed.emit(f"cannot read {path.name}: {exc.strerror or exc}")
            self._next()
            return
        command = pdf_command(path)
        process = QProcess(self)
        process.finished.connect(lambda code, _status, p=process: self._pdf_done(p, code))
        process.errorOccurred.connect(lambda error, p=process: self._pdf_error(p, error))
        self._process, self._current = process, path
        self.busyChanged.emit(True)
        self._timer.start(int(self.timeout_s * 1000))
        process.start(command[0], command[1:])

    def _pdf_done(self, process: QProcess, code: int) -> None:
        if process is not self._process or self._current is None:
            return
        path = self._current
        crashed = process.exitStatus() == QProcess.ExitStatus.CrashExit
        out = bytes(process.readAllStandardOutput().data())
        self._end_process()
        try:
            text = pdf_answer(path.name, -9 if crashed else code, out)
            file = NewAttachment(path.name, "application/pdf", text.encode("utf-8")).checked()
        except (AttachmentError, ValueError) as exc:
            self.failed.emit(str(exc))
        else:
            self.read.emit(file)
        self._after()

    def _pdf_error(self, process: QProcess, error: QProcess.ProcessError) -> None:
        if process is not self._process or error != QProcess.ProcessError.FailedToStart or self._current is None:
            return  # a crash comes through finished too
        name = self._current.name
        self._end_process()
        self.failed.emit(f"cannot start the PDF reader for {name}")
        self._after()

    def _give_up(self) -> None:
        if self._current is None:
            return
        name = self._current.name
        self._end_process()
        self.failed.emit(timeout_line(name, self.timeout_s))
        self._after()

    def _end_process(self) -> None:
        self._timer.stop()
        process, self._process, self._current = self._process, None, None
        if process is not None:
            process.blockSignals(True)
            if process.state() != QProcess.ProcessState.NotRunning:
                process.kill()
                process.waitForFinished(2000)
            process.deleteLater()

    def _after(self) -> None:
        if self._queue:
            self._next()
        if not self.busy:
            self.busyChanged.emit(False)
