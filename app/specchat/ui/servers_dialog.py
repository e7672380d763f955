"""Settings → Servers: the user's inference servers (llama-server, vLLM, SGLang, any OpenAI-compatible one).

The list is ``servers.json`` (:class:`~specchat.remote.servers.ServerList`), read fresh
when the dialog opens and after every change, so another window's changes are kept.
An API key goes only to the OS keychain; the form never shows a stored key, and an empty
key field leaves the stored one as it is.  Check probes the selected server in the
probe thread (:class:`~specchat.services.server_probe.ServerProbeService`), which the
dialog joins when it closes.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.errors import UserError, collect_warnings, one_line
from specchat.profile import Profile
from specchat.remote.client import Capabilities
from specchat.remote.servers import Keychain, ServerConfig, ServerList, servers_file
from specchat.services.server_probe import ServerProbeService

from .theme import current

KEY_HINT = "kept in the OS keychain, never in a file"


class ServerEditor(QDialog):
    """One server's fields; OK checks them all and saves, or says why not in one line and stays open."""

    def __init__(self, servers: ServerList, keychain: Keychain, server: ServerConfig | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Edit server" if server else "Add server")
        self.servers = servers
        self.keychain = keychain
        self.editing = server
        self.saved: ServerConfig | None = None
        self.notes: list[str] = []  # what saving repaired (a damaged servers.json moved aside)
        form = QFormLayout(self)
        self.name = QLineEdit(server.name if server else "")
        self.name.setPlaceholderText("gpu-box")
        self.name.setReadOnly(server is not None)  # chats name their server: a rename would strand them
        self.url = QLineEdit(server.url if server else "")
        self.url.setPlaceholderText("http://gpu-box:8080")
        self.url.setMinimumWidth(360)
        self.model = QLineEdit(server.model if server else "")
        self.model.setPlaceholderText("optional: the first model the server lists")
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("unchanged" if server else "optional")
        self.key_note = QLabel(KEY_HINT)
        self.key_note.setWordWrap(True)
        self.verify_tls = QCheckBox("Verify TLS certificate")
        self.verify_tls.setChecked(server.verify_tls if server else True)
        self.ca_file = QLineEdit(server.ca_file if server else "")
        self.ca_file.setPlaceholderText("optional: the server's CA bundle (PEM)")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_ca)
        ca_row = QHBoxLayout()
        ca_row.addWidget(self.ca_file, 1)
        ca_row.addWidget(browse)
        self.dcgm_url = QLineEdit(server.dcgm_url if server else "")
        self.dcgm_url.setPlaceholderText("optional: http://gpu-box:9400/metrics (dcgm-exporter)")
        form.addRow("Name", self.name)
        form.addRow("Base URL", self.url)
        form.addRow("Model id", self.model)
        form.addRow("API key", self.api_key)
        form.addRow("", self.key_note)
        form.addRow("", self.verify_tls)
        form.addRow("CA file", ca_row)
        form.addRow("GPU exporter URL", self.dcgm_url)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color:{current().error}")
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _browse_ca(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The server's CA certificate", self.ca_file.text(),
                                              "Certificates (*.pem *.crt *.cer);;All files (*)")
        if path:
            self.ca_file.setText(path)

    def config(self) -> ServerConfig:
        """The server the fields describe (ServerError, one line, when one is bad)."""
        return ServerConfig(name=self.name.text().strip(), url=self.url.text().strip(),
                            verify_tls=self.verify_tls.isChecked(), ca_file=self.ca_file.text().strip(),
                            model=self.model.text().strip(), dcgm_url=self.dcgm_url.text().strip())

    def save(self) -> None:
        """Check everything first; then the key (keychain), then the list.  Nothing is saved on an error."""
        self.error.clear()
        try:
            server = self.config()
            if self.editing is None and server.name in {s.name for s in self.servers.all()}:
                self._fail(f"a server named {server.name!r} exists already: select it and choose Edit")
                return
            key = self.api_key.text()
            if key:
                self.keychain.set(server.name, key)
            try:
                with collect_warnings() as said:
                    self.servers.put(server)
            except BaseException:
                if key and self.editing is None:
                    self.keychain.delete(server.name)  # no key without its server
                raise
        except UserError as exc:
            self._fail(str(exc))
            return
        self.notes = said
        self.saved = server
        self.accept()

    def _fail(self, message: str) -> None:
        self.error.setText(one_line(message))


class ServersDialog(QDialog):
    """The list of servers, with Add, Edit, Remove and Check."""

    def __init__(self, profile: Profile, parent: QWidget | None = None, *, keychain: Keychain | None = None,
                 probes: ServerProbeService | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Servers")
        self.servers = ServerList(servers_file(profile))
        self.keychain = keychain or Keychain()
        self._owns_probes = probes is None  # a service given by the caller is the caller's to shut down
        self.probes = probes or ServerProbeService(self)
        self.probes.probed.connect(self._on_probed)
        self._closed = False
        self.editor: ServerEditor | None = None  # the open Add/Edit form (tests reach it here)
        v = QVBoxLayout(self)
        intro = QLabel("Servers answer chats whose Backend (Chat settings…) names them: llama-server, "
                       "vLLM, SGLang or any OpenAI-compatible server.")
        intro.setWordWrap(True)
        v.addWidget(intro)
        self.list = QListWidget()
        self.list.setMinimumWidth(520)
        self.list.currentItemChanged.connect(lambda *_: self._selection_changed())
        self.list.itemDoubleClicked.connect(lambda _item: self.edit_server())
        v.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add…")
        self.add_button.clicked.connect(self.add_server)
        self.edit_button = QPushButton("Edit…")
        self.edit_button.clicked.connect(self.edit_server)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_server)
        self.check_button = QPushButton("Check")
        self.check_button.setToolTip("Connect to the selected server and read what it can report")
        self.check_button.clicked.connect(self.check_server)
        for b in (self.add_button, self.edit_button, self.remove_button, self.check_button):
            row.addWidget(b)
        row.addStretch(1)
        v.addLayout(row)
        self.status = QLabel()  # what Check found, or what a change did
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setMinimumHeight(5 * self.status.fontMetrics().lineSpacing())
        self.status.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        v.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        v.addWidget(buttons)
        self.reload()

    # -- the list -------------------------------------------------------------------------

    def reload(self, select: str | None = None) -> None:
        """The list as ``servers.json`` holds it now (a damaged file: the reason, and an empty list)."""
        keep = select or self.selected_name()
        self.list.clear()
        try:
            servers = self.servers.all()
        except UserError as exc:
            self._say(str(exc), error=True)
            servers = []
        for s in servers:
            item = QListWidgetItem(f"{s.name}  —  {s.url}" + (f"  ·  {s.model}" if s.model else ""))
            item.setData(Qt.ItemDataRole.UserRole, s.name)
            self.list.addItem(item)
            if s.name == keep:
                self.list.setCurrentItem(item)
        if self.list.currentItem() is None and self.list.count():
            self.list.setCurrentRow(0)
        self._selection_changed()

    def names(self) -> list[str]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())]

    def selected_name(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def select(self, name: str) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == name:
                self.list.setCurrentRow(i)

    def _selection_changed(self) -> None:
        chosen = self.selected_name() is not None
        for b in (self.edit_button, self.remove_button, self.check_button):
            b.setEnabled(chosen)

    # -- Add, Edit, Remove ------------------------------------------------------------------

    def editor_for(self, name: str | None) -> ServerEditor | None:
        """The form for a new server (None) or the named one (None when it is gone meanwhile)."""
        server = None
        if name is not None:
            try:
                server = self.servers.get(name)
            except UserError as exc:
                self._say(str(exc), error=True)
                self.reload()
                return None
        return ServerEditor(self.servers, self.keychain, server, self)

    def add_server(self) -> None:
        self._run_editor(self.editor_for(None))

    def edit_server(self) -> None:
        name = self.selected_name()
        if name is not None:
            self._run_editor(self.editor_for(name))

    def _run_editor(self, editor: ServerEditor | None) -> None:
        if editor is None:
            return
        self.editor = editor
        try:
            if editor.exec() and editor.saved is not None:
                saved = editor.saved
                note = f"saved {saved.name}" + (f" (API key {KEY_HINT})" if editor.api_key.text() else "")
                self._say(" ".join([note + "."] + editor.notes))
                self.reload(select=saved.name)
        finally:
            self.editor = None
            editor.deleteLater()

    def remove_server(self) -> None:
        name = self.selected_name()
        if name is None:
            return
        answer = QMessageBox.question(self, "Remove server",
                                      f"Remove {name} and its API key? Chats that use it will say so when asked.")
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            with collect_warnings() as said:
                self.servers.remove(name)
        except UserError as exc:
            self._say(str(exc), error=True)
            return
        self.keychain.delete(name)
        self._say(" ".join([f"removed {name}."] + said))
        self.reload()

    # -- Check ------------------------------------------------------------------------------

    def check_server(self) -> None:
        name = self.selected_name()
        if name is None:
            return
        try:
            server = self.servers.get(name)
        except UserError as exc:
            self._say(str(exc), error=True)
            return
        self._say(f"checking {name} at {server.url}…")
        self.probes.probe(server)  # the key is read from the keychain in the probe thread

    def _on_probed(self, name: str, result: object) -> None:
        if isinstance(result, Capabilities):
            lines = [f"<b>{_escape(name)}</b>: {_escape(result.describe())}"]
            lines += [f"· {_escape(n)}" for n in result.notes]
            self.status.setStyleSheet("")
            self.status.setText("<br>".join(lines))
        else:
            self._say(str(result), error=True)

    def _say(self, text: str, *, error: bool = False) -> None:
        self.status.setStyleSheet(f"color:{current().error}" if error else "")
        self.status.setText(_escape(one_line(text)))

    # -- closing ----------------------------------------------------------------------------

    def done(self, result: int) -> None:
        """Close: a running Check is cancelled and its thread joined (its sockets are shut down)."""
        if not self._closed:
            self._closed = True
            self.probes.probed.disconnect(self._on_probed)
            if self._owns_probes:
                self.probes.shutdown()
            else:
                self.probes.cancel()
        super().done(result)


def _escape(text: str) -> str:
    """Plain text for a rich-text label (a server's model id or error is not ours to render)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

