"""Per-chat switches, visible above the conversation and saved with the chat.

The header wraps (a :class:`~.fitting.FlowRow`): on a wide window it is one row, the pair's
name elided to the room left; on a narrow one the switches move onto further rows, so the
header never makes the window wider than its widest switch.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QPushButton, QWidget

from specchat.modes import MODES
from specchat.remote.llama_server import MANAGED

from .fitting import ElidedLabel, FlowRow

SPECULATION = [(m.mode, m.label) for m in MODES]
SERVER_DECIDES = "the server decides its draft model and speculation (Chat settings… → Backend)"
NO_SWITCH_TIP = ("This model's chat template has no reasoning switch (enable_thinking), "
                 "so reasoning cannot be turned on or off for it.")


class ChatHeader(QWidget):
    changed = Signal(dict)  # the changed settings, e.g. {"speculation": "lookup"}
    pairRequested = Signal()
    settingsRequested = Signal()
    presetsRequested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.pair_label = ElidedLabel("No model pair")
        row = FlowRow(self, elastic=self.pair_label)
        row.setContentsMargins(8, 4, 8, 4)
        self.pair_button = QPushButton("Pair…")
        self.pair_button.setToolTip("Choose the target and draft models for this chat")
        # what the chat answers with besides the pair, when anything: a schema or grammar, a system prompt
        self.active = ElidedLabel()
        bold = self.active.font()
        bold.setBold(True)
        self.active.setFont(bold)
        self.active.hide()
        self.speculation = QComboBox()
        self.speculation.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.speculation.setMinimumContentsLength(12)
        for key, text in SPECULATION:
            self.speculation.addItem(text, key.value)
        self.reasoning = QCheckBox("Reasoning")
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setPrefix("temp ")
        self.more = QPushButton("Chat settings…")
        self.presets = QPushButton("Preset…")
        self.presets.setToolTip("Give this chat a preset's settings, or edit, import and export presets")
        self.presets.clicked.connect(self.presetsRequested)
        for w in (self.pair_label, self.pair_button, self.active, self.speculation, self.reasoning,
                  self.temperature, self.presets, self.more):
            row.addWidget(w)
        self._loading = False
        self._pair_text = self.pair_label.text()
        self.backend = ""  # "": this machine's pair; else the server (Settings → Servers) answering the chat
        self.speculation.currentIndexChanged.connect(
            lambda _i: self._emit({"speculation": self.speculation.currentData()}))
        self.reasoning.toggled.connect(lambda on: self._emit({"reasoning": on}))
        self.temperature.valueChanged.connect(lambda v: self._emit({"temperature": round(v, 3)}))
        self.pair_button.clicked.connect(self.pairRequested)
        self.more.clicked.connect(self.settingsRequested)

    def _emit(self, change: dict) -> None:
        if not self._loading:
            self.changed.emit(change)

    def show_settings(self, speculation: str, reasoning: bool, temperature: float, pair_text: str,
                      active: tuple[str, ...] = ()) -> None:
        """Show a chat's saved settings without echoing them back as changes; ``active``: what else
        shapes its answers, one short phrase each ("JSON schema", "system prompt"), shown when any."""
        self._loading = True
        try:
            self.speculation.setCurrentIndex(max(0, self.speculation.findData(speculation)))
            self.reasoning.setChecked(reasoning)
            self.temperature.setValue(temperature)
            self._pair_text = pair_text
        finally:
            self._loading = False
        self.active.setText(" · ".join(active))
        self.active.setToolTip("set in Chat settings…" if active else "")
        self.active.setVisible(bool(active))
        self._show_backend()

    def set_backend(self, backend: str) -> None:
        """Say which backend answers the shown chat: "" for this machine's pair, else a server's name."""
        self.backend = backend
        self._show_backend()

    def _show_backend(self) -> None:
        on_server = bool(self.backend)
        if self.backend == MANAGED:  # this chat's own pair, in the llama-server SpecChat starts for it
            self.pair_label.setText(f"{self._pair_text} · llama-server")
            self.pair_label.setToolTip("SpecChat runs this pair in llama-server (its drafters: MTP, EAGLE-3, "
                                       "DFlash, ngram-mod…); chat settings choose the drafter")
            self.pair_button.setToolTip("Choose the target and draft models for this chat")
            self.speculation.setEnabled(True)
            self.speculation.setToolTip("baseline restarts llama-server without its drafter (plain decoding); "
                                        "another mode restarts it with the drafter of the chat's settings")
            return
        self.pair_label.setText(f"on {self.backend}" if on_server else self._pair_text)
        self.pair_label.setToolTip("a server answers this chat (Settings → Servers)" if on_server else "")
        self.pair_button.setToolTip("Choose local models: this chat then runs on this machine" if on_server
                                    else "Choose the target and draft models for this chat")
        self.speculation.setEnabled(not on_server)
        self.speculation.setToolTip(SERVER_DECIDES if on_server else "")

    def set_reasoning_available(self, available: bool | None) -> None:
        """None: no model loaded yet (leave it enabled, the choice is saved with the chat)."""
        self.reasoning.setEnabled(available is not False)
        self.reasoning.setToolTip("" if available is not False else NO_SWITCH_TIP)
