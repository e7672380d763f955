"""What the conversation shows while its chat has no model pair and no message: how to get one.

A newcomer's first window had an empty transcript, a one-line notice naming a menu, and empty
plots.  This card's first control is the way to a pair: "Download the recommended pair…" (the
Models dialog's catalog with the pair for this machine selected) when no model is installed, or
"Choose a pair…" when some are; "Import GGUF files…" for files already on disk.  The window
connects the buttons to its own flows (``open_downloads``, ``import_files``, ``open_models``) and
says what is installed (:meth:`EmptyState.show_for`); the chat pane shows the card while its rule
holds (:meth:`.chat_pane.ChatPane.show_settings`).
"""

from __future__ import annotations

import html
import itertools

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QVBoxLayout, QWidget

from .fitting import FlowRow
from .theme import Theme, controller, current

TITLE = "Get a model pair to start"
WHAT = ("SpecChat answers with two local GGUF models: a target model that writes the answer, and a small "
        "draft model of the same family that guesses ahead of it, so the answer comes faster.")
SERVERS = "A chat can also answer from a server (llama-server, vLLM, an OpenAI-compatible API): Settings → Servers…"
MAX_WIDTH = 640  # px: the card's text stays readable on a wide screen


class EmptyState(QFrame):
    """The card (see the module); its buttons only say what was asked."""

    downloadRequested = Signal()  # Models → Download a pair… (the recommended pair selected)
    importRequested = Signal()  # Models → Import GGUF files…
    chooseRequested = Signal()  # Pair…: the Installed tab

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("empty-state")
        self.setMaximumWidth(MAX_WIDTH)
        v = QVBoxLayout(self)
        v.setContentsMargins(20, 16, 20, 16)
        v.setSpacing(10)
        self.title = QLabel(TITLE)
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.title.setFont(font)
        self.title.setWordWrap(True)
        self.what = QLabel(WHAT)
        self.what.setWordWrap(True)
        self.download_button = QPushButton("Download a pair…")
        self.download_button.setToolTip("Models → Download a pair…: the catalog, with the pair for this "
                                        "machine selected")
        self.download_button.clicked.connect(self.downloadRequested)
        self.import_button = QPushButton("Import GGUF files…")
        self.import_button.setToolTip("Models → Import GGUF files…: models already on this machine")
        self.import_button.clicked.connect(self.importRequested)
        self.choose_button = QPushButton("Choose a pair…")
        self.choose_button.setToolTip("Pair…: the target and draft this chat answers with, from the installed models")
        self.choose_button.clicked.connect(self.chooseRequested)
        self.buttons = QWidget()
        self._row = FlowRow(self.buttons)
        self._row.setContentsMargins(0, 0, 0, 0)
        for button in (self.download_button, self.import_button, self.choose_button):
            button.setParent(self.buttons)
        self.recommendation = QLabel()
        self.recommendation.setWordWrap(True)
        self.recommendation.setTextFormat(Qt.TextFormat.RichText)
        self.servers = QLabel(SERVERS)
        self.servers.setWordWrap(True)
        for w in (self.title, self.what, self.buttons, self.recommendation, self.servers):
            v.addWidget(w)
        self.has_models = False
        self.show_for(False, None)
        self.set_theme(current())
        controller().changed.connect(self.set_theme)

    def show_for(self, has_models: bool, recommended: tuple[str, str] | None) -> None:
        """Installed models or none; ``recommended``: the catalog pair for this machine, (name, size)."""
        self.has_models = has_models
        order = ((self.choose_button, self.download_button, self.import_button) if has_models
                 else (self.download_button, self.import_button))
        while self._row.count():
            self._row.takeAt(0)
        for button in order:
            self._row.addWidget(button)
        self.choose_button.setVisible(has_models)
        self._row.invalidate()
        self.download_button.setText("Download another pair…" if has_models else
                                     "Download the recommended pair…" if recommended else "Download a pair…")
        for button in (self.choose_button, self.download_button, self.import_button):
            button.setDefault(button is order[0])
        if recommended is not None and not has_models:
            name, size = recommended
            self.recommendation.setText(f"Recommended for this machine: <b>{html.escape(name)}</b> ({html.escape(size)} "
                                        "to download, once).")
        else:
            self.recommendation.setText("Models are installed: choose the two this chat answers with." if has_models
                                        else "")
        self.recommendation.setVisible(bool(self.recommendation.text()))
        for a, b in itertools.pairwise(order):
            QWidget.setTabOrder(a, b)

    @property
    def first_button(self) -> QPushButton:
        """The way to a pair: the first control of the card."""
        return self.choose_button if self.has_models else self.download_button

    def set_theme(self, theme: Theme) -> None:
        self.setStyleSheet(f"#empty-state {{ background:{theme.bubble_assistant}; border:1px solid {theme.bubble_border};"
                           " border-radius:8px; }")
        for label in (self.recommendation, self.servers):
            label.setStyleSheet(f"color:{theme.muted};")
