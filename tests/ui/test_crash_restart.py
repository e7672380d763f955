"""The start after a crash in llama.cpp (issue 31): the pair it died in is not loaded again by itself.

A SIGILL while a pair loads used to repeat at every start: the window preloads the shown chat's pair,
and the same kernel faults again within seconds.  Now the record of the last run (native_work.py)
holds that pair back until the user asks for an answer, and the pane says why in one line.
"""

from __future__ import annotations

from helpers.app_driver import send, wait_idle
from specchat.native_work import WORK_FILE, LastCrash, NativeWork


def crash_in(fake_app) -> LastCrash:
    target, draft = fake_app.model_files()
    return LastCrash("loading", target.name, (target, draft), "Fatal Python error: Illegal instruction", None)


def test_without_a_crash_the_shown_chats_pair_is_preloaded(qtbot, fake_app):
    app = fake_app()
    app.add_chat("code")
    session = app.start(qtbot)
    qtbot.waitUntil(lambda: session.answers.pair_info is not None, timeout=10_000)
    assert len(app.factory.loads) == 1


def test_after_a_crash_its_pair_waits_for_the_user_and_the_pane_says_why(qtbot, fake_app):
    app = fake_app()
    app.add_chat("code")
    session = app.start(qtbot, last_crash=crash_in(app))
    pane = session.window.pane
    qtbot.wait(500)  # the preload would have begun at once
    assert app.factory.loads == [] and session.answers.pair_info is None
    assert pane.notice.isVisible()
    assert pane.notice.text().startswith("SpecChat crashed (Illegal instruction) last time while loading "
                                         "fake-target.gguf: it was not loaded again")
    session.window.new_chat()  # switching chats (the same pair) still does not load it
    qtbot.wait(300)
    assert app.factory.loads == []
    send(qtbot, pane, "hello")  # the user asks: now it loads and answers
    wait_idle(qtbot, session)
    assert len(app.factory.loads) == 1
    assert session.store.messages(pane.chat_id)[-1].role == "assistant"


def test_the_running_app_records_a_load_while_it_runs_and_clears_the_record(qtbot, fake_app):
    app = fake_app()
    app.add_chat("code")
    data = app.root / "data"
    during = []

    def factory(config, cancel, progress=None):
        during.append((data / WORK_FILE).exists())
        return app.factory(config, cancel, progress)

    session = app.start(qtbot, pair_factory=factory, work=NativeWork(data))
    send(qtbot, session.window.pane, "hello")
    wait_idle(qtbot, session)
    assert during == [True]
    assert not (data / WORK_FILE).exists()  # nothing under way: a kill now is not a crash in llama.cpp
