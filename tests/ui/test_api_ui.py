"""The window's API server as the user meets it: Models → Serve the API, the status bar's line, View → API
requests…, the settings (port, every interface, the key in the keychain).  Over the fake pair; the
clients are real (openai, httpx2) and run off the GUI thread."""

from __future__ import annotations

import socket
import threading

import httpx2
import keyring
import openai
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

from helpers.app_driver import send
from helpers.fakes import FakeSpec
from specchat.profile import Profile
from specchat.services.answers import Phase
from specchat.services.api import API_KEY_USER
from specchat.ui.api_requests import COLUMNS
from specchat.ui.chat_pane import API_WAITING
from specchat.ui.settings_dialogs import SettingsDialog

QUESTION = "a question nobody else may read"
LONG = FakeSpec(answer_tokens=30_000, decode_s=0.005, n_ctx=65_536)  # streams until stopped (minutes)


class MemoryKeyring(KeyringBackend):
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


@pytest.fixture
def kept():
    before = keyring.get_keyring()
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    yield memory
    keyring.set_keyring(before)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(fake_app, qtbot, tmp_path, port: int, spec: FakeSpec | None = None, **chat):
    """An app whose settings serve on ``port``, with one chat on the fake pair, its pair loaded."""
    profile = Profile.at(tmp_path)
    profile.config_file.parent.mkdir(parents=True, exist_ok=True)
    profile.config_file.write_text(f"api_port = {port}\n")
    a = fake_app(spec)
    a.add_chat("a chat", **chat)
    s = a.start(qtbot)
    qtbot.waitUntil(lambda: s.answers.pair_info is not None, timeout=10_000)
    return s


def ask(qtbot, call, timeout: int = 30_000):
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except Exception as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    qtbot.waitUntil(lambda: bool(box), timeout=timeout)
    thread.join(5)
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_the_menu_entry_starts_and_stops_the_server_and_the_status_bar_shows_where(qtbot, fake_app, tmp_path, kept):
    port = free_port()
    s = start(fake_app, qtbot, tmp_path, port)
    w = s.window
    action = w.actions_by_slot["set_api"]
    assert action.isCheckable() and not action.isChecked() and w.api_status.isHidden()
    action.trigger()
    url = f"http://127.0.0.1:{port}/v1"
    assert s.api.running and action.isChecked()
    assert not w.api_status.isHidden() and w.api_status.text() == f"API {url} · 0 requests"
    health = ask(qtbot, lambda: httpx2.get(f"http://127.0.0.1:{port}/health", timeout=10).json())
    assert health == {"status": "ok"}
    action.trigger()
    assert not s.api.running and not action.isChecked() and w.api_status.isHidden()
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(f"http://127.0.0.1:{port}/health", timeout=10)


def test_a_port_in_use_is_one_line_and_the_entry_stays_unticked(qtbot, fake_app, tmp_path, kept):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        s = start(fake_app, qtbot, tmp_path, taken.getsockname()[1])
        s.window.actions_by_slot["set_api"].trigger()
        assert not s.api.running and not s.window.actions_by_slot["set_api"].isChecked()
        line = s.window.statusBar().currentMessage()
        assert line.startswith("the API is off: cannot listen on 127.0.0.1:") and "in use" in line
        assert "\n" not in line and s.window.api_status.isHidden()


def test_the_requests_view_lists_a_finished_request_with_its_figures_and_never_its_text(
        qtbot, fake_app, tmp_path, kept):
    s = start(fake_app, qtbot, tmp_path, free_port())
    w = s.window
    w.actions_by_slot["set_api"].trigger()
    w.actions_by_slot["show_api_requests"].trigger()  # open before the request: it follows new ones
    view = w._api_requests
    assert view is not None and view.isVisible() and view.table.rowCount() == 0
    client = openai.OpenAI(base_url=s.api.url, api_key="none", max_retries=0, timeout=30,
                           default_headers={"User-Agent": "my-script/1.0"})
    r = ask(qtbot, lambda: client.chat.completions.create(
        model="x", messages=[{"role": "user", "content": QUESTION}], extra_body={"specchat": {"mode": "draft"}}))
    qtbot.waitUntil(lambda: view.table.rowCount() == 1, timeout=10_000)
    row = {c: view.table.item(0, j).text() for j, c in enumerate(COLUMNS)}
    spec = r.model_extra["specchat"]
    assert row["Client"] == "127.0.0.1 my-script/1.0" and row["Endpoint"] == "chat" and row["Status"] == "200"
    assert row["Tokens"] == str(r.usage.completion_tokens) == "120"
    assert row["Mode"] == "draft" and row["Accepted / drafted"] == f"{spec['accepted']} / {spec['drafted']}"
    assert row["Stop"] == "the model finished" and float(row["tok/s"]) > 0
    assert w.api_status.text().endswith("· 1 request")
    every_cell = " ".join(view.table.item(i, j).text() for i in range(view.table.rowCount())
                          for j in range(len(COLUMNS)))
    assert QUESTION not in every_cell and QUESTION not in view.summary.text()
    w.show_api_requests()  # asked again: the same window, raised
    assert w._api_requests is view
    view.close()
    qtbot.waitUntil(lambda: w._api_requests is None, timeout=5_000)
    w.show_api_requests()  # a new one lists what the server saw before it opened
    assert w._api_requests.table.rowCount() == 1
    w._api_requests.close()


def test_every_interface_is_warned_about_once_and_the_server_moves_there(qtbot, fake_app, tmp_path, kept):
    s = start(fake_app, qtbot, tmp_path, free_port())
    w = s.window
    w.actions_by_slot["set_api"].trigger()
    assert not s.api.everywhere
    s.set_config(s.config.replaced({"api_everywhere": True}))
    warning = w.everywhere_warning
    assert warning is not None and warning.isVisible()
    assert "every network interface" in warning.text() and "No API key is set" in warning.text()
    assert s.api.running and s.api.everywhere and "(every interface)" in w.api_status.text()
    assert w.api_status.text().startswith("API http://0.0.0.0:")
    warning.close()
    s.set_config(s.config.replaced({"theme": "dark"}))  # another change: no second warning
    assert w.everywhere_warning is warning


def test_the_settings_dialog_sets_and_clears_the_api_key_in_the_keychain(qtbot, fake_app, tmp_path, kept):
    s = start(fake_app, qtbot, tmp_path, free_port())
    dialog = SettingsDialog(s.config, s.window, api=s.api)
    qtbot.addWidget(dialog)
    assert dialog.api_key.placeholderText().startswith("none") and dialog.no_api_key.isHidden()
    dialog.api_key.setText("with space")
    dialog.save()
    assert dialog.result_config is None and "printable text without spaces" in dialog.error.text()
    dialog.api_key.setText("s3cret")
    dialog.save()
    assert dialog.result_config is not None and kept.kept[("specchat", API_KEY_USER)] == "s3cret"
    assert "s3cret" not in Profile.at(tmp_path).config_file.read_text()  # never in a file

    s.window.actions_by_slot["set_api"].trigger()
    with pytest.raises(openai.AuthenticationError):
        ask(qtbot, lambda: openai.OpenAI(base_url=s.api.url, api_key="wrong", max_retries=0).models.list())
    assert ask(qtbot, lambda: openai.OpenAI(base_url=s.api.url, api_key="s3cret", max_retries=0).models.list())

    again = SettingsDialog(s.config, s.window, api=s.api)
    qtbot.addWidget(again)
    assert again.api_key.placeholderText().startswith("unchanged") and not again.no_api_key.isHidden()
    again.save()  # an empty field leaves the key as it is
    assert kept.kept[("specchat", API_KEY_USER)] == "s3cret"
    third = SettingsDialog(s.config, s.window, api=s.api)
    qtbot.addWidget(third)
    third.no_api_key.setChecked(True)
    third.save()
    assert ("specchat", API_KEY_USER) not in kept.kept
    models = ask(qtbot, lambda: openai.OpenAI(base_url=s.api.url, api_key="anything", max_retries=0).models.list())
    assert [m.id for m in models.data] == ["fake-target.gguf"]


def test_closing_the_app_tells_a_waiting_client_and_frees_the_port(qtbot, fake_app, tmp_path, kept):
    port = free_port()
    # a chat answer that streams until the app closes (30k tokens, a context that holds them)
    s = start(fake_app, qtbot, tmp_path, port, LONG, max_tokens=30_000)
    s.window.actions_by_slot["set_api"].trigger()
    chat = s.window.chat_id
    s.store.add_message(chat, "user", "a long answer, please")
    live = s.answers.ask(chat)
    qtbot.waitUntil(lambda: len(live.content) > 10, timeout=10_000)
    box: dict = {}

    def waits() -> None:
        try:
            openai.OpenAI(base_url=s.api.url, api_key="none", max_retries=0, timeout=30).chat.completions.create(
                model="x", messages=[{"role": "user", "content": QUESTION}])
        except openai.APIStatusError as exc:
            box["error"] = exc

    thread = threading.Thread(target=waits, daemon=True)
    thread.start()
    qtbot.waitUntil(lambda: s.answers.external_waiting == 1, timeout=10_000)
    s.window.close()
    s.close()
    thread.join(10)
    assert box["error"].status_code == 503 and "SpecChat is closing" in str(box["error"])
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(f"http://127.0.0.1:{port}/health", timeout=10)


def test_a_chat_asked_while_an_api_request_answers_says_what_it_waits_for(qtbot, fake_app, tmp_path, kept):
    s = start(fake_app, qtbot, tmp_path, free_port(), LONG, max_tokens=30_000)
    w = s.window
    w.telemetry.show()  # collapsed until an answer has rounds to plot (no room for it on the offscreen screen)
    w.actions_by_slot["set_api"].trigger()
    leave = threading.Event()

    def stream() -> None:  # an API answer that goes on until its client leaves
        body = {"model": "x", "messages": [{"role": "user", "content": QUESTION}], "stream": True,
                "max_tokens": 30_000}
        with httpx2.Client(timeout=30) as http, http.stream("POST", s.api.url + "/chat/completions", json=body) as r:
            for _line in r.iter_lines():
                if leave.is_set():
                    break

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    qtbot.waitUntil(lambda: s.answers.external is not None and s.answers.external.phase is Phase.STREAMING,
                    timeout=10_000)
    assert w.api_status.text().endswith("· 0 requests · answering")
    qtbot.waitUntil(lambda: "API request" in w.telemetry.numbers.text(), timeout=10_000)  # the panel plots it
    send(qtbot, w.pane, "my own question")
    qtbot.waitUntil(lambda: w.pane._live is not None and w.pane._live.footer == API_WAITING, timeout=5_000)
    assert w.pane.send_button.text() == "Cancel"
    leave.set()  # the client goes: its answer stops, the chat's starts
    thread.join(10)
    qtbot.waitUntil(lambda: w.pane._live is not None and w.pane._live.footer == "generating…", timeout=10_000)
    qtbot.waitUntil(lambda: w.api_status.text().endswith("· 1 request"), timeout=10_000)
    s.answers.stop(w.chat_id)


def test_the_window_still_fits_a_laptop_screen_with_the_api_line_at_its_longest(qtbot, fake_app, tmp_path, kept):
    s = start(fake_app, qtbot, tmp_path, free_port())
    w = s.window
    w.actions_by_slot["set_api"].trigger()
    w.api_status.setText("API http://0.0.0.0:65535/v1 (every interface) · 99999 requests · waiting for the pair "
                         "· 32 in line")
    w.pair_status.setText("a-rather-long-target-name-Q4_K_M.gguf + a-rather-long-draft-name-Q8_0.gguf · CPU · ctx 4096")
    w.telemetry.show()  # as once an answer has rounds to plot
    qtbot.wait(50)
    assert w.telemetry.isVisible() and w.minimumSizeHint().width() <= 1000
