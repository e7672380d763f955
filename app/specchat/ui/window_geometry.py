"""Where the main window opens, and how big: within the screen it opens on, always.

The first window was 1200x800 on any screen: on a 1280x720 screen its bottom (the composer's
buttons, the status bar) lay below the screen's edge until the user maximized it.  Now the first
window takes :data:`PREFERRED` where the screen has room for it, and otherwise all the room the
screen's available geometry (the screen less its panels and docks) leaves once the window
manager's frame is counted, centred on it.  Afterwards the window opens where the user left it
(Qt's saveGeometry and restoreGeometry, in the window state), clamped back onto the available
geometry of a screen when that no longer holds it (a smaller or unplugged monitor).

The functions here are plain arithmetic on rectangles; :func:`available_geometry` and
:func:`screens` are the only ones that ask Qt about the screens (the tests replace them).
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize
from PySide6.QtGui import QCursor, QGuiApplication
from PySide6.QtWidgets import QWidget

PREFERRED = QSize(1440, 900)  # the first window on a screen with room for it (a 1920x1080 one)
# a window manager's title bar and borders, about, before the window has them (the first geometry is set
# before it shows): generous, so that the frame fits too; once shown, the real frame is measured
FRAME_ALLOWANCE = QMargins(4, 40, 4, 4)


def first_geometry(available: QRect, frame: QMargins = FRAME_ALLOWANCE, preferred: QSize = PREFERRED) -> QRect:
    """The first window's client rectangle: ``preferred``, or what ``available`` leaves once ``frame`` is
    counted, whichever is smaller, centred in the available geometry."""
    room = available.marginsRemoved(frame)
    size = preferred.boundedTo(room.size())
    top_left = room.topLeft() + QPoint((room.width() - size.width()) // 2, (room.height() - size.height()) // 2)
    return QRect(top_left, size)


def clamped(client: QRect, available: QRect, frame: QMargins = FRAME_ALLOWANCE) -> QRect:
    """``client`` (a window's client rectangle, ``frame`` around it) moved and, where it must, shrunk so
    that the window and its frame lie inside ``available``; the same rectangle when they do already."""
    room = available.marginsRemoved(frame)
    size = client.size().boundedTo(room.size())
    x = min(max(client.x(), room.x()), room.x() + room.width() - size.width())
    y = min(max(client.y(), room.y()), room.y() + room.height() - size.height())
    return QRect(QPoint(x, y), size)


def fits(client: QRect, available: QRect, frame: QMargins = FRAME_ALLOWANCE) -> bool:
    return available.contains(client.marginsAdded(frame))


def home(client: QRect, screens_available: list[QRect]) -> QRect | None:
    """The available geometry that holds most of ``client`` (None: no screen shows any of it)."""
    best, area = None, 0
    for rect in screens_available:
        common = rect.intersected(client)
        if common.width() * common.height() > area:
            best, area = rect, common.width() * common.height()
    return best


# -- the screens (the tests replace these two) -------------------------------------------------------

def available_geometry(widget: QWidget) -> QRect:
    """The available geometry of the screen a new window opens on: the one under the mouse pointer (where
    window managers open a new window), else the widget's."""
    screen = QGuiApplication.screenAt(QCursor.pos()) or widget.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry()


def screens() -> list[QRect]:
    """Every screen's available geometry, the primary one first."""
    primary = QGuiApplication.primaryScreen()
    others = [s for s in QGuiApplication.screens() if s is not primary]
    return [s.availableGeometry() for s in ([primary] if primary is not None else []) + others]
