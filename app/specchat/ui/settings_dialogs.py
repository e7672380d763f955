"""App settings (context, GPU layers, threads, controller thresholds, default mode, theme)
and per-chat settings (system prompt, sampling, max tokens, task tag)."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
)

from specchat.config import SCHEMA, AppConfig, ConfigError
from specchat.store import ChatSettings


class SettingsDialog(QDialog):
    """Built from the declarative schema in :mod:`specchat.config`; saved to the config file."""

    def __init__(self, config: AppConfig, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.config = config
        self.result_config: AppConfig | None = None  # the saved settings, after OK
        form = QFormLayout(self)
        self.fields = {}
        for s in SCHEMA:
            value = config[s.key]
            if s.choices:
                w = QComboBox()
                w.addItems(s.choices)
                w.setCurrentText(str(value))
            elif isinstance(s.default, str):
                w = QLineEdit(str(value))
                w.setPlaceholderText("not set")
                w.setMinimumWidth(360)  # a model path
            elif isinstance(s.default, int):
                w = QSpinBox()
                w.setRange(int(s.lo), int(s.hi))
                w.setValue(int(value))
            else:
                w = QDoubleSpinBox()
                w.setRange(s.lo, s.hi)
                w.setSingleStep(0.05)
                w.setValue(float(value))
            w.setToolTip(s.help)
            self.fields[s.key] = w
            form.addRow(s.label, w)
        self.error = QLabel()
        self.error.setStyleSheet("color:#b00020")
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def values(self) -> dict[str, object]:
        def value(w):
            if isinstance(w, QComboBox):
                return w.currentText()
            return w.text().strip() if isinstance(w, QLineEdit) else w.value()

        return {key: value(w) for key, w in self.fields.items()}

    def save(self) -> None:
        """Check the whole candidate (every key, then the cross-field rules) before anything is
        applied; the live config is never touched, so Cancel after an error leaves it as it was."""
        try:
            candidate = self.config.replaced(self.values())
            candidate.save()
        except (ConfigError, OSError) as exc:
            self.error.setText(str(exc))
            return
        self.result_config = candidate
        self.accept()


class ChatSettingsDialog(QDialog):
    def __init__(self, settings: ChatSettings, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Chat settings")
        self.base = settings
        form = QFormLayout(self)
        self.system = QPlainTextEdit(settings.system_prompt)
        self.system.setFixedHeight(90)
        self.task = QComboBox()
        self.task.setEditable(True)
        self.task.addItems(["chat", "code", "json", "summary", "creative"])
        self.task.setCurrentText(settings.task)
        self.top_k = QSpinBox(minimum=0, maximum=1000, value=settings.top_k)
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.05, value=settings.top_p)
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=0.99, singleStep=0.01, value=settings.min_p)
        self.repeat = QDoubleSpinBox(minimum=0.5, maximum=2.0, singleStep=0.05, value=settings.repeat_penalty)
        self.seed = QLineEdit(str(settings.seed))
        self.max_tokens = QSpinBox(minimum=1, maximum=131072, value=settings.max_tokens)
        for label, w in (("System prompt", self.system), ("Task tag", self.task), ("top-k", self.top_k),
                         ("top-p", self.top_p), ("min-p", self.min_p), ("Repeat penalty", self.repeat),
                         ("Seed", self.seed), ("Max tokens", self.max_tokens)):
            form.addRow(label, w)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def result_settings(self) -> ChatSettings:
        try:
            seed = int(self.seed.text())
        except ValueError:
            seed = self.base.seed
        return replace(self.base, system_prompt=self.system.toPlainText(), task=self.task.currentText(),
                       top_k=self.top_k.value(), top_p=self.top_p.value(), min_p=self.min_p.value(),
                       repeat_penalty=self.repeat.value(), seed=seed, max_tokens=self.max_tokens.value())
