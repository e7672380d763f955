"""Issue 38: a newcomer's first window fits the screen it opens on (a 1280x720 laptop's too), is kept where
the user leaves it and back on a screen that no longer holds it, and starts with the way to a model pair,
the telemetry plots collapsed until an answer gives them something to plot."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, QSettings, QSize
from PySide6.QtWidgets import QWidget

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from helpers.gguf_samples import write_gguf
from specchat.ui import window_geometry as geometry
from specchat.ui.models_dialog import ModelsDialog
from specchat.ui.window_geometry import FRAME_ALLOWANCE, clamped, first_geometry, fits

LAPTOP = QRect(0, 0, 1280, 720)
DESKTOP = QRect(0, 0, 1920, 1080)


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """``screen(rect, ...)``: the screens the window sees (their available geometry), the first one the
    screen it opens on."""

    def use(*rects: QRect) -> None:
        monkeypatch.setattr(geometry, "available_geometry", lambda _widget: rects[0])
        monkeypatch.setattr(geometry, "screens", lambda: list(rects))

    return use


def global_rect(w: QWidget) -> QRect:
    return QRect(w.mapToGlobal(QPoint(0, 0)), w.size())


def test_the_first_geometry_is_the_screens_room_or_the_preferred_size():
    small = first_geometry(LAPTOP)
    assert fits(small, LAPTOP) and small.marginsAdded(FRAME_ALLOWANCE) == LAPTOP  # all the room, frame counted
    big = first_geometry(DESKTOP)
    assert big.size() == QSize(1440, 900) and fits(big, DESKTOP)
    assert abs(big.center().x() - DESKTOP.center().x()) <= 1  # centred
    panel = QRect(0, 32, 1366, 736)  # a 1366x768 screen under a top panel
    assert fits(first_geometry(panel), panel)


def test_a_restored_geometry_is_clamped_onto_the_screen():
    inside = QRect(100, 100, 900, 600)
    assert clamped(inside, LAPTOP) == inside  # a window that fits is left where it is
    off = clamped(QRect(1500, 900, 1900, 1000), LAPTOP)  # saved on a bigger monitor, its corner off screen
    assert fits(off, LAPTOP) and off.size() == LAPTOP.marginsRemoved(FRAME_ALLOWANCE).size()
    right = clamped(QRect(1000, 200, 900, 400), LAPTOP)  # half past the right edge: moved, not shrunk
    assert fits(right, LAPTOP) and right.size() == QSize(900, 400) and right.y() == 200


def shown_dialogs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Models dialogs the window opens from now on, by the tab they open at (none is shown: exec returns)."""
    tabs: list[str] = []

    def exec_(dialog: ModelsDialog) -> int:
        tabs.append(dialog.tabs.tabText(dialog.tabs.currentIndex()))
        return 0

    monkeypatch.setattr(ModelsDialog, "exec", exec_)
    return tabs


def test_a_newcomer_on_a_1280x720_screen_sees_the_composer_whole_and_the_way_to_a_pair(qtbot, fake_app, screen,
                                                                                        monkeypatch):
    screen(LAPTOP)
    app = fake_app()
    s = app.start(qtbot)  # no chat, no model, no config: the window makes the first chat
    w = s.window
    qtbot.waitExposed(w)
    assert fits(w.geometry(), LAPTOP)
    room = LAPTOP.marginsRemoved(FRAME_ALLOWANCE).size()
    assert w.minimumSizeHint().boundedTo(room) == w.minimumSizeHint()  # nothing asks for more than the screen
    pane = w.pane
    for control in (pane.send_button, pane.edit_button, pane.regen_button, pane.attach_button, pane.composer,
                    w.statusBar()):
        assert control.isVisible() and LAPTOP.contains(global_rect(control)), control
    # the empty state, its first control the way to a pair; the plots collapsed: nothing to plot yet
    card = pane.empty_state
    assert card.isVisible() and pane.conversation.viewport().rect().contains(
        card.first_button.mapTo(pane.conversation.viewport(), QPoint(0, 0)))
    assert card.first_button is card.download_button and card.download_button.text().startswith("Download")
    assert LAPTOP.contains(global_rect(card.first_button))
    assert w.telemetry.isHidden() and not w.telemetry.toggleViewAction().isChecked()
    # the buttons open the window's own flows: Models → Download a pair… (the catalog) and Import GGUF files…
    opened = shown_dialogs(monkeypatch)
    card.download_button.click()
    assert opened == ["Catalog"]
    imported: list[bool] = []
    monkeypatch.setattr(ModelsDialog, "import_files", lambda _self: imported.append(True))
    card.import_button.click()
    assert imported == [True] and opened == ["Catalog", "Installed"]


def test_a_1920x1080_screen_gets_the_preferred_size_centred(qtbot, fake_app, screen):
    screen(DESKTOP)
    app = fake_app()
    w = app.start(qtbot).window
    assert w.size() == QSize(1440, 900) and fits(w.geometry(), DESKTOP)


def test_with_models_installed_the_first_control_chooses_a_pair(qtbot, fake_app, screen, tmp_path, monkeypatch):
    screen(LAPTOP)
    app = fake_app()
    s = app.start(qtbot)
    (tmp_path / "models").mkdir()
    s.registry.add(write_gguf(tmp_path / "models" / "tiny-q8_0.gguf"))
    opened = shown_dialogs(monkeypatch)
    s.window._models_changed()  # as after the Models dialog
    card = s.window.pane.empty_state
    assert card.first_button is card.choose_button and card.choose_button.isVisible()
    card.choose_button.click()
    assert opened == ["Installed"]  # Pair…
    target, draft = app.model_files()
    s.window._pair_chosen(target, draft)  # the dialog's Use pair
    assert not card.isVisible() and not s.window.pane.conversation.placeholder_shown


def test_the_window_reopens_where_it_was_and_back_on_a_screen_that_lost_it(qtbot, fake_app, screen, tmp_path):
    state = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    screen(QRect(0, 0, 800, 800))  # the offscreen platform's own screen
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot, window_state=state).window
    w.setGeometry(QRect(40, 60, 700, 650))
    kept = w.geometry()
    app.stop()
    w = app.start(qtbot, window_state=state).window
    assert w.geometry().topLeft() == kept.topLeft()  # remembered (saveGeometry, restoreGeometry)
    app.stop()
    # that monitor is gone: the only screen left is to its right
    other = QRect(2000, 0, 1280, 720)
    screen(other)
    w = app.start(qtbot, window_state=state).window
    assert fits(w.geometry(), other)


def test_the_plots_show_by_themselves_once_an_answer_gives_them_rounds(qtbot, fake_app, screen, tmp_path):
    state = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    screen(LAPTOP)
    app = fake_app(FakeSpec(answer_tokens=30))
    app.add_chat()
    s = app.start(qtbot, window_state=state)
    w = s.window
    assert w.telemetry.isHidden() and w.telemetry_choice == "auto"
    send(qtbot, w.pane, "Hi.")
    qtbot.waitUntil(lambda: w.telemetry.isVisible(), timeout=10_000)
    wait_idle(qtbot, s)
    assert w.telemetry_choice == "auto"  # shown by the data, not chosen
    # the user hides them: kept hidden through the next answers and a restart
    w.telemetry.toggleViewAction().trigger()
    assert w.telemetry.isHidden() and w.telemetry_choice == "hidden"
    send(qtbot, w.pane, "Again.")
    wait_idle(qtbot, s)
    assert w.telemetry.isHidden()
    app.stop()
    w = app.start(qtbot, window_state=state).window
    assert w.telemetry.isHidden() and w.telemetry_choice == "hidden"
    # shown by the user: shown from the start, with nothing to plot yet
    w.telemetry.toggleViewAction().trigger()
    app.stop()
    w = app.start(qtbot, window_state=state).window
    assert w.telemetry.isVisible() and w.telemetry_choice == "shown"


def test_the_docks_close_button_is_the_users_choice_too(qtbot, fake_app, screen, tmp_path):
    state = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    screen(LAPTOP)
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot, window_state=state).window
    w.telemetry.toggleViewAction().trigger()
    assert w.telemetry.isVisible()
    w.telemetry.close()  # what its ✕ does
    assert w.telemetry_choice == "hidden"
    app.stop()
    assert app.start(qtbot, window_state=state).window.telemetry.isHidden()
