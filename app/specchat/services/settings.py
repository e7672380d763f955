"""The app settings in force, and a signal when they change (QtCore only; lives in the GUI thread).

The config layer (:mod:`specchat.config`, Qt-free) checks and saves settings and says what a
change is (:class:`~specchat.config.ConfigChange`: the keys, the settings before and after);
this holder is the one place that puts new settings in force and tells the listeners, each of
which reads the keys it cares about: the telemetry recorder (the guard-rail thresholds), the
theme, and the loaded pair (reloaded only when a key declared ``reloads_pair`` changed).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from specchat.config import AppConfig, ConfigChange


class SettingsHolder(QObject):
    """``config``: the settings in force.  ``changed(ConfigChange)`` after :meth:`set` took new ones."""

    changed = Signal(object)  # ConfigChange, never one without keys

    def __init__(self, config: AppConfig, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._config = config

    @property
    def config(self) -> AppConfig:
        return self._config

    def set(self, config: AppConfig) -> ConfigChange:
        """Put ``config`` (checked and saved by the caller) in force; listeners hear of the changed keys.

        Settings equal to those in force are taken too (a save may have merged another
        process's file) but announce nothing.
        """
        change = self._config.change_to(config)
        self._config = config
        if change:
            self.changed.emit(change)
        return change
