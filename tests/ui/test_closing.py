"""Closing the app returns within 2 s in every state, and keeps what was there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.app_driver import FakeApp, send, wait_idle
from helpers.fakes import SLOW_LATER, FakeSpec, TemplateFactory
from helpers.hub_server import FAKE_SHA, REPO, serve_small_files
from specchat.engine import chat
from specchat.models.hub import HubFile
from specchat.profile import Profile
from specchat.store import open_store

CLOSE_S = 2.0  # the promise: the app's close returns within 2 s in every state


@pytest.fixture(autouse=True)
def _no_render_deadline(monkeypatch):
    """The render deadline (2 s) would end a looping template by itself: only a cancel may here."""
    monkeypatch.setattr(chat, "RENDER_SECONDS", 600.0)


def test_closing_the_app_while_a_template_renders(qtbot, tmp_path):
    """The whole app: the first answer streams, the second hangs in the template; closing the
    window returns within 2 s and the chat keeps the first exchange and the question."""
    app = FakeApp(tmp_path, TemplateFactory(SLOW_LATER, FakeSpec(answer_tokens=40)))
    chat_id = app.add_chat()
    try:
        s = app.start(qtbot)
        send(qtbot, s.window.pane, "First question.")
        wait_idle(qtbot, s)
        send(qtbot, s.window.pane, "Second question.")
        qtbot.waitUntil(lambda: s.answers.current is not None and s.answers.current.writer is not None,
                        timeout=5_000)
        qtbot.wait(300)  # rendering the looping template
        t0 = time.monotonic()
        app.stop()
        took = time.monotonic() - t0
    finally:
        app.stop()
    print(f"closed in {took:.2f} s")
    assert took < CLOSE_S, f"closing took {took:.1f} s"
    store = open_store(Profile.at(tmp_path).database)
    try:
        msgs = store.messages(chat_id)
        assert [(m.role, m.state) for m in msgs] == [("user", None), ("assistant", "done"), ("user", None),
                                                    ("assistant", "stopped")]
        assert len(msgs[1].content) == 40 and msgs[2].content == "Second question."
    finally:
        store.close()


def _close_timed(app: FakeApp) -> float:
    t0 = time.monotonic()
    app.stop()
    return time.monotonic() - t0


def test_closing_the_app_during_a_stalled_download(qtbot, tmp_path, monkeypatch):
    """The Models dialog's download thread is blocked on a server that sends nothing: the
    window still closes within 2 s, and the chat is as it was."""
    app = FakeApp(tmp_path, TemplateFactory(chat.CHATML_CHAT_TEMPLATE, FakeSpec(answer_tokens=5)))
    chat_id = app.add_chat()
    (tmp_path / "hub").mkdir()
    with serve_small_files(tmp_path / "hub", monkeypatch) as hub:
        hub.hold_next_get_after(0)  # headers, then silence
        try:
            s = app.start(qtbot)
            send(qtbot, s.window.pane, "Hello.")
            wait_idle(qtbot, s)
            s.downloads.start([HubFile(REPO, "two-mib.gguf")])
            qtbot.waitUntil(lambda: bool(hub.gets(REPO, "two-mib.gguf")), timeout=10_000)
            qtbot.wait(500)  # well into the silence
            took = _close_timed(app)
        finally:
            app.stop()
    print(f"closed in {took:.2f} s")
    assert took < CLOSE_S, f"closing took {took:.1f} s"
    store = open_store(Profile.at(tmp_path).database)
    try:
        assert [(m.role, m.state) for m in store.messages(chat_id)] == [("user", None), ("assistant", "done")]
    finally:
        store.close()


def test_closing_the_app_while_a_download_is_checked(qtbot, tmp_path, monkeypatch):
    """The download thread is hashing a 4 GiB file (its sha256 check): closing returns within 2 s
    and the file is kept for the next try."""
    from huggingface_hub import constants

    app = FakeApp(tmp_path, TemplateFactory(chat.CHATML_CHAT_TEMPLATE, FakeSpec()))
    app.add_chat()
    (tmp_path / "hub").mkdir()
    with serve_small_files(tmp_path / "hub", monkeypatch) as hub:
        size = hub.files[(REPO, "sparse.gguf")].size
        blobs = Path(constants.HF_HUB_CACHE) / f"models--{REPO.replace('/', '--')}" / "blobs"
        blobs.mkdir(parents=True)
        partial = blobs / f"{FAKE_SHA}.incomplete"
        with partial.open("wb") as f:
            f.truncate(size)  # complete but sparse: the job goes straight to hashing it
        try:
            s = app.start(qtbot)
            stages: list[str] = []
            s.downloads.start([HubFile(REPO, "sparse.gguf")]).yielded.connect(lambda p: stages.append(p.stage))
            qtbot.waitUntil(lambda: "verifying" in stages, timeout=10_000)
            took = _close_timed(app)
        finally:
            app.stop()
    print(f"closed in {took:.2f} s")
    assert took < CLOSE_S, f"closing took {took:.1f} s"
    assert partial.stat().st_size == size
