"""Settings → Servers, a chat's Backend and what the window shows for a server: driven as a user would.

Real HTTP: the Check button and a server chat talk to ``FakeServer`` (tests/remote) on
127.0.0.1; API keys go to an in-memory keyring installed for each test.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import NoKeyringError, PasswordDeleteError
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from helpers.fake_openai_server import FakeServer
from specchat.profile import Profile
from specchat.remote.servers import API_KEY_ENV, KEYRING_SERVICE, ServerConfig, ServerList, servers_file
from specchat.ui.servers_dialog import ServersDialog
from specchat.ui.settings_dialogs import ChatSettingsDialog

KEY = "sk-test-4b1d9e2f7a"


class MemoryKeyring(KeyringBackend):
    """An OS keychain in a dict."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.kept.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.kept[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.kept.pop((service, username), None) is None:
            raise PasswordDeleteError("no such password")


class NoKeychain(MemoryKeyring):
    """A machine without a keychain (keyring's ``fail`` backend says the same)."""

    def set_password(self, service: str, username: str, password: str) -> None:
        raise NoKeyringError("No recommended backend was available.")


@pytest.fixture
def kept(monkeypatch) -> MemoryKeyring:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    before = keyring.get_keyring()
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    yield memory
    keyring.set_keyring(before)


@pytest.fixture
def profile(tmp_path) -> Profile:
    return Profile.at(tmp_path / "profile")


def open_dialog(qtbot, profile: Profile) -> ServersDialog:
    dialog = ServersDialog(profile)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def fill_and_ok(qtbot, editor, **fields: str) -> None:
    """Type into the form's fields as a user would, then press OK."""
    for name, text in fields.items():
        line = getattr(editor, name)
        line.clear()
        qtbot.keyClicks(line, text)
    ok = editor.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)


def add_through_the_form(qtbot, dialog: ServersDialog, **fields: str) -> dict:
    """Add… then the form, while it runs modal; what the form said and whether it closed."""
    seen: dict = {}

    def drive() -> None:
        editor = dialog.editor
        fill_and_ok(qtbot, editor, **fields)
        seen["error"] = editor.error.text()
        seen["open"] = editor.isVisible()
        if editor.isVisible():
            editor.reject()

    QTimer.singleShot(0, drive)
    dialog.add_server()
    return seen


def every_file_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# -- Settings → Servers -------------------------------------------------------------------------


def test_an_added_server_is_in_servers_json_and_its_key_only_in_the_keychain(qtbot, profile, kept):
    dialog = open_dialog(qtbot, profile)
    seen = add_through_the_form(qtbot, dialog, name="gpu-box", url="http://gpu-box:8080/v1/", model="Qwen/Qwen3-8B",
                                api_key=KEY, dcgm_url="http://gpu-box:9400/metrics")
    assert seen == {"error": "", "open": False}
    [server] = ServerList(servers_file(profile)).all()
    assert server == ServerConfig("gpu-box", "http://gpu-box:8080", model="Qwen/Qwen3-8B",
                                  dcgm_url="http://gpu-box:9400/metrics")
    assert dialog.names() == ["gpu-box"] and "keychain" in dialog.status.text()
    assert kept.kept == {(KEYRING_SERVICE, "server:gpu-box"): KEY}
    files = every_file_under(profile.config_dir.parent)
    assert servers_file(profile) in files
    assert not [p for p in files if KEY.encode() in p.read_bytes()]  # in no file of the profile, in any form


@pytest.mark.parametrize(("name", "url", "said"), [
    ("gpu-box", "ftp://gpu-box:8080", "must start with http:// or https://"),
    ("gpu-box", "http://gpu-box:notaport", "bad port"),
    ("gpu-box", "http://user:pw@gpu-box:8080", "keys go in the keychain"),
    ("../etc/passwd", "http://gpu-box:8080", "bad server name"),
    ("", "http://gpu-box:8080", "bad server name"),
])
def test_bad_input_keeps_the_form_open_with_one_line_and_saves_nothing(qtbot, profile, kept, name, url, said):
    dialog = open_dialog(qtbot, profile)
    seen = add_through_the_form(qtbot, dialog, name=name, url=url, api_key=KEY)
    assert seen["open"] and said in seen["error"] and "\n" not in seen["error"]
    assert not servers_file(profile).exists() and kept.kept == {}  # not even the key
    assert dialog.names() == []


def test_without_a_keychain_the_form_says_so_in_one_line_and_saves_nothing(qtbot, profile, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    before = keyring.get_keyring()
    keyring.set_keyring(NoKeychain())
    try:
        dialog = open_dialog(qtbot, profile)
        seen = add_through_the_form(qtbot, dialog, name="gpu-box", url="http://gpu-box:8080", api_key=KEY)
    finally:
        keyring.set_keyring(before)
    assert seen["open"] and "no OS keychain" in seen["error"] and API_KEY_ENV in seen["error"]
    assert not servers_file(profile).exists()


def test_a_second_server_of_the_same_name_is_refused(qtbot, profile, kept):
    ServerList(servers_file(profile)).put(ServerConfig("gpu-box", "http://a:8080"))
    dialog = open_dialog(qtbot, profile)
    seen = add_through_the_form(qtbot, dialog, name="gpu-box", url="http://b:8080")
    assert seen["open"] and "exists already" in seen["error"]
    assert ServerList(servers_file(profile)).get("gpu-box").url == "http://a:8080"


def test_editing_keeps_the_name_and_the_stored_key_when_the_key_field_is_left_empty(qtbot, profile, kept):
    ServerList(servers_file(profile)).put(ServerConfig("gpu-box", "http://a:8080"))
    kept.set_password(KEYRING_SERVICE, "server:gpu-box", KEY)
    dialog = open_dialog(qtbot, profile)
    dialog.select("gpu-box")

    def drive() -> None:
        assert dialog.editor.name.isReadOnly()  # chats name their server
        fill_and_ok(qtbot, dialog.editor, url="https://b:8443")

    QTimer.singleShot(0, drive)
    dialog.edit_server()
    assert ServerList(servers_file(profile)).get("gpu-box").url == "https://b:8443"
    assert kept.kept == {(KEYRING_SERVICE, "server:gpu-box"): KEY}


def test_removing_a_server_forgets_its_key_too(qtbot, profile, kept, monkeypatch):
    servers = ServerList(servers_file(profile))
    servers.put(ServerConfig("gpu-box", "http://a:8080"))
    servers.put(ServerConfig("other", "http://b:8080"))
    kept.set_password(KEYRING_SERVICE, "server:gpu-box", KEY)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    dialog = open_dialog(qtbot, profile)
    dialog.select("gpu-box")
    qtbot.mouseClick(dialog.remove_button, Qt.MouseButton.LeftButton)
    assert [s.name for s in servers.all()] == ["other"] and dialog.names() == ["other"]
    assert kept.kept == {}


def test_a_damaged_servers_json_is_named_and_the_dialog_still_opens(qtbot, profile, kept):
    path = servers_file(profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    dialog = open_dialog(qtbot, profile)
    assert dialog.names() == [] and "servers.json" in dialog.status.text() and "not valid JSON" in dialog.status.text()
    assert path.read_text() == "{not json"  # reading never rewrites it


def test_check_shows_what_the_server_says_it_is_and_what_it_cannot_report(qtbot, profile, kept):
    with FakeServer("vllm") as server:
        ServerList(servers_file(profile)).put(ServerConfig("gpu-box", server.url))
        kept.set_password(KEYRING_SERVICE, "server:gpu-box", KEY)
        dialog = open_dialog(qtbot, profile)
        dialog.select("gpu-box")
        qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "serving" in dialog.status.text(), timeout=10_000)
        dialog.reject()
        asked = [r for r in server.requests if r.path == "/v1/models"]
    text = dialog.status.text()
    assert "vllm serving Qwen/Qwen3-8B, ctx 32768" in text
    assert "cover the whole server" in text  # the note: acceptance is server-wide on vLLM
    assert asked and asked[0].headers.get("authorization") == f"Bearer {KEY}"  # the keychain's key was used


def test_check_against_a_closed_port_says_why_in_one_line(qtbot, profile, kept):
    ServerList(servers_file(profile)).put(ServerConfig("gpu-box", f"http://127.0.0.1:{closed_port()}"))
    dialog = open_dialog(qtbot, profile)
    dialog.select("gpu-box")
    qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "unreachable" in dialog.status.text(), timeout=10_000)
    assert "gpu-box" in dialog.status.text() and "<br>" not in dialog.status.text()
    assert dialog.isVisible()


def test_closing_during_a_check_of_a_silent_server_does_not_wait_for_its_timeouts(qtbot, profile, kept):
    """A server that accepts and never answers holds each read 10 s; closing must not wait for that."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True)
    accepting.start()
    try:
        ServerList(servers_file(profile)).put(ServerConfig("silent", f"http://127.0.0.1:{listener.getsockname()[1]}"))
        dialog = open_dialog(qtbot, profile)
        dialog.select("silent")
        qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(held), timeout=5_000)  # the probe is connected and waiting
        t0 = time.monotonic()
        dialog.reject()
        closed_in = time.monotonic() - t0
    finally:
        for s in held + [listener]:
            s.close()
    assert closed_in < 3.0  # the probe's read timeout is 10 s
    assert "checking" in dialog.status.text()  # the abandoned check reported nothing


def test_the_menu_opens_settings_servers(qtbot, fake_app, kept):
    app = fake_app()
    session = app.start(qtbot)
    action = session.window.actions_by_slot["open_servers"]
    assert action.text() == "Servers…"
    opened: list[str] = []

    def close_it() -> None:
        modal = QApplication.activeModalWidget()
        opened.append(modal.windowTitle())
        modal.reject()

    QTimer.singleShot(0, close_it)
    action.trigger()
    assert opened == ["Servers"]


# -- a chat's backend ---------------------------------------------------------------------------


def choose_backend_in_chat_settings(qtbot, window, backend: str) -> None:
    def drive() -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, ChatSettingsDialog)
        dialog.backend.setCurrentIndex(dialog.backend.findData(backend))
        ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
        qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)

    QTimer.singleShot(0, drive)
    qtbot.mouseClick(window.pane.header.more, Qt.MouseButton.LeftButton)


def test_a_chat_on_a_server_says_so_in_the_header_and_the_telemetry_panel(qtbot, fake_app, kept):
    app = fake_app()
    with FakeServer("vllm") as server:
        ServerList(servers_file(Profile.at(app.root))).put(ServerConfig("gpu-box", server.url))
        chat = app.add_chat()
        session = app.start(qtbot)
        window = session.window
        window.telemetry.show()  # collapsed until an answer has rounds to plot: shown by the user
        qtbot.waitUntil(lambda: window.telemetry.memory_plot_shown and window.pair_status.text() != "no model loaded"
                        and "loading" not in window.pair_status.text(), timeout=20_000)  # the local pair
        choose_backend_in_chat_settings(qtbot, window, "gpu-box")
        assert session.store.get_chat(chat).settings.backend == "gpu-box"
        header = window.pane.header
        assert header.pair_label.text() == "on gpu-box" and not header.speculation.isEnabled()
        # connecting (a probe) happens while idle: the panel then says what vLLM cannot feed
        qtbot.waitUntil(lambda: window.telemetry.remote is not None, timeout=20_000)
        panel = window.telemetry
        assert not panel.memory_plot_shown
        assert "cover the whole server" in panel.backend_notes.text() and panel.backend_notes.isVisible()
        assert "gpu-box" in window.pair_status.text()
        # local models again: the chat runs on this machine and the panel is whole again
        target, draft = app.model_files()
        window._pair_chosen(target, draft)
        assert session.store.get_chat(chat).settings.backend == ""
        assert header.pair_label.text().startswith("fake-target.gguf") and header.speculation.isEnabled()
        qtbot.waitUntil(lambda: panel.remote is None, timeout=20_000)
        assert panel.memory_plot_shown and not panel.backend_notes.isVisible()


def test_switching_chats_shows_each_chats_backend(qtbot, fake_app, kept):
    app = fake_app()
    local = app.add_chat("local")
    remote = app.add_chat("remote", backend="nowhere")  # a server not in the list: the chat still opens
    session = app.start(qtbot)
    window = session.window
    window.open_chat(remote)
    assert window.pane.header.pair_label.text() == "on nowhere"
    window.open_chat(local)
    assert window.pane.header.pair_label.text().startswith("fake-target.gguf")
    window.open_chat(remote)
    qtbot.waitUntil(lambda: "no server named 'nowhere'" in window.pane.notice.text(), timeout=20_000)
