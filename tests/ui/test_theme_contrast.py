"""Themes: every text colour readable on its surface (WCAG 4.5:1), and a theme change restyles
what is already on screen (messages, plots) without adding plot items."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette

from specchat.ui.conversation import ConversationView
from specchat.ui.markdown import render
from specchat.ui.telemetry_panel import TelemetryPanel
from specchat.ui.theme import (
    DARK,
    LIGHT,
    MIN_CONTRAST,
    MIN_FOCUS_CONTRAST,
    Theme,
    apply_theme,
    contrast,
    controller,
    current,
    focus_colour,
    palette,
    token_styles,
)


@pytest.fixture(autouse=True)
def _light_again():
    yield
    apply_theme("light")


def text_pairs(t: Theme) -> dict[str, tuple[str, str]]:
    """Every (text colour, surface colour) the window draws, by name."""
    pairs: dict[str, tuple[str, str]] = {}
    for role, bubble in t.bubbles.items():
        pairs[f"body text on the {role} bubble"] = (t.text, bubble)
        pairs[f"footer text on the {role} bubble"] = (t.muted, bubble)
        pairs[f"link on the {role} bubble"] = (t.link, bubble)
    pairs["text on accepted-draft tint"] = (t.text, t.draft_tint)
    pairs["code text on code background"] = (t.code_text, t.code_bg)
    for ttype, style in token_styles(t.pygments_style, t.code_bg, t.code_text).items():
        pairs[f"code token {ttype}"] = (style.color, t.code_bg)
    pairs["axis text on plot"] = (t.plot_fg, t.plot_bg)
    for key, colour in t.curves:
        pairs[f"legend word '{key}' on plot"] = (colour, t.plot_bg)
    for name, surface in (("window", t.window), ("base", t.base), ("button", t.button)):
        pairs[f"text on {name}"] = (t.text, surface)
    pairs["placeholder on base"] = (t.placeholder, t.base)
    pairs["selected text"] = ("#ffffff", t.highlight)
    pairs["warning on window"] = (t.warning, t.window)
    pairs["error on window"] = (t.error, t.window)
    pairs["link on window"] = (t.link, t.window)
    return pairs


def unreadable(t: Theme) -> list[str]:
    return [f"{name}: {fg} on {bg} is {contrast(fg, bg):.2f}:1"
            for name, (fg, bg) in text_pairs(t).items() if contrast(fg, bg) < MIN_CONTRAST]


def focus_pairs(t: Theme) -> dict[str, tuple[str, str]]:
    """The focus ring against every surface it is drawn on or beside: the window, a text box, a button,
    a list row, a selected row (the ring's colour there is focus_colour's choice)."""
    return {f"focus ring on {name}": (focus_colour(t, surface), surface) for name, surface in
            (("window", t.window), ("base", t.base), ("button", t.button), ("selected row", t.highlight))}


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=["light", "dark"])
def test_the_focus_ring_stands_out_from_every_surface(theme):
    """WCAG 2.2's non-text contrast (3:1) for the keyboard focus indicator, in both themes."""
    low = [f"{name}: {fg} on {bg} is {contrast(fg, bg):.2f}:1"
           for name, (fg, bg) in focus_pairs(theme).items() if contrast(fg, bg) < MIN_FOCUS_CONTRAST]
    assert low == []
    # Fusion's own mark (the highlight darkened, its lightness capped) fails on the dark theme: why the ring
    assert contrast(QColor(DARK.highlight).darker(125).name(), DARK.base) < MIN_FOCUS_CONTRAST


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=["light", "dark"])
def test_a_search_match_reads_on_its_highlight(theme):
    for bg in (theme.match, theme.match_current):
        assert contrast(theme.match_text, bg) >= MIN_CONTRAST
    assert theme.match != theme.match_current


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=["light", "dark"])
def test_every_text_reads_at_4_5_to_1_on_its_surface(theme):
    assert len(text_pairs(theme)) > 60  # the Pygments token types are in
    assert unreadable(theme) == []


def test_the_contrast_check_fails_the_old_dark_theme():
    """White bubbles with light text (what the dark theme used to show) fail, as does a pale legend."""
    old_dark = replace(DARK, bubble_assistant="#ffffff", bubble_user="#e8f0fe")
    assert any("body text on the assistant bubble" in line for line in unreadable(old_dark))
    pale = replace(LIGHT, curves=(*LIGHT.curves[1:], ("speed", "#99aabb")))
    assert any("'speed'" in line for line in unreadable(pale))
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)


def test_the_palette_is_the_theme(qapp):
    p = palette(DARK)
    assert p.color(QPalette.ColorRole.Window).name() == DARK.window
    assert p.color(QPalette.ColorRole.Link).name() == DARK.link
    apply_theme("dark")
    assert qapp.palette().color(QPalette.ColorRole.Base).name() == DARK.base


def test_system_follows_the_colour_scheme_as_it_changes(qapp):
    hints = QGuiApplication.styleHints()
    apply_theme("system")
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert current() is DARK
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert current() is LIGHT
    apply_theme("light")
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # an explicit choice ignores the desktop
    assert current() is LIGHT
    assert controller().set_setting("no-such-theme") in (LIGHT, DARK)  # read as "system"


def test_switching_theme_restyles_a_message_already_shown(qtbot):
    apply_theme("light")
    view = ConversationView()
    qtbot.addWidget(view)
    text = "Hi\n\n```python\nx = 1\n```\n"
    w = view.add("assistant", text)
    w.refresh()
    assert LIGHT.code_bg in w.body.text() and LIGHT.bubble_assistant in w.styleSheet()
    apply_theme("dark")
    assert DARK.code_bg in w.body.text() and LIGHT.code_bg not in w.body.text()
    assert DARK.bubble_assistant in w.styleSheet() and DARK.muted in w.footer_label.styleSheet()
    # links carry their colour: a label keeps the palette it laid out its text with
    assert f"color:{DARK.link}" in w.footer_label.text() and f"color:{DARK.link}" in w.body.text()
    assert w.body.text() == render(text, DARK)[0]
    assert view.add("user", "new").theme is DARK  # made after the change: the new theme too


def test_switching_theme_recolours_the_plots_with_the_same_items(qtbot):
    apply_theme("light")
    panel = TelemetryPanel(__import__("specchat.telemetry", fromlist=["TelemetryRecorder"]).TelemetryRecorder())
    qtbot.addWidget(panel)
    plots = (panel.p_speed, panel.p_acc, panel.p_k, panel.p_time, panel.p_mem)
    items = [len(p.items) for p in plots]
    assert panel.plots.backgroundBrush().color().name() == LIGHT.plot_bg
    apply_theme("dark")
    assert panel.plots.backgroundBrush().color().name() == DARK.plot_bg
    assert panel.c_smooth.opts["pen"].color().name() == DARK.curve("smooth")
    assert panel.p_speed.getAxis("left").textPen().color().name() == DARK.plot_fg
    assert DARK.curve("token") in panel.p_acc.titleLabel.text
    assert [len(p.items) for p in plots] == items


def test_app_settings_offer_the_three_theme_choices_with_system_the_default(qtbot, tmp_path):
    from specchat.config import AppConfig
    from specchat.ui.settings_dialogs import SettingsDialog

    config = AppConfig(tmp_path / "config.toml")
    assert config["theme"] == "system"
    dialog = SettingsDialog(config)
    qtbot.addWidget(dialog)
    combo = dialog.fields["theme"]
    assert [combo.itemText(i) for i in range(combo.count())] == ["system", "light", "dark"]
    combo.setCurrentText("dark")
    dialog.save()
    assert dialog.result_config is not None and AppConfig(tmp_path / "config.toml")["theme"] == "dark"
