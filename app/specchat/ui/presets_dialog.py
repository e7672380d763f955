"""Presets…: pick a preset for the chat (or a new chat), edit, save, delete, export and import them.

The list holds the shipped presets and the user's (:class:`specchat.presets.PresetLibrary`); the form on
the right edits the selected one.  Save writes the user's preset (a shipped one edited is saved under its
name and stands in its place; Delete brings the shipped one back).  The dialog only says what was asked
(``applyRequested``, ``newChatRequested``); the window does it through the chat's commands.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specchat.context_policy import POLICIES
from specchat.errors import UserError
from specchat.presets import Preset, PresetLibrary, export_preset, file_stem
from specchat.sampling_settings import STRUCTURED_LABELS, SamplingSettings, Structured, StructuredOutput
from specchat.store import ChatSettings

from .chat_header import SPECULATION
from .theme import current

JSON_FILTER = "SpecChat presets (*.json);;All files (*)"


class PresetsDialog(QDialog):
    applyRequested = Signal(object)  # Preset: the shown chat takes it
    newChatRequested = Signal(object)  # Preset: a new chat with it

    def __init__(self, library: PresetLibrary, parent: QWidget | None = None, *, has_chat: bool = True,
                 current_name: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Presets")
        self.library = library
        self.resize(860, 600)
        outer = QVBoxLayout(self)
        body = QHBoxLayout()
        outer.addLayout(body, 1)

        left = QVBoxLayout()
        self.list = QListWidget()
        self.list.setMinimumWidth(220)
        self.list.currentItemChanged.connect(lambda item, _old: self._show(item))
        left.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.new_button = QPushButton("New")
        self.import_button = QPushButton("Import…")
        self.export_button = QPushButton("Export…")
        for b in (self.new_button, self.import_button, self.export_button):
            row.addWidget(b)
        left.addLayout(row)
        body.addLayout(left)

        form = QFormLayout()
        self.name = QLineEdit()
        self.description = QLineEdit()
        self.speculation = QComboBox()
        for key, text in SPECULATION:
            self.speculation.addItem(text, key.value)
        self.reasoning = QCheckBox("Let models that can think do so")
        self.system = QPlainTextEdit()
        self.system.setFixedHeight(80)
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1)
        self.top_k = QSpinBox(minimum=0, maximum=1000)
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.05)
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=0.99, singleStep=0.01)
        self.repeat = QDoubleSpinBox(minimum=0.5, maximum=2.0, singleStep=0.05)
        self.max_tokens = QSpinBox(minimum=1, maximum=131072)
        self.task = QComboBox()
        self.task.setEditable(True)
        self.task.addItems(["chat", "code", "edit", "json", "summary", "creative"])
        self.context_policy = QComboBox()
        for p in POLICIES:
            self.context_policy.addItem(p.label, p.policy.value)
        self.structured_kind = QComboBox()
        for kind in Structured:
            self.structured_kind.addItem(STRUCTURED_LABELS[kind] or "None", kind.value)
        self.structured_text = QPlainTextEdit()
        self.structured_text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.structured_text.setFixedHeight(110)
        self.structured_kind.currentIndexChanged.connect(
            lambda _i: self.structured_text.setEnabled(bool(self.structured_kind.currentData())))
        sampling = QWidget()
        srow = QHBoxLayout(sampling)
        srow.setContentsMargins(0, 0, 0, 0)
        spins: tuple[tuple[str, QWidget], ...] = (("temp", self.temperature), ("top-k", self.top_k),
                                                  ("top-p", self.top_p), ("min-p", self.min_p), ("repeat", self.repeat))
        for label, spin in spins:
            srow.addWidget(QLabel(label))
            srow.addWidget(spin)
        for label, w in (("Name", self.name), ("Description", self.description), ("Speculation", self.speculation),
                         ("Reasoning", self.reasoning), ("System prompt", self.system), ("Sampling", sampling),
                         ("Max tokens", self.max_tokens), ("Task tag", self.task),
                         ("Past the context", self.context_policy), ("Structured output", self.structured_kind),
                         ("", self.structured_text)):
            form.addRow(label, w)
        self.line = QLabel()
        self.line.setWordWrap(True)
        form.addRow("", self.line)
        right = QVBoxLayout()
        right.addLayout(form)
        right.addStretch(1)
        actions = QHBoxLayout()
        self.save_button = QPushButton("Save")
        self.delete_button = QPushButton("Delete")
        actions.addWidget(self.save_button)
        actions.addWidget(self.delete_button)
        actions.addStretch(1)
        right.addLayout(actions)
        body.addLayout(right, 1)

        bottom = QHBoxLayout()
        bottom.addStretch(1)
        self.new_chat_button = QPushButton("New chat with it")
        self.apply_button = QPushButton("Use in this chat")
        self.apply_button.setEnabled(has_chat)
        self.apply_button.setDefault(True)
        close = QPushButton("Close")
        for b in (self.new_chat_button, self.apply_button, close):
            bottom.addWidget(b)
        outer.addLayout(bottom)

        self.new_button.clicked.connect(self.new_preset)
        self.save_button.clicked.connect(self.save)
        self.delete_button.clicked.connect(self.delete)
        self.import_button.clicked.connect(lambda: self.import_from())
        self.export_button.clicked.connect(lambda: self.export_to())
        self.apply_button.clicked.connect(lambda: self._ask(self.applyRequested))
        self.new_chat_button.clicked.connect(lambda: self._ask(self.newChatRequested))
        close.clicked.connect(self.reject)
        self.refresh(current_name)

    # -- the list -------------------------------------------------------------------------

    def refresh(self, select: str = "") -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for preset in self.library.presets():
            item = QListWidgetItem(preset.name + ("  (shipped)" if preset.shipped else ""))
            item.setData(Qt.ItemDataRole.UserRole, preset)
            item.setToolTip(preset.description)
            self.list.addItem(item)
        self.list.blockSignals(False)
        names = [self._preset(i).name.casefold() for i in range(self.list.count())]
        self.list.setCurrentRow(names.index(select.casefold()) if select.casefold() in names else 0)

    def _preset(self, row: int) -> Preset:
        return self.list.item(row).data(Qt.ItemDataRole.UserRole)

    def selected(self) -> Preset | None:
        item = self.list.currentItem()
        return None if item is None else item.data(Qt.ItemDataRole.UserRole)

    def _show(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        preset: Preset = item.data(Qt.ItemDataRole.UserRole)
        s = preset.settings
        self.name.setText(preset.name)
        self.description.setText(preset.description)
        self.speculation.setCurrentIndex(max(0, self.speculation.findData(s.speculation)))
        self.reasoning.setChecked(s.reasoning)
        self.system.setPlainText(s.system_prompt)
        self.temperature.setValue(s.sampling.temperature)
        self.top_k.setValue(min(s.sampling.top_k, 1000))
        self.top_p.setValue(s.sampling.top_p)
        self.min_p.setValue(s.sampling.min_p)
        self.repeat.setValue(s.sampling.repeat_penalty)
        self.max_tokens.setValue(s.max_tokens)
        self.task.setCurrentText(s.task)
        self.context_policy.setCurrentIndex(max(0, self.context_policy.findData(s.context_policy)))
        self.structured_kind.setCurrentIndex(max(0, self.structured_kind.findData(s.sampling.structured.kind)))
        self.structured_text.setPlainText(s.sampling.structured.text)
        self.structured_text.setEnabled(s.sampling.structured.active)
        self.delete_button.setEnabled(not preset.shipped)
        self.delete_button.setText("Delete" if not self._is_override(preset) else "Back to the shipped one")
        self._say("")

    def _is_override(self, preset: Preset) -> bool:
        from specchat.presets import SHIPPED

        return not preset.shipped and any(p.name.casefold() == preset.name.casefold() for p in SHIPPED)

    # -- the form ---------------------------------------------------------------------------

    def form_preset(self) -> Preset:
        """The preset the form shows, checked as a file's would be (PresetError or ValueError: one line)."""
        base = self.selected()
        old = base.settings.sampling if base is not None else SamplingSettings()
        kind = self.structured_kind.currentData() or ""
        sampling = SamplingSettings(
            temperature=self.temperature.value(), top_k=self.top_k.value(), top_p=self.top_p.value(),
            min_p=self.min_p.value(), repeat_penalty=self.repeat.value(), repeat_last_n=old.repeat_last_n,
            seed=old.seed, structured=StructuredOutput(kind, self.structured_text.toPlainText() if kind else ""))
        settings = ChatSettings(speculation=self.speculation.currentData(), reasoning=self.reasoning.isChecked(),
                                system_prompt=self.system.toPlainText(), sampling=sampling,
                                max_tokens=self.max_tokens.value(), task=self.task.currentText(),
                                context_policy=self.context_policy.currentData())
        preset = Preset(self.name.text(), settings, self.description.text())
        return Preset.from_json(preset.to_json())  # every rule a file is read with

    def _checked(self) -> Preset | None:
        try:
            return self.form_preset()
        except (UserError, ValueError) as exc:
            self._say(str(exc), error=True)
            return None

    def _say(self, text: str, error: bool = False) -> None:
        theme = current()
        self.line.setText(text)
        self.line.setStyleSheet(f"color:{theme.error if error else theme.muted}")

    # -- actions ----------------------------------------------------------------------------

    def new_preset(self) -> None:
        base = self.selected()
        name, n = "My preset", 1
        taken = {p.name.casefold() for p in self.library.presets()}
        while name.casefold() in taken:
            n += 1
            name = f"My preset {n}"
        settings = base.settings if base is not None else ChatSettings()
        item = QListWidgetItem(name + "  (new)")
        item.setData(Qt.ItemDataRole.UserRole, Preset(name, settings, ""))
        self.list.addItem(item)
        self.list.setCurrentItem(item)
        self.name.setFocus()
        self.name.selectAll()

    def save(self) -> Preset | None:
        preset = self._checked()
        if preset is None:
            return None
        try:
            path = self.library.save(preset)
        except (UserError, OSError, ValueError) as exc:
            self._say(f"not saved: {getattr(exc, 'strerror', None) or exc}", error=True)
            return None
        self.refresh(preset.name)
        self._say(f"saved as {path}")
        return preset

    def delete(self) -> None:
        preset = self.selected()
        if preset is None or preset.shipped:
            return
        try:
            self.library.delete(preset.name)
        except OSError as exc:
            self._say(f"not deleted: {exc.strerror or exc}", error=True)
            return
        self.refresh(preset.name)

    def import_from(self, path: Path | None = None) -> Preset | None:
        if path is None:
            chosen, _ = QFileDialog.getOpenFileName(self, "Import a preset", "", JSON_FILTER)
            if not chosen:
                return None
            path = Path(chosen)
        try:
            preset = self.library.import_file(path)
        except (UserError, OSError, ValueError) as exc:
            self._say(f"not imported: {getattr(exc, 'strerror', None) or exc}", error=True)
            return None
        self.refresh(preset.name)
        self._say(f"imported {preset.name!r} from {path.name}")
        return preset

    def export_to(self, path: Path | None = None) -> Path | None:
        preset = self._checked()
        if preset is None:
            return None
        if path is None:
            chosen, _ = QFileDialog.getSaveFileName(self, "Export the preset", f"{file_stem(preset.name)}.json",
                                                    JSON_FILTER)
            if not chosen:
                return None
            path = Path(chosen)
        try:
            export_preset(preset, path)
        except OSError as exc:
            self._say(f"not exported: {exc.strerror or exc}", error=True)
            return None
        self._say(f"exported to {path}")
        return path

    def _ask(self, signal) -> None:  # noqa: ANN001 - a bound Signal
        preset = self._checked()
        if preset is None:
            return
        signal.emit(preset)
        self.accept()


def preset_summary(preset: Preset) -> str:
    """One line on what a preset sets (the list's tooltip, the status bar after applying it)."""
    s = preset.settings
    parts = [s.speculation, f"temp {s.sampling.temperature:g}", "reasoning" if s.reasoning else "no reasoning"]
    if s.sampling.structured.active:
        parts.append(s.sampling.structured.label)
    if s.system_prompt:
        parts.append("system prompt")
    return f"{preset.name}: " + ", ".join(parts)

