"""App settings (context, GPU layers, threads, controller thresholds, default mode) and
per-chat settings (system prompt, sampling, max tokens, task tag).

App settings are declared once in :data:`APP_SETTINGS` (key, label, type, default,
range) and stored in the store's settings table; the dialog is built from the list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
)

from specchat.engine.settings import ControllerSettings
from specchat.store import ChatSettings, Store


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    label: str
    default: object
    lo: float = 0
    hi: float = 1
    choices: tuple[str, ...] = ()


_C = ControllerSettings()
APP_SETTINGS: tuple[Setting, ...] = (
    Setting("n_ctx", "Context size (tokens)", 4096, 256, 262144),
    Setting("gpu_layers", "GPU layers, target (-1 = all)", -1, -1, 999),
    Setting("draft_gpu_layers", "GPU layers, draft (-1 = all)", -1, -1, 999),
    Setting("threads", "CPU threads (0 = physical cores)", 0, 0, 256),
    Setting("default_mode", "Default speculation for new chats", "auto", choices=("auto", "draft", "lookup", "off")),
    Setting("k_max", "Longest draft (K max)", _C.k_max, 1, 32),
    Setting("p_min", "Draft stops below this top probability", _C.p_min, 0, 1),
    Setting("min_token_acceptance", "Fall back below token acceptance", _C.min_token_acceptance, 0, 1),
    Setting("min_sequence_acceptance", "Fall back below sequence acceptance", _C.min_sequence_acceptance, 0, 1),
    Setting("fallback_warning_share", "Warn when fallback exceeds this share", _C.fallback_warning_share, 0, 1),
)


def app_setting(store: Store, key: str):
    spec = next(s for s in APP_SETTINGS if s.key == key)
    return store.get_setting(key, spec.default)


def controller_settings(store: Store) -> ControllerSettings:
    return ControllerSettings(
        k_max=int(app_setting(store, "k_max")), p_min=float(app_setting(store, "p_min")),
        min_token_acceptance=float(app_setting(store, "min_token_acceptance")),
        min_sequence_acceptance=float(app_setting(store, "min_sequence_acceptance")),
        fallback_warning_share=float(app_setting(store, "fallback_warning_share")),
    )


class SettingsDialog(QDialog):
    def __init__(self, store: Store, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.store = store
        form = QFormLayout(self)
        self.fields = {}
        for s in APP_SETTINGS:
            value = app_setting(store, s.key)
            if s.choices:
                w = QComboBox()
                w.addItems(s.choices)
                w.setCurrentText(str(value))
            elif isinstance(s.default, int):
                w = QSpinBox()
                w.setRange(int(s.lo), int(s.hi))
                w.setValue(int(value))
            else:
                w = QDoubleSpinBox()
                w.setRange(s.lo, s.hi)
                w.setSingleStep(0.05)
                w.setValue(float(value))
            self.fields[s.key] = w
            form.addRow(s.label, w)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def values(self) -> dict[str, object]:
        out = {}
        for key, w in self.fields.items():
            out[key] = w.currentText() if isinstance(w, QComboBox) else w.value()
        return out

    def save(self) -> None:
        for key, value in self.values().items():
            self.store.set_setting(key, value)
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
