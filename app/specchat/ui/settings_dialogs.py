"""App settings (context, GPU layers, threads, controller thresholds, default mode, theme)
and per-chat settings (backend, speculation, system prompt, sampling, max tokens, context policy, task tag)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from specchat.config import SCHEMA, AppConfig, ConfigError, Setting, as_float, as_int
from specchat.context_policy import POLICIES
from specchat.engine import check_structured
from specchat.engine.settings import (
    MAX_STRUCTURED_BYTES,
    STRUCTURED_LABELS,
    GrammarError,
    Structured,
    StructuredOutput,
)
from specchat.errors import UserError, collect_warnings
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import MANAGED, find_llama_server, server_help, spec_type_offers
from specchat.store import ChatSettings
from specchat.workers.tasks import TaskHandle, TaskRunner

from .chat_header import SPECULATION
from .theme import current

LOCAL = "Local (this machine)"
SERVER_DECIDES = "the server decides its draft model and speculation"
MANAGED_TEXT = "llama-server on this machine (this chat's pair)"
MANAGED_NOTE = "SpecChat starts llama-server with this pair and the drafter below, and stops it with the app"
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1  # a QSpinBox's widest range, for a side without a bound


def _editor(s: Setting, value: object) -> QWidget:
    """The field for one setting, showing ``value``."""
    if s.choices:
        combo = QComboBox()
        combo.addItems(s.choices)
        combo.setCurrentText(str(value))
        return combo
    if isinstance(s.default, bool):
        check = QCheckBox()
        check.setChecked(bool(value))
        return check
    if isinstance(s.default, str):
        line = QLineEdit(str(value))
        line.setPlaceholderText("not set")
        line.setMinimumWidth(360)  # a model path
        return line
    if isinstance(s.default, int):
        spin = QSpinBox()
        spin.setRange(int(s.lo) if s.lo is not None else _INT_MIN, int(s.hi) if s.hi is not None else _INT_MAX)
        spin.setValue(as_int(value))
        return spin
    dspin = QDoubleSpinBox()
    dspin.setRange(s.lo if s.lo is not None else float("-inf"), s.hi if s.hi is not None else float("inf"))
    dspin.setSingleStep(0.05)
    dspin.setValue(as_float(value))
    return dspin


def _value(w: QWidget) -> object:
    """What a field made by :func:`_editor` holds."""
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, QComboBox):
        return w.currentText()
    if isinstance(w, QLineEdit):
        return w.text().strip()
    if isinstance(w, QSpinBox | QDoubleSpinBox):
        return w.value()
    raise TypeError(f"not a settings field: {type(w).__name__}")


class ApiKeys(Protocol):
    """Where the API server's key is kept (:class:`specchat.services.api.ApiService`)."""

    def has_key(self) -> bool: ...

    def set_key(self, key: str) -> None: ...


API_KEY_NOTE = "kept in the OS keychain, never in a file; clients send 'Authorization: Bearer KEY'"


class SettingsDialog(QDialog):
    """Built from the declarative schema in :mod:`specchat.config`; saved to the config file.  With
    ``api``, also the API server's key (in the OS keychain: the field never shows a stored one)."""

    def __init__(self, config: AppConfig, parent=None, *, api: ApiKeys | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.config = config
        self.result_config: AppConfig | None = None  # the saved settings, after OK
        self.notes: list[str] = []  # what saving them repaired (a damaged file moved aside), one line each
        form = QFormLayout(self)
        self.fields: dict[str, QWidget] = {}
        for s in SCHEMA:
            w = _editor(s, config[s.key])
            w.setToolTip(s.help)
            self.fields[s.key] = w
            form.addRow(s.label, w)
        self.api = api
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.no_api_key = QCheckBox("No key (clear the stored one)")
        if api is not None:
            kept = api.has_key()
            self.api_key.setPlaceholderText("unchanged (a key is set)" if kept else
                                            "none: any program that reaches the port may ask")
            self.api_key.setToolTip(API_KEY_NOTE)
            self.no_api_key.setVisible(kept)
            self.no_api_key.toggled.connect(lambda on: self.api_key.setEnabled(not on))
            row = QWidget()
            h = QHBoxLayout(row)
            h.setContentsMargins(0, 0, 0, 0)
            h.addWidget(self.api_key, 1)
            h.addWidget(self.no_api_key)
            form.addRow("API server key", row)
        self.error = QLabel()
        self.error.setStyleSheet(f"color:{current().error}")
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def values(self) -> dict[str, object]:
        return {key: _value(w) for key, w in self.fields.items()}

    def save(self) -> None:
        """Check the whole candidate (every key, then the cross-field rules) before anything is
        applied; the live config is never touched, so Cancel after an error leaves it as it was."""
        try:
            candidate = self.config.replaced(self.values())
            self._save_api_key()
            with collect_warnings() as said:  # a file damaged on disk is moved aside first: say so
                candidate.save()
        except (ConfigError, OSError, UserError) as exc:
            self.error.setText(str(exc))
            return
        self.notes = said  # the window shows them (a modal box here would stack two dialogs)
        self.result_config = candidate
        self.accept()


    def _save_api_key(self) -> None:
        """A key typed in replaces the stored one; "No key" clears it; an empty field leaves it."""
        if self.api is None:
            return
        if not self.no_api_key.isHidden() and self.no_api_key.isChecked():
            self.api.set_key("")
        elif self.api_key.text():
            self.api.set_key(self.api_key.text())


class ChatSettingsDialog(QDialog):
    """One chat's settings.  ``servers``: the names in Settings → Servers, read by the caller when it opens.
    ``tasks`` runs the check of the llama-server on this machine (its ``--help``), off the GUI thread."""

    def __init__(self, settings: ChatSettings, parent=None, servers: Sequence[str] = (), *,
                 tasks: TaskRunner) -> None:
        super().__init__(parent)
        self.setWindowTitle("Chat settings")
        self.base = settings
        self.tasks = tasks
        self.spec_types_check: TaskHandle | None = None  # while llama-server --help runs
        self.structured_check: TaskHandle | None = None  # while the schema or grammar is checked (OK)
        self.finished.connect(self._cancel_check)
        form = QFormLayout(self)
        self.backend = QComboBox()
        self.backend.addItem(LOCAL, "")
        self.backend.addItem(MANAGED_TEXT, MANAGED)
        for name in servers:
            self.backend.addItem(f"Server: {name}", name)
        if settings.backend and self.backend.findData(settings.backend) < 0:
            # removed from Settings → Servers since: kept (answers say there is no such server) until changed
            self.backend.addItem(f"Server: {settings.backend} (not in Settings → Servers)", settings.backend)
        self.backend.setCurrentIndex(max(0, self.backend.findData(settings.backend)))
        self.pair = QLabel(_pair_text(settings))
        self.speculation = QComboBox()
        for key, text in SPECULATION:
            self.speculation.addItem(text, key.value)
        self.speculation.setCurrentIndex(max(0, self.speculation.findData(settings.speculation)))
        self.spec_type = QComboBox()
        self.spec_type.setToolTip("llama.cpp's speculative type for the llama-server SpecChat starts; a type the "
                                  "chat's models cannot use is greyed out, with the reason")
        self._spec_types_read = False
        self.local_note = QLabel(SERVER_DECIDES)
        self.local_note.setStyleSheet(f"color:{current().muted}")
        self.system = QPlainTextEdit(settings.system_prompt)
        self.system.setFixedHeight(90)
        self.task = QComboBox()
        self.task.setEditable(True)
        self.task.addItems(["chat", "code", "edit", "json", "summary", "creative"])
        self.task.setCurrentText(settings.task)
        sampling = settings.sampling
        self.top_k = QSpinBox(minimum=0, maximum=1000, value=sampling.top_k)
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.05, value=sampling.top_p)
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=0.99, singleStep=0.01, value=sampling.min_p)
        self.repeat = QDoubleSpinBox(minimum=0.5, maximum=2.0, singleStep=0.05, value=sampling.repeat_penalty)
        self.seed = QLineEdit(str(sampling.seed))
        self.max_tokens = QSpinBox(minimum=1, maximum=131072, value=settings.max_tokens)
        self.context_policy = QComboBox()
        for p in POLICIES:
            self.context_policy.addItem(p.label, p.policy.value)
            self.context_policy.setItemData(self.context_policy.count() - 1, p.help, Qt.ItemDataRole.ToolTipRole)
        self.context_policy.setCurrentIndex(max(0, self.context_policy.findData(settings.context_policy)))
        self.context_policy.setToolTip("What is sent once the chat outgrows the context (a local pair); "
                                       "the chat itself keeps every message")
        structured_row = self._structured_widgets(settings)
        for label, w in (("Backend", self.backend), ("Model pair", self.pair), ("Speculation", self.speculation),
                         ("llama.cpp drafter", self.spec_type), ("", self.local_note), ("System prompt", self.system), ("Task tag", self.task),
                         ("top-k", self.top_k), ("top-p", self.top_p), ("min-p", self.min_p),
                         ("Repeat penalty", self.repeat), ("Seed", self.seed), ("Max tokens", self.max_tokens),
                         ("Past the context", self.context_policy),
                         ("Structured output", structured_row), ("", self.structured_text),
                         ("", self.structured_error)):
            form.addRow(label, w)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.backend.currentIndexChanged.connect(lambda _i: self._backend_changed())
        self._backend_changed()

    def focus_field(self, name: str) -> None:
        """Open at one setting (the context error's remedy opens at "Past the context"); "" or an unknown
        name: as usual."""
        widget = getattr(self, name, None) if name else None
        if isinstance(widget, QWidget):
            widget.setFocus(Qt.FocusReason.OtherFocusReason)

    def _structured_widgets(self, settings: ChatSettings) -> QWidget:
        """None / JSON schema / GBNF grammar, Load file…, the text (checked on OK) and its error line."""
        self.structured_kind = QComboBox()
        for kind in Structured:
            self.structured_kind.addItem(STRUCTURED_LABELS[kind] or "None", kind.value)
        self.structured_kind.setCurrentIndex(max(0, self.structured_kind.findData(settings.sampling.structured.kind)))
        self.structured_kind.setToolTip("The answer follows a JSON schema or a GBNF grammar (llama.cpp's grammar "
                                        "sampler); speculation stays on")
        self.load_structured = QPushButton("Load file…")
        self.load_structured.clicked.connect(self._choose_structured_file)
        self.structured_text = QPlainTextEdit(settings.sampling.structured.text)
        self.structured_text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.structured_text.setFixedHeight(120)
        self.structured_text.setPlaceholderText('{"type": "object", "properties": {...}}   or   root ::= "yes" | "no"')
        self.structured_error = QLabel()
        self.structured_error.setStyleSheet(f"color:{current().error}")
        self.structured_error.setVisible(False)
        self.structured_kind.currentIndexChanged.connect(lambda _i: self._structured_kind_changed())
        self._structured_kind_changed()
        row = QWidget()
        box = QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.structured_kind, 1)
        box.addWidget(self.load_structured)
        return row

    def _structured_kind_changed(self) -> None:
        on = bool(self.structured_kind.currentData())
        self.structured_text.setEnabled(on)
        self.load_structured.setEnabled(on)
        self._show_structured_error("")

    def _show_structured_error(self, message: str) -> None:
        self.structured_error.setText(message)
        self.structured_error.setVisible(bool(message))

    def _choose_structured_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load a JSON schema or GBNF grammar", "",
                                              "Schemas and grammars (*.json *.gbnf *.txt);;All files (*)")
        if path:
            self.load_structured_file(path)

    def load_structured_file(self, path: str) -> bool:
        """Put a file's text in the box (a problem is one line under it and the box is left as it was)."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_STRUCTURED_BYTES + 1)
            if len(data) > MAX_STRUCTURED_BYTES:
                raise GrammarError(f"{path}: over {MAX_STRUCTURED_BYTES >> 10} KiB, too large for a schema or grammar")
            text = data.decode("utf-8-sig")
        except OSError as exc:
            self._show_structured_error(f"{path}: cannot read it ({exc.strerror or exc})")
            return False
        except UnicodeDecodeError as exc:
            self._show_structured_error(f"{path}: not UTF-8 text (byte {exc.start})")
            return False
        except GrammarError as exc:
            self._show_structured_error(str(exc))
            return False
        self.structured_text.setPlainText(text)
        self._show_structured_error("")
        return True

    def structured(self) -> StructuredOutput:
        kind = str(self.structured_kind.currentData() or "")
        return StructuredOutput(kind, self.structured_text.toPlainText() if kind else "")

    def accept(self) -> None:
        """OK: a schema or grammar is checked first, as a task (a child process bounded in time and
        memory, engine/grammar.py): "checking…" under its box meanwhile, then the dialog closes, or
        stays open with one line saying why and nothing saved.  Closing the dialog cancels the check."""
        structured = self.structured()
        if not structured.active:
            super().accept()
            return
        if self.structured_check is not None:
            return  # OK again while it is checked
        self._show_structured_error(f"checking the {structured.label}…")
        self.structured_check = self.tasks.run_task(
            lambda task: check_structured(structured, cancelled=lambda: task.cancelled), name="structured output")
        self.structured_check.returned.connect(lambda _: self._structured_checked(structured, ""))
        self.structured_check.failed.connect(lambda message, cancelled: self._structured_failed(structured, message,
                                                                                               cancelled))

    def _structured_failed(self, checked: StructuredOutput, problem: str, cancelled: bool) -> None:
        if not cancelled:
            self._structured_checked(checked, problem)

    def _structured_checked(self, checked: StructuredOutput, problem: str) -> None:
        self.structured_check = None
        if self.structured() != checked:  # edited while it was checked: check what is there now
            self._show_structured_error("")
            self.accept()
        elif problem:
            self._show_structured_error(problem)
            self.structured_text.setFocus()
        else:
            self._show_structured_error("")
            super().accept()

    def _backend_changed(self) -> None:
        """A server runs its own models and drafting: the local pair and mode are kept, shown disabled."""
        data = self.backend.currentData()
        managed = data == MANAGED
        on_server = bool(data) and not managed
        self.pair.setEnabled(not on_server)
        self.speculation.setEnabled(not data)
        self.local_note.setText(MANAGED_NOTE if managed else SERVER_DECIDES)
        self.local_note.setVisible(bool(data))
        self.speculation.setToolTip(SERVER_DECIDES if data else "")
        self.spec_type.setEnabled(managed)
        if managed and not self._spec_types_read:
            self._fill_spec_types()

    def _fill_spec_types(self) -> None:
        """The speculative types the llama-server on this machine lists, those the chat's models
        cannot use greyed out with the reason (read once, when the managed backend is chosen).
        Running ``llama-server --help`` can take seconds: it runs as a task, "checking…" meanwhile."""
        self._spec_types_read = True
        self.spec_type.addItem(CHECKING, "")
        target, draft = self.base.target, self.base.draft
        self.spec_types_check = self.tasks.run_task(lambda task: managed_spec_types(target, draft),
                                                    name="llama-server --help")
        self.spec_types_check.returned.connect(self._show_spec_types)
        self.spec_types_check.failed.connect(self._spec_types_failed)

    def _cancel_check(self) -> None:
        """The dialog closed: its check's answer is not wanted any more."""
        if self.spec_types_check is not None:
            self.spec_types_check.cancel()
        if self.structured_check is not None:
            self.structured_check.cancel()
            self.structured_check = None

    def _spec_types_failed(self, message: str, _cancelled: bool) -> None:
        self._show_spec_types(({}, message))

    def _show_spec_types(self, result: object) -> None:
        self.spec_types_check = None
        offers: dict[str, str] = {}
        problem = ""
        if isinstance(result, tuple):
            offers, problem = result
        self.spec_type.clear()
        model = self.spec_type.model()
        if problem:
            self.spec_type.addItem(problem, "")
        for kind, why in offers.items():
            self.spec_type.addItem(kind if not why else f"{kind} ({why})", kind)
            if why and isinstance(model, QStandardItemModel):
                item = model.item(self.spec_type.count() - 1)
                item.setEnabled(False)
                item.setToolTip(why)
        want = self.spec_type.findData(self.base.server_spec_type)
        if want >= 0 and not offers.get(self.base.server_spec_type):
            self.spec_type.setCurrentIndex(want)
        else:
            usable = [k for k, why in offers.items() if not why and k != "none"]
            self.spec_type.setCurrentIndex(max(0, self.spec_type.findData(usable[0] if usable else "none")))

    def result_settings(self) -> ChatSettings:
        try:
            seed = int(self.seed.text())
        except ValueError:
            seed = self.base.sampling.seed
        sampling = replace(self.base.sampling, top_k=self.top_k.value(), top_p=self.top_p.value(),
                           min_p=self.min_p.value(), repeat_penalty=self.repeat.value(), seed=seed,
                           # a kind set back to None keeps nothing: the text of "None" is not a constraint
                           structured=self.structured())
        return replace(self.base, system_prompt=self.system.toPlainText(), task=self.task.currentText(),
                       sampling=sampling, max_tokens=self.max_tokens.value(),
                       context_policy=str(self.context_policy.currentData()),
                       backend=str(self.backend.currentData() or ""),
                       server_spec_type=str(self.spec_type.currentData() or self.base.server_spec_type),
                       speculation=str(self.speculation.currentData()))


CHECKING = "checking the llama-server on this machine…"


def managed_spec_types(target, draft) -> tuple[dict[str, str], str]:
    """({spec type: why it cannot be used, "" when it can}, a problem line when there is no llama-server)."""
    try:
        binary = find_llama_server()
        if binary is None:
            return {}, "no llama-server: build one with 'specchat servers build'"
        available = server_help(binary).spec_types
    except ServerError as exc:
        return {}, str(exc)
    return spec_type_offers(available, target, draft), ""


def _pair_text(s: ChatSettings) -> str:
    if s.target is None:
        return "none chosen (Pair… above the chat)"
    return s.target.name + (f"  +  {s.draft.name}" if s.draft else "  (no draft)")
