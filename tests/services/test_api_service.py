"""The window's API (services/api.py) on the fake pair: requests wait in the chats' line, a client that goes
away cancels its answer, nothing is stored in the chats, the telemetry recorder sees the API's rounds.

Clients are real (the ``openai`` package, httpx2) against a real ApiServer on a free port; they run on
threads of their own while the GUI thread runs the line, and every wait is on a condition."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx2
import openai
import pytest

from helpers.fakes import FakePairFactory, FakeSpec, fake_pair
from specchat.backends.local import LocalBackend
from specchat.config import AppConfig
from specchat.engine.answer import AnswerRequest
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done, StopReason, TokensEmitted
from specchat.engine.pair import PairConfig, SpeculativePair
from specchat.engine.progress import ProgressSink
from specchat.engine.runtime import LoadCancelled
from specchat.engine.settings import Mode
from specchat.serve.lane import Failed
from specchat.serve.wire import ApiError
from specchat.services.answers import API_CHAT, AnswerService, Phase
from specchat.services.api import ApiService
from specchat.services.settings import SettingsHolder
from specchat.store import ChatSettings, open_store
from specchat.telemetry import TelemetryRecorder
from specchat.workers.generation import GenerationService

HELLO = [{"role": "user", "content": "hello from a script"}]
SHORT = FakeSpec()


class MemoryKeychain:
    def __init__(self, key: str = "") -> None:
        self.key = key

    def get(self) -> str:
        return self.key

    def set(self, key: str) -> None:
        self.key = key


class GatedFactory(FakePairFactory):
    """A load that waits until the test opens the gate (a load "under way" for as long as the test needs)."""

    def __init__(self, spec: FakeSpec) -> None:
        super().__init__(spec)
        self.gate = threading.Event()

    def __call__(self, config: PairConfig, cancel: CancelToken, progress: ProgressSink | None = None) -> SpeculativePair:
        while not self.gate.wait(0.01):
            if cancel.cancelled:
                raise LoadCancelled("the test closed before the gate opened")
        return super().__call__(config, cancel, progress)


class Window:
    """The window's services without the window: the store, the line, the generation thread, the API."""

    def __init__(self, tmp_path: Path, factory: FakePairFactory, key: str = "") -> None:
        self.store = open_store(tmp_path / "db.sqlite3")
        self.target, self.draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
        self.target.touch()
        self.draft.touch()
        self.factory = factory
        self.gen = GenerationService(factory)
        self.recorder = TelemetryRecorder()
        self.answers = AnswerService(self.store, self.gen, lambda s: PairConfig(s.target, s.draft), self.recorder)
        self.settings = SettingsHolder(AppConfig.defaults(tmp_path / "config.toml"))
        self.api = ApiService(self.answers, self.settings, keychain=MemoryKeychain(key))  # type: ignore[arg-type]
        self.records = []
        self.api.record.connect(self.records.append)

    def chat(self, max_tokens: int = 400) -> int:
        chat = self.store.create_chat("c", ChatSettings(target=self.target, draft=self.draft, speculation="draft",
                                                         max_tokens=max_tokens)).id
        self.store.add_message(chat, "user", "question")
        return chat

    def load(self, qtbot) -> None:
        with qtbot.waitSignal(self.answers.pairLoaded, timeout=10_000):
            self.answers.preload(ChatSettings(target=self.target, draft=self.draft))

    def client(self, key: str = "none", timeout: float = 60) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.api.url, api_key=key, max_retries=0, timeout=timeout)

    def close(self) -> None:
        self.api.shutdown()
        self.answers.shutdown()
        self.gen.shutdown()
        self.store.close()


@pytest.fixture
def window(qtbot, tmp_path):
    made: list[Window] = []

    def make(spec: FakeSpec = SHORT, factory: FakePairFactory | None = None, key: str = "") -> Window:
        w = Window(tmp_path, factory or FakePairFactory(spec), key)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def in_thread(call):
    """Run a blocking client call off the GUI thread; ``box`` holds what it returned or raised."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except Exception as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return box, thread


def ask(qtbot, call, timeout: int = 30_000):
    """A blocking client call answered while the GUI thread runs the line; what it returned, or its error."""
    box, thread = in_thread(call)
    qtbot.waitUntil(lambda: "value" in box or "error" in box, timeout=timeout)
    thread.join(5)
    if "error" in box:
        raise box["error"]
    return box["value"]


def direct_text(spec: FakeSpec, messages=HELLO, mode: Mode = Mode.AUTO, max_tokens: int = 2048) -> str:
    """What the same pair answers without the window (as ``specchat chat`` gets it)."""
    backend = LocalBackend(fake_pair(PairConfig(Path("t.gguf"), Path("d.gguf")), spec))
    try:
        events = list(backend.answer(AnswerRequest(tuple(messages), mode=mode, max_tokens=max_tokens),
                                     CancelToken()))
    finally:
        backend.close()
    return "".join(ev.answer for ev in events if isinstance(ev, TokensEmitted))


def messages_in_db(store) -> int:
    return store.connection.execute("SELECT COUNT(*) FROM messages").fetchone()[0]


# an answer that streams until the test stops it (minutes: 30k tokens, a context that holds them)
LONG = FakeSpec(answer_tokens=30_000, decode_s=0.005, n_ctx=65_536)


def test_an_api_request_waits_behind_the_chat_answer_streaming_and_gets_its_own_text(qtbot, window):
    w = window(LONG)
    chat = w.chat(max_tokens=30_000)
    w.load(qtbot)
    assert w.api.start(port=0) == "" and w.api.url.startswith("http://127.0.0.1:")
    order = []
    w.answers.finished.connect(lambda chat_id, stored: order.append(("chat", stored.state)))
    w.api.record.connect(lambda r: order.append(("api", r.status)))
    live = w.answers.ask(chat)
    qtbot.waitUntil(lambda: len(live.content) > 10, timeout=10_000)
    box, thread = in_thread(lambda: w.client().chat.completions.create(model="whatever", messages=HELLO,
                                                                       max_tokens=50))
    qtbot.waitUntil(lambda: w.answers.external_waiting == 1, timeout=10_000)
    assert w.answers.busy_chats() == {chat: Phase.STREAMING}  # the API request is no chat of the list
    shown = len(live.content)
    qtbot.waitUntil(lambda: len(live.content) > shown + 10, timeout=10_000)  # the chat goes on meanwhile
    assert "value" not in box and w.answers.external_waiting == 1
    w.answers.stop(chat)  # the chat's answer ends: the API request's turn
    qtbot.waitUntil(lambda: "value" in box or "error" in box, timeout=30_000)
    thread.join(5)
    assert "error" not in box, box.get("error")
    # the request's record reaches the window after its response reached the client (a queued signal)
    qtbot.waitUntil(lambda: len(order) == 2, timeout=10_000)
    assert order == [("chat", "stopped"), ("api", 200)]
    r = box["value"]
    assert r.choices[0].message.content == direct_text(LONG, max_tokens=50)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 50
    assert r.model == "t.gguf" and r.model_extra["specchat"]["mode"] == "auto"  # the app's default mode
    assert w.store.messages(chat)[-1].content == live.content  # the chat's answer is its own


def test_nothing_of_an_api_request_is_stored_and_the_recorder_plots_it_as_the_apis(qtbot, window):
    w = window(FakeSpec(answer_tokens=80))
    w.chat()
    w.load(qtbot)
    w.api.start(port=0)
    before = messages_in_db(w.store), [c.id for c in w.store.list_chats()]
    r = ask(qtbot, lambda: w.client().chat.completions.create(model="t", messages=HELLO,
                                                             extra_body={"specchat": {"mode": "draft"}}))
    qtbot.waitUntil(lambda: len(w.records) == 1, timeout=10_000)
    assert (messages_in_db(w.store), [c.id for c in w.store.list_chats()]) == before
    answers = w.recorder.answers(API_CHAT)
    assert len(answers) == 1 and answers[0].mode == "draft"
    assert w.recorder.snapshot().answer_chat_id == API_CHAT  # the panel says whose answer it plots
    rounds = w.recorder.rounds(API_CHAT)
    assert rounds and all(x.chat_id == API_CHAT for x in rounds)
    assert sum(x.accepted for x in rounds) == r.model_extra["specchat"]["accepted"] > 0
    record = w.records[0]
    assert (record.status, record.endpoint, record.tokens, record.mode) == (200, "chat", 80, "draft")
    assert record.drafted >= record.accepted > 0


def test_a_client_that_goes_away_mid_stream_stops_the_generation(qtbot, window):
    w = window(LONG)
    w.load(qtbot)
    w.api.start(port=0)
    ends = []
    w.gen.engineEvent.connect(lambda rid, ev: ends.append(ev) if isinstance(ev, Done) else None)
    body = {"model": "t", "messages": HELLO, "stream": True, "max_tokens": 30_000}

    def read_a_little() -> int:
        chunks = 0
        with httpx2.Client(timeout=30) as http, http.stream("POST", w.api.url + "/chat/completions", json=body) as r:
            for line in r.iter_lines():
                chunks += line.startswith("data: ")
                if chunks >= 5:
                    break  # the response is closed: the client went away
        return chunks

    box, thread = in_thread(read_a_little)
    qtbot.waitUntil(lambda: bool(ends), timeout=30_000)
    thread.join(5)
    assert box.get("value") == 5
    assert ends[0].stop_reason is StopReason.CANCELLED and ends[0].stats.counts.tokens < 30_000
    qtbot.waitUntil(lambda: w.answers.external is None, timeout=5_000)  # the line is free again
    qtbot.waitUntil(lambda: len(w.records) == 1, timeout=5_000)
    assert w.records[0].stop == "disconnected"


def test_a_request_whose_client_left_while_it_waited_is_skipped(qtbot, window):
    w = window(LONG)
    chat = w.chat(max_tokens=30_000)
    w.load(qtbot)
    w.api.start(port=0)
    starts = []
    w.gen.engineEvent.connect(lambda rid, ev: starts.append(rid) if type(ev).__name__ == "Started" else None)
    live = w.answers.ask(chat)
    qtbot.waitUntil(lambda: len(live.content) > 5, timeout=10_000)
    gone = threading.Event()

    def ask_and_leave() -> None:
        body = {"model": "t", "messages": HELLO, "stream": True}
        with httpx2.Client(timeout=30) as http, http.stream("POST", w.api.url + "/chat/completions", json=body):
            gone.wait(30)  # the headers came (it is in line): leave before its turn

    box, thread = in_thread(ask_and_leave)
    qtbot.waitUntil(lambda: w.answers.external_waiting == 1, timeout=10_000)
    gone.set()
    thread.join(10)
    qtbot.waitUntil(lambda: len(w.records) == 1, timeout=10_000)  # the server saw it go
    assert w.records[0].stop == "disconnected"
    assert w.answers.busy_chats() == {chat: Phase.STREAMING}
    w.answers.stop(chat)
    qtbot.waitUntil(lambda: not w.answers.busy_chats() and w.answers.external is None
                    and w.answers.external_waiting == 0, timeout=30_000)
    assert len(set(starts)) == 1  # only the chat's answer ever started


def test_a_request_during_a_load_waits_for_the_pair_and_none_loaded_is_a_503(qtbot, window):
    factory = GatedFactory(FakeSpec(answer_tokens=60))
    w = window(factory=factory)
    w.api.start(port=0)
    with pytest.raises(openai.APIStatusError) as err:  # nothing loaded, nothing loading
        w.client().chat.completions.create(model="t", messages=HELLO)
    assert err.value.status_code == 503 and "load a pair in SpecChat first" in str(err.value)

    w.answers.preload(ChatSettings(target=w.target, draft=w.draft))  # held at the gate
    box, thread = in_thread(lambda: w.client().chat.completions.create(model="t", messages=HELLO))
    qtbot.waitUntil(lambda: w.answers.external is not None, timeout=10_000)
    assert w.answers.external.phase is Phase.LOADING
    factory.gate.set()
    qtbot.waitUntil(lambda: "value" in box or "error" in box, timeout=20_000)
    thread.join(5)
    assert box["value"].choices[0].message.content == direct_text(FakeSpec(answer_tokens=60))


def test_the_line_refuses_beyond_its_bound_and_closing_tells_the_waiting_requests(qtbot, window):
    factory = GatedFactory(FakeSpec())
    w = window(factory=factory)
    w.answers.preload(ChatSettings(target=w.target, draft=w.draft))  # a load under way, held at the gate
    lane = w.api.lane
    lane.waiting = 1
    lane.open()
    got: list[list] = [[], []]
    for i in range(2):  # one at the head of the line (waiting for the load), one behind it
        lane.submit(AnswerRequest(tuple(HELLO)), got[i].append, CancelToken(), "test")
    with pytest.raises(ApiError) as err:
        lane.submit(AnswerRequest(tuple(HELLO)), lambda ev: None, CancelToken(), "test")
    assert err.value.status == 429 and err.value.retry_after
    qtbot.waitUntil(lambda: w.answers.external is not None and w.answers.external_waiting == 1, timeout=5_000)
    assert w.answers.external.phase is Phase.LOADING and got == [[], []]
    w.answers.shutdown()
    assert got == [[Failed("SpecChat is closing", 503)]] * 2
    assert lane.in_flight == 0


def test_a_key_is_asked_of_every_request_once_set(qtbot, window):
    w = window(FakeSpec(answer_tokens=20), key="s3cret")
    w.load(qtbot)
    w.api.start(port=0)
    with pytest.raises(openai.AuthenticationError):
        w.client("wrong").chat.completions.create(model="t", messages=HELLO)
    assert ask(qtbot, lambda: w.client("s3cret").chat.completions.create(model="t", messages=HELLO)).choices
    w.api.set_key("")  # cleared: no key asked from the next request on
    assert ask(qtbot, lambda: w.client("anything").chat.completions.create(model="t", messages=HELLO)).choices
    assert w.api.keychain.get() == ""
