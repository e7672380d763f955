"""Start the desktop app: one store, one generation thread, one window."""

from __future__ import annotations

import sys
from pathlib import Path


def run_app(argv: list[str] | None = None, *, config_path: Path | None = None) -> int:
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from specchat.config import AppConfig, ConfigError
    from specchat.store import open_store
    from specchat.workers.generation import GenerationService

    from .main_window import MainWindow
    from .theme import apply_theme

    try:
        config = AppConfig(config_path, must_exist=config_path is not None)
    except ConfigError as exc:
        print(f"specchat: {exc}", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication([sys.argv[0], *(argv or [])])
    app.setApplicationName("SpecChat")
    app.setOrganizationName("SpecChat")
    app.setDesktopFileName("specchat")  # matches packaging/specchat.desktop (Wayland, task bars)
    app.setWindowIcon(QIcon(str(Path(__file__).with_name("specchat.svg"))))
    apply_theme(str(config["theme"]))
    store = open_store()
    service = GenerationService(nice=int(config["decode_nice"]))
    window = MainWindow(store, service, config=config, window_state=QSettings())
    window.show()
    try:
        return app.exec()
    finally:
        service.shutdown()
        store.close()
