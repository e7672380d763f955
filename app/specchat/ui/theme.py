"""Light and dark themes: Qt's Fusion style with a palette (the message bubbles keep their own colours)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication


def apply_theme(name: str) -> None:
    app = QApplication.instance()
    if not isinstance(app, QApplication):  # none yet, or a core application (no widgets, no style)
        return
    app.setStyle("Fusion")
    if name != "dark":
        app.setPalette(app.style().standardPalette())
        return
    p = QPalette()
    for role, colour in (
        (QPalette.ColorRole.Window, "#2b2b2b"), (QPalette.ColorRole.WindowText, "#e6e6e6"),
        (QPalette.ColorRole.Base, "#1f1f1f"), (QPalette.ColorRole.AlternateBase, "#2b2b2b"),
        (QPalette.ColorRole.Text, "#e6e6e6"), (QPalette.ColorRole.Button, "#353535"),
        (QPalette.ColorRole.ButtonText, "#e6e6e6"), (QPalette.ColorRole.Highlight, "#3d6ea8"),
        (QPalette.ColorRole.HighlightedText, "#ffffff"), (QPalette.ColorRole.Link, "#8ab4f8"),
        (QPalette.ColorRole.ToolTipBase, "#353535"), (QPalette.ColorRole.ToolTipText, "#e6e6e6"),
        (QPalette.ColorRole.PlaceholderText, "#9a9a9a"),
    ):
        p.setColor(role, QColor(colour))
    app.setPalette(p)
