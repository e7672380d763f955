"""Light and dark themes: every colour the window draws, derived in this one place.

A :class:`Theme` is plain data: the Qt palette's colours, the message bubbles, the code
blocks (with a Pygments style whose token colours are made readable on the code
background), the plots.  The setting is "system" (follow the desktop's light or dark
scheme, and its changes), "light" or "dark".  :func:`controller` owns the app's one
choice and says when the theme in force changes; widgets take their colours from
:func:`current` when made and restyle on :attr:`ThemeController.changed`.

Text contrast is WCAG's (relative luminance); every text colour here is at least
:data:`MIN_CONTRAST` on the surface it is drawn on (tests/ui/test_theme_contrast.py).

Keyboard focus is drawn by :class:`FocusStyle` (Fusion, whose own focus marks are faint: a
darkened highlight at 30% opacity, lost on the dark theme) as a 2 px ring in ``Theme.focus``, at
least :data:`MIN_FOCUS_CONTRAST` against the window, the text boxes and the buttons it surrounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pygments.styles import get_style_by_name
from pygments.token import Token, _TokenType
from PySide6.QtCore import QObject, QRect, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPainter, QPalette, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleOption, QWidget

MIN_CONTRAST = 4.5  # WCAG AA for body text
MIN_FOCUS_CONTRAST = 3.0  # WCAG 2.2 non-text contrast (1.4.11) for the focus ring
FOCUS_WIDTH = 2  # px
SETTINGS = ("system", "light", "dark")


@dataclass(frozen=True, slots=True)
class Theme:
    name: str
    dark: bool
    # the Qt palette
    window: str
    base: str
    text: str
    button: str
    highlight: str
    link: str
    placeholder: str
    # the conversation
    bubble_user: str
    bubble_assistant: str
    bubble_system: str
    bubble_border: str
    muted: str  # footers, the reasoning, a code block's language
    draft_tint: str  # behind text from accepted draft tokens
    code_bg: str
    code_border: str
    code_text: str
    pygments_style: str
    warning: str  # notices, on the window
    error: str
    focus: str  # the keyboard focus ring (FocusStyle)
    # a search's matches in the open chat (ui/find_in_chat.py): every one, the current one, their text
    match: str
    match_current: str
    match_text: str
    # the telemetry plots: background, axes and their text, one colour per curve (its legend word too)
    plot_bg: str
    plot_fg: str
    curves: tuple[tuple[str, str], ...]

    def curve(self, key: str) -> str:
        return dict(self.curves)[key]

    @property
    def bubbles(self) -> dict[str, str]:
        return {"user": self.bubble_user, "assistant": self.bubble_assistant, "system": self.bubble_system}


LIGHT = Theme(
    name="light", dark=False,
    window="#efefef", base="#ffffff", text="#1e1e1e", button="#efefef", highlight="#3d6ea8",
    link="#0b57d0", placeholder="#6b6b6b",
    bubble_user="#e8f0fe", bubble_assistant="#ffffff", bubble_system="#fff8e1", bubble_border="#d6d6d6",
    muted="#5a5f66", draft_tint="#d4f0d4", code_bg="#f6f8fa", code_border="#d0d7de", code_text="#1e1e1e",
    pygments_style="default", warning="#7a4f00", error="#b00020", focus="#0b57d0",
    match="#fff176", match_current="#ff9800", match_text="#000000",
    plot_bg="#ffffff", plot_fg="#333333",
    curves=(("speed", "#5c7385"), ("smooth", "#1565c0"), ("plain", "#c62828"), ("token", "#2e7d32"),
            ("sequence", "#b34700"), ("k", "#6a1b9a"), ("fallback", "#c62828"), ("draft", "#8e24aa"),
            ("verify", "#1565c0"), ("overhead", "#616161"), ("rss", "#455a64"), ("vram", "#c2185b"),
            ("pvram", "#ad1457")),
)

DARK = Theme(
    name="dark", dark=True,
    window="#2b2b2b", base="#1f1f1f", text="#e6e6e6", button="#353535", highlight="#3d6ea8",
    link="#8ab4f8", placeholder="#a0a0a0",
    # the old dark theme kept white bubbles with light-grey text (1.2:1): bubbles are dark surfaces now
    bubble_user="#1e3252", bubble_assistant="#242424", bubble_system="#3a3020", bubble_border="#3c3c3c",
    muted="#ababab", draft_tint="#1f4d2a", code_bg="#161b22", code_border="#30363d", code_text="#e6edf3",
    pygments_style="github-dark", warning="#f0b44c", error="#ff8a80", focus="#7cc4ff",
    match="#e6c84f", match_current="#ff9f43", match_text="#000000",
    plot_bg="#1e1e1e", plot_fg="#d0d0d0",
    curves=(("speed", "#8fa3b3"), ("smooth", "#64b5f6"), ("plain", "#ef7a7a"), ("token", "#81c784"),
            ("sequence", "#ffb74d"), ("k", "#ce93d8"), ("fallback", "#ef7a7a"), ("draft", "#ce93d8"),
            ("verify", "#64b5f6"), ("overhead", "#bdbdbd"), ("rss", "#b0bec5"), ("vram", "#f48fb1"),
            ("pvram", "#f8bbd0")),
)

THEMES = {"light": LIGHT, "dark": DARK}


# -- contrast -------------------------------------------------------------------------------

def luminance(colour: str) -> float:
    """WCAG relative luminance of '#rrggbb' (or '#rgb')."""
    c = QColor(colour)
    if not c.isValid():
        raise ValueError(f"not a colour: {colour!r}")

    def lin(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(c.redF()) + 0.7152 * lin(c.greenF()) + 0.0722 * lin(c.blueF())


def contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio, 1 to 21."""
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def readable(colour: str, bg: str, minimum: float = MIN_CONTRAST) -> str:
    """``colour``, or the nearest mix of it toward black or white that reaches ``minimum`` on ``bg``."""
    if contrast(colour, bg) >= minimum:
        return colour
    c = QColor(colour)
    toward = QColor("#ffffff") if luminance(bg) < 0.18 else QColor("#000000")
    for step in range(1, 21):
        t = step / 20
        mixed = QColor.fromRgbF(c.redF() + (toward.redF() - c.redF()) * t,
                                c.greenF() + (toward.greenF() - c.greenF()) * t,
                                c.blueF() + (toward.blueF() - c.blueF()) * t).name()
        if contrast(mixed, bg) >= minimum:
            return mixed
    return toward.name()


# -- code colours ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TokenStyle:
    color: str
    bold: bool
    italic: bool

    def css(self) -> str:
        return (f"color:{self.color}" + (";font-weight:bold" if self.bold else "")
                + (";font-style:italic" if self.italic else ""))


@cache
def token_styles(style_name: str, code_bg: str, code_text: str) -> dict[_TokenType, TokenStyle]:
    """Each token type's style from the Pygments style, its colour made readable on ``code_bg``.

    Pygments' own styles miss 4.5:1 here and there (measured on these backgrounds: 'default'
    whitespace 1.8:1, 'github-dark' 3.8:1), so each colour is mixed toward the text until it reads.
    """
    style = get_style_by_name(style_name)
    out: dict[_TokenType, TokenStyle] = {}
    for ttype, s in style:
        colour = f"#{s['color']}" if s["color"] else code_text
        out[ttype] = TokenStyle(readable(colour, code_bg), bool(s["bold"]), bool(s["italic"]))
    out.setdefault(Token, TokenStyle(code_text, False, False))
    return out


# -- the theme in force -------------------------------------------------------------------------

def resolve(setting: str, scheme: Qt.ColorScheme) -> Theme:
    """The theme a setting means under the system's colour scheme (unknown schemes are light)."""
    if setting == "system":
        return DARK if scheme == Qt.ColorScheme.Dark else LIGHT
    return THEMES.get(setting, LIGHT)


def palette(theme: Theme) -> QPalette:
    p = QPalette()
    for role, colour in (
        (QPalette.ColorRole.Window, theme.window), (QPalette.ColorRole.WindowText, theme.text),
        (QPalette.ColorRole.Base, theme.base), (QPalette.ColorRole.AlternateBase, theme.window),
        (QPalette.ColorRole.Text, theme.text), (QPalette.ColorRole.Button, theme.button),
        (QPalette.ColorRole.ButtonText, theme.text), (QPalette.ColorRole.Highlight, theme.highlight),
        (QPalette.ColorRole.HighlightedText, "#ffffff"), (QPalette.ColorRole.Link, theme.link),
        (QPalette.ColorRole.LinkVisited, theme.link),
        (QPalette.ColorRole.ToolTipBase, theme.button), (QPalette.ColorRole.ToolTipText, theme.text),
        (QPalette.ColorRole.PlaceholderText, theme.placeholder), (QPalette.ColorRole.BrightText, "#ffffff"),
    ):
        p.setColor(role, QColor(colour))
    for role, colour in ((QPalette.ColorRole.WindowText, theme.placeholder),
                         (QPalette.ColorRole.Text, theme.placeholder),
                         (QPalette.ColorRole.ButtonText, theme.placeholder)):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(colour))
    return p


def focus_colour(theme: Theme, background: str | None = None) -> str:
    """The focus ring's colour over ``background``: the theme's ``focus``, or where that would not stand
    out (a selected row, in the selection colour) the selected text's white or black, whichever does."""
    if background is None or contrast(theme.focus, background) >= MIN_FOCUS_CONTRAST:
        return theme.focus
    return max(("#ffffff", "#000000"), key=lambda c: contrast(c, background))


class FocusStyle(QProxyStyle):
    """Fusion, with the widget that has keyboard focus ringed in the theme's ``focus`` colour.

    Text boxes (line edits, text edits, spin boxes, combo boxes) show it whenever they have focus:
    typing goes there.  Buttons, check boxes, tabs and list items show it once the keyboard moved the
    focus (Qt's ``State_KeyboardFocusChange``, as Fusion does), not after a click.
    """

    _BOXES = (QStyle.PrimitiveElement.PE_FrameLineEdit, QStyle.PrimitiveElement.PE_Frame)
    _COMPLEX = (QStyle.ComplexControl.CC_SpinBox, QStyle.ComplexControl.CC_ComboBox)

    def __init__(self) -> None:
        super().__init__("Fusion")

    def drawPrimitive(self, element: QStyle.PrimitiveElement, option: QStyleOption, painter: QPainter,  # noqa: N802
                      widget: QWidget | None = None) -> None:
        if element == QStyle.PrimitiveElement.PE_FrameFocusRect:
            if option.state & QStyle.StateFlag.State_KeyboardFocusChange:
                # a list row's focus is drawn on the row: over the selection colour when it is selected
                bg = getattr(option, "backgroundColor", None)
                self._ring(option.rect, painter, bg.name() if isinstance(bg, QColor) and bg.isValid() else None)
            return
        super().drawPrimitive(element, option, painter, widget)
        if element in self._BOXES and option.state & QStyle.StateFlag.State_HasFocus:
            self._ring(option.rect, painter)

    def drawComplexControl(self, control: QStyle.ComplexControl, option, painter: QPainter,  # noqa: N802
                           widget: QWidget | None = None) -> None:
        super().drawComplexControl(control, option, painter, widget)
        if control in self._COMPLEX and option.state & QStyle.StateFlag.State_HasFocus:
            self._ring(option.rect, painter)

    def drawControl(self, element: QStyle.ControlElement, option: QStyleOption, painter: QPainter,  # noqa: N802
                    widget: QWidget | None = None) -> None:
        super().drawControl(element, option, painter, widget)
        if (element == QStyle.ControlElement.CE_PushButtonBevel and option.state & QStyle.StateFlag.State_HasFocus
                and option.state & QStyle.StateFlag.State_KeyboardFocusChange):
            self._ring(option.rect, painter)

    @staticmethod
    def _ring(rect: QRect, painter: QPainter, background: str | None = None) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        pen = QPen(QColor(focus_colour(current(), background)), FOCUS_WIDTH)
        pen.setJoinStyle(Qt.PenJoinStyle.MiterJoin)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        half = FOCUS_WIDTH // 2
        painter.drawRect(rect.adjusted(half, half, -half, -half))
        painter.restore()


class ThemeController(QObject):
    """The app's theme setting and the theme in force; ``changed(Theme)`` when the latter changes."""

    changed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setting = "system"
        self.theme = LIGHT
        hints = QGuiApplication.styleHints() if QGuiApplication.instance() is not None else None
        if hints is not None:
            hints.colorSchemeChanged.connect(self._on_scheme)

    def set_setting(self, setting: str) -> Theme:
        """Use "system", "light" or "dark" (anything else reads as "system") from now on."""
        self.setting = setting if setting in SETTINGS else "system"
        hints = QGuiApplication.styleHints() if QGuiApplication.instance() is not None else None
        scheme = hints.colorScheme() if hints is not None else Qt.ColorScheme.Unknown
        self._use(resolve(self.setting, scheme))
        return self.theme

    def _on_scheme(self, scheme: Qt.ColorScheme) -> None:
        if self.setting == "system":
            self._use(resolve("system", scheme))

    def _use(self, theme: Theme) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):  # a core application has no style or palette
            if not isinstance(app.style(), FocusStyle):
                app.setStyle(FocusStyle())
            app.setPalette(palette(theme))
        if theme != self.theme:
            self.theme = theme
            self.changed.emit(theme)


_controller: ThemeController | None = None


def controller() -> ThemeController:
    """The app's one theme controller (made on first use, owned by the application object)."""
    global _controller
    app = QGuiApplication.instance()
    try:
        stale = _controller is None or (app is not None and _controller.parent() is None)
    except RuntimeError:  # the application that owned it is gone
        stale = True
    if stale:
        _controller = ThemeController(app)
    assert _controller is not None
    return _controller


def current() -> Theme:
    """The theme in force now (light until one is applied)."""
    return _controller.theme if _controller is not None else LIGHT


def apply_theme(setting: str) -> Theme:
    """Use a theme setting ("system", "light" or "dark") for the whole app from now on."""
    return controller().set_setting(setting)
