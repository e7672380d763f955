"""A line on screen that quotes a state goes or changes when that state changes (issue 25, item 6)."""

from __future__ import annotations

import re
import threading
from functools import partial

import pytest

from helpers.app_driver import send, wait_idle
from helpers.event_streams import R, answer_events
from helpers.fakes import FakeSpec
from specchat.backends.protocol import PairInfo
from specchat.engine import Fallback
from specchat.engine.answer import Started
from specchat.ui import session as session_module

CROSSED = "after 32 rounds, 50% of them fell back to plain decoding (> 15%): try a shorter draft"
# 16 rounds whose drafts all fail, the rail's 64 plain rounds (the warning at round 32), then 16 drafted again
ROUNDS = ([R(2, 2, 0)] * 16
          + [R(0, 0, 0, plain_by_fallback=True, fallback_after=(Fallback(CROSSED, warning=True),) if i == 15 else ())
             for i in range(64)]
          + [R(2, 2, 1)] * 16)
PAUSE_AT = 60  # rounds, where the test looks at the line mid-answer


class FallingBack:
    """A backend replaying the engine's event stream of an answer that falls back more and more."""

    info = PairInfo(target="scripted.gguf", draft="scripted-draft.gguf", backend="CPU", n_ctx=2048,
                    supports_reasoning_switch=False, speculation_blocked="", verify_ms={}, draft_ms=None,
                    target_bytes=0, draft_bytes=0)

    def __init__(self, go_on: threading.Event) -> None:
        self.go_on = go_on

    def answer(self, request, cancel):
        yield Started(10, False)
        rounds = 0
        for ev in answer_events(ROUNDS):
            yield ev
            rounds += type(ev).__name__ == "RoundStats"
            if rounds == PAUSE_AT and not self.go_on.is_set():
                while not self.go_on.wait(0.01) and not cancel.cancelled:
                    pass

    def close(self) -> None:
        pass


@pytest.fixture
def go_on(monkeypatch) -> threading.Event:
    """The app's generation thread opens the scripted backend; the test lets it go on past PAUSE_AT."""
    event = threading.Event()
    monkeypatch.setattr(session_module, "GenerationService",
                        partial(session_module.GenerationService,
                                open_backend=lambda config, cancel, progress=None: FallingBack(event)))
    return event


def shown(text: str) -> tuple[int, int]:
    m = re.search(r"plain decoding took over on (\d+)% of this answer's (\d+) rounds \(warning above 15%\)", text)
    assert m, text
    return int(m.group(1)), int(m.group(2))


def test_the_fallback_warning_tracks_the_answers_share_and_ends_at_its_final_one(qtbot, fake_app, go_on):
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    send(qtbot, pane, "Explain speculative decoding.")
    # paused at round 60: 16 drafted, 44 plain, where the engine warned at 50% after 32 rounds
    qtbot.waitUntil(lambda: "rounds (warning above" in pane.notice.text(), timeout=20_000)
    qtbot.waitUntil(lambda: shown(pane.notice.text())[1] >= PAUSE_AT - 1, timeout=20_000)
    share, rounds = shown(pane.notice.text())
    assert share == round(100 * (rounds - 16) / rounds) and share > 50  # now, not when it was crossed
    assert CROSSED in s.window.statusBar().currentMessage()  # the status bar's line says when it was true
    go_on.set()
    wait_idle(qtbot, s)
    stored = s.store.messages(pane.chat_id)[-1].stats
    assert shown(pane.notice.text()) == (round(100 * 64 / 96), 96) == (round(100 * stored.fallback_share),
                                                                        stored.rounds)
    assert pane.notice.isVisible()


def test_the_fallback_warning_goes_when_the_chat_switches_or_the_next_answer_starts(qtbot, fake_app, go_on):
    go_on.set()
    app = fake_app()
    other = app.add_chat("other")
    app.add_chat()
    s = app.start(qtbot)
    pane = s.window.pane
    chat = pane.chat_id
    send(qtbot, pane, "Explain speculative decoding.")
    wait_idle(qtbot, s)
    assert "plain decoding took over" in pane.notice.text()
    s.window.open_chat(other)
    assert pane.notice.isHidden()
    s.window.open_chat(chat)
    assert pane.notice.isHidden()  # it was about that answer, not the chat
    send(qtbot, pane, "Again.")
    assert pane.notice.isHidden()  # the next answer starts without the last one's warning
    wait_idle(qtbot, s)


def test_no_server_line_stays_after_the_chat_switched_to_local_models_that_failed_to_load(qtbot, fake_app,
                                                                                           monkeypatch):
    from helpers.fake_openai_server import FakeServer
    from specchat.profile import Profile
    from specchat.remote.servers import API_KEY_ENV, ServerConfig, ServerList, servers_file

    monkeypatch.setenv(API_KEY_ENV, "k")  # never the OS keychain in a test
    app = fake_app(FakeSpec(fail_load="fake-target.gguf: llama.cpp could not load the model"))
    with FakeServer("vllm") as server:
        ServerList(servers_file(Profile.at(app.root))).put(ServerConfig("gpu-box", server.url))
        app.add_chat(backend="gpu-box")
        s = app.start(qtbot)
        window, panel = s.window, s.window.telemetry
        panel.show()  # collapsed until an answer has rounds to plot: shown by the user
        qtbot.waitUntil(lambda: panel.remote is not None, timeout=20_000)
        assert "gpu-box" in window.pair_status.text() and panel.backend_notes.isVisible()
        target, draft = app.model_files()
        with qtbot.waitSignal(s.answers.pairFailed, timeout=20_000):
            window._pair_chosen(target, draft)  # Pair…: local models (which then fail to load)
        assert window.pane.header.pair_label.text().startswith("fake-target.gguf")
        assert window.pair_status.text() == "no model loaded"  # the server went before the load began
        assert panel.remote is None and not panel.backend_notes.isVisible() and panel.memory_plot_shown
        assert "could not load the model" in window.pane.notice.text()


def test_a_pair_that_cannot_be_named_leaves_the_loaded_pair_named_in_the_status_bar(qtbot, fake_app):
    app = fake_app()
    loaded = app.add_chat("loaded")
    s = app.start(qtbot)
    window = s.window
    qtbot.waitUntil(lambda: window.pair_status.text().startswith("fake-target.gguf + fake-draft.gguf"),
                    timeout=20_000)
    gone = app.root / "gone.gguf"
    other = s.store.create_chat("gone", app.settings(target=gone)).id
    window.open_chat(other)  # its pair cannot even be named: nothing is unloaded
    assert "gone.gguf: no such file" in window.pane.notice.text()
    assert window.pair_status.text().startswith("fake-target.gguf + fake-draft.gguf")
    window.open_chat(loaded)
    assert window.pane.notice.isHidden()


class Restarting:
    """A server backend whose answer restarts it without its drafter, as auto on the managed llama-server does."""

    def __init__(self) -> None:
        self.drafting = True

    @property
    def info(self) -> PairInfo:
        from specchat.backends.protocol import ServerReport

        said = "llama.cpp, drafting (draft-simple, up to 16 tokens)" if self.drafting else "llama.cpp, no drafting"
        return PairInfo(target="t.gguf", draft=None, backend="llama.cpp at llama-server", n_ctx=2048,
                        supports_reasoning_switch=True, speculation_blocked="", verify_ms={}, draft_ms=None,
                        target_bytes=0, draft_bytes=0, server=ServerReport(said))

    def answer(self, request, cancel):
        yield Started(0, False)
        self.drafting = False  # restarted without its drafter before this answer
        yield Fallback("restarting llama-server without its drafter (plain decoding)")
        yield from answer_events([R(0, 0, 0)] * 4)

    def close(self) -> None:
        pass


def test_the_panels_server_line_follows_a_restart_that_turned_its_drafter_off(qtbot, fake_app, monkeypatch):
    monkeypatch.setattr(session_module, "GenerationService",
                        partial(session_module.GenerationService,
                                open_backend=lambda config, cancel, progress=None: Restarting()))
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    panel = s.window.telemetry
    qtbot.waitUntil(lambda: "drafting (draft-simple" in panel.backend_notes.text(), timeout=20_000)
    send(qtbot, s.window.pane, "Hello.")
    wait_idle(qtbot, s)
    qtbot.waitUntil(lambda: "no drafting" in panel.backend_notes.text(), timeout=10_000)
    assert s.answers.pair_info is not None and "no drafting" in s.answers.pair_info.server.summary
