"""One message in the conversation: markdown answer, collapsible reasoning, footer, copy."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout

from .markdown import render

ROLE_STYLE = {
    "user": "background:#e8f0fe; border-radius:8px;",
    "assistant": "background:#ffffff; border:1px solid #e3e3e3; border-radius:8px;",
    "system": "background:#fff8e1; border-radius:8px;",
}
DRAFT_TINT = "#d9f2d9"  # accepted draft tokens


class MessageWidget(QFrame):
    """Shows one message; the streaming one is updated in place (only it re-renders)."""

    copyRequested = Signal(str)

    def __init__(self, role: str, content: str = "", reasoning: str = "", footer: str = "",
                 parent=None) -> None:
        super().__init__(parent)
        self.role = role
        self.content = content
        self.reasoning = reasoning
        self.footer = footer
        self.reasoning_open = False  # collapsed by default
        self.segments: list[tuple[str, bool]] = []  # (text, from an accepted draft) for the tinted view
        self.tint = False
        self._codes: list[str] = []
        self.setObjectName(f"message-{role}")
        self.setStyleSheet(f"#message-{role} {{ {ROLE_STYLE.get(role, '')} }}")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        self.reasoning_label = QLabel()
        self.reasoning_label.setTextFormat(Qt.TextFormat.RichText)
        self.reasoning_label.setWordWrap(True)
        self.reasoning_label.linkActivated.connect(self._on_link)
        self.body = QLabel()
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.body.linkActivated.connect(self._on_link)
        self.footer_label = QLabel()
        self.footer_label.setStyleSheet("color:#777; font-size:11px;")
        self.footer_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.footer_label.linkActivated.connect(self._on_link)
        for w in (self.reasoning_label, self.body, self.footer_label):
            layout.addWidget(w)
        self.refresh()

    # -- content ------------------------------------------------------------------

    def set_content(self, content: str, reasoning: str = "", footer: str | None = None) -> None:
        self.content, self.reasoning = content, reasoning
        if footer is not None:
            self.footer = footer
        self.refresh()

    def refresh(self) -> None:
        if self.tint and self.segments:
            body = "".join(
                f"<span style='background:{DRAFT_TINT}'>{_plain(t)}</span>" if d else _plain(t)
                for t, d in self.segments
            )
            self._codes = []
        else:
            body, self._codes = render(self.content) if self.content else ("", [])
        self.body.setText(body or "<i style='color:#999'>…</i>")
        if self.reasoning:
            words = len(self.reasoning.split())
            if self.reasoning_open:
                text = (f"<a href='think'>▾ Hide reasoning</a><div style='color:#666; margin-left:8px'>"
                        f"{_plain(self.reasoning)}</div>")
            else:
                text = f"<a href='think'>▸ Show reasoning ({words} words)</a>"
            self.reasoning_label.setText(text)
        self.reasoning_label.setVisible(bool(self.reasoning))
        links = "" if not self.content else " · <a href='copyall'>Copy</a>"
        self.footer_label.setText(html.escape(self.footer) + links if self.role != "system" else "")
        self.footer_label.setVisible(self.role != "system")

    def _on_link(self, href: str) -> None:
        if href == "think":
            self.reasoning_open = not self.reasoning_open
            self.refresh()
        elif href == "copyall":
            self._copy(self.content)
        elif href.startswith("copy:"):
            self._copy(self._codes[int(href[5:])])

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        self.copyRequested.emit(text)


def _plain(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")
