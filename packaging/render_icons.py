"""Render assets/specchat.svg to the PNG sizes a desktop icon theme wants, and copy it for the window icon.

    python packaging/render_icons.py

Writes assets/icons/hicolor/<N>x<N>/apps/specchat.png (N = 16 ... 512) and
app/specchat/ui/specchat.svg; both are committed (tests/test_packaging.py checks they are current).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "assets" / "specchat.svg"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
WINDOW_ICON = ROOT / "app" / "specchat" / "ui" / "specchat.svg"


def png_path(size: int) -> Path:
    return ROOT / "assets" / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "specchat.png"


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        print(f"{SVG}: not a valid SVG", file=sys.stderr)
        return 1
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        out = png_path(size)
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(str(out))
    shutil.copyfile(SVG, WINDOW_ICON)
    print(f"rendered {len(SIZES)} PNG sizes and {WINDOW_ICON.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
