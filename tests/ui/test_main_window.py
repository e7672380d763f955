"""The window driven as a person would, headless.

Most flows run on the fake pair (tests/helpers/fakes.py, seconds); the last tests load real GGUF
files (SmolLM2 drafting for itself, the Qwen pair) and are ``real_models``.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.store import ChatSettings
from specchat.workers.generation import load_pair


def test_shift_enter_makes_a_newline_not_a_message(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    pane = app.start(qtbot).window.pane
    pane.composer.setPlainText("line one")
    pane.composer.moveCursor(pane.composer.textCursor().MoveOperation.End)
    qtbot.keyClick(pane.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert pane.composer.toPlainText() == "line one\n"
    assert app.store.messages(pane.chat_id) == []


def test_switches_are_per_chat_and_survive_a_restart(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot).window
    first = w.chat_id
    w.pane.header.speculation.setCurrentIndex(w.pane.header.speculation.findData("lookup"))
    w.pane.header.reasoning.setChecked(False)
    qtbot.mouseClick(w.chats.new_button, Qt.MouseButton.LeftButton)
    second = w.chat_id
    assert second != first
    w.pane.header.speculation.setCurrentIndex(w.pane.header.speculation.findData("baseline"))
    app.stop()
    w = app.start(qtbot).window
    assert w.store.get_chat(first).settings.speculation == "lookup"
    assert w.store.get_chat(first).settings.reasoning is False
    assert w.store.get_chat(second).settings.speculation == "baseline"
    w.open_chat(first)
    assert w.pane.header.speculation.currentData() == "lookup" and not w.pane.header.reasoning.isChecked()
    w.open_chat(second)
    assert w.pane.header.speculation.currentData() == "baseline"


def test_delete_chat_and_search(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot).window
    w.store.add_message(w.chat_id, "user", "tell me about pelicans")
    qtbot.mouseClick(w.chats.new_button, Qt.MouseButton.LeftButton)
    w.chats.search.setText("pelicans")
    assert w.chats.list.count() == 1
    w.chats.search.setText("")
    assert w.chats.list.count() == 2
    doomed = w.chat_id
    w.delete_chat()
    assert doomed not in [c.id for c in w.store.list_chats()] and w.chats.list.count() == 1
    assert w.chat_id == w.store.list_chats()[0].id


def test_telemetry_dock_plots_the_rounds_of_the_answer(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=50))
    app.add_chat()
    s = app.start(qtbot)
    s.window.resize(1280, 720)  # room beside the chat: the dock shows itself once the answer has rounds
    assert s.window.telemetry.isHidden()  # nothing to plot yet
    send(qtbot, s.window.pane, "Hi.")
    wait_idle(qtbot, s)
    stored = s.store.messages(s.window.chat_id)[-1]
    assert s.window.telemetry.isVisible()
    s.window.telemetry.repaint_now()
    assert len(s.window.telemetry.c_k.yData) == stored.stats.rounds > 0


def test_first_chat_takes_the_pair_and_mode_from_the_config_file(qtbot, fake_app):
    app = fake_app()
    target, draft = app.model_files()
    (app.root / "config.toml").write_text(f'target = "{target}"\ndraft = "{draft}"\ndefault_mode = "lookup"\n')
    s = app.start(qtbot)  # an empty database: the window makes the first chat
    settings = s.window.pane.settings()
    assert settings.target == target and settings.draft == draft and settings.speculation == "lookup"
    qtbot.waitUntil(lambda: s.answers.pair_info is not None, timeout=5_000)  # preloaded while idle
    assert app.factory.loads[0].target == target


def test_a_hidden_telemetry_panel_stays_hidden_after_a_restart(qtbot, fake_app, tmp_path):
    state = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    app = fake_app()
    app.add_chat()
    w = app.start(qtbot, window_state=state).window
    assert w.telemetry.isHidden()  # the default: collapsed until an answer gives it rounds to plot
    w.telemetry.toggleViewAction().trigger()  # shown by the user: from the start from now on
    assert w.telemetry.isVisible()
    app.stop()
    w = app.start(qtbot, window_state=state).window
    assert w.telemetry.isVisible()
    w.telemetry.toggleViewAction().trigger()
    assert not w.telemetry.isVisible()
    app.stop()
    assert app.start(qtbot, window_state=state).window.telemetry.isHidden()


def test_a_file_that_is_not_a_model_is_a_message_not_a_crash(qtbot, fake_app):
    app = fake_app()
    bad = app.root / "broken.gguf"
    bad.write_text("nope")
    app.add_chat(target=bad, draft=None)
    s = app.start(qtbot, pair_factory=load_pair)  # the real loader
    pane = s.window.pane
    qtbot.waitUntil(lambda: pane.notice.isVisible(), timeout=10_000)
    assert "not a GGUF file" in pane.notice.text()
    send(qtbot, pane, "hello")
    wait_idle(qtbot, s)
    assert s.store.messages(pane.chat_id)[-1].state == "error"


# -- real models ------------------------------------------------------------------------------


def test_send_streams_an_answer_from_a_real_model(qtbot, fake_app, smollm):
    app = fake_app()
    app.add_chat(target=smollm, draft=smollm, speculation="draft", max_tokens=40)
    s = app.start(qtbot, pair_factory=load_pair)
    send(qtbot, s.window.pane, "Count from 1 to 10.")
    wait_idle(qtbot, s, timeout=120_000)
    answer = s.store.messages(s.window.chat_id)[-1]
    assert answer.state == "done" and "3" in answer.content and answer.stats.drafted > 0
    shown = s.window.pane.conversation.messages[-1]
    assert shown.content == answer.content and "draft accepted" in shown.footer


def test_models_dialog_lists_refused_drafts_with_the_reason(qtbot, fake_app, qwen_target, qwen_draft, smollm):
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    for p in (qwen_target, qwen_draft, smollm):
        s.registry.add(p)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    dialog.tabs.setCurrentIndex(1)
    rows = [dialog.installed.item(i).data(Qt.ItemDataRole.UserRole) for i in range(dialog.installed.count())]
    dialog.installed.setCurrentRow(rows.index(str(qwen_target.resolve())))
    qtbot.waitUntil(lambda: dialog.drafts_read is None, timeout=30_000)  # the headers are read as a task
    texts = [dialog.drafts.item(i).text() for i in range(dialog.drafts.count())]
    assert f"✓ {qwen_draft.stem}" in texts  # named by its file, as in the library
    refused = [dialog.drafts.item(i) for i in range(dialog.drafts.count()) if dialog.drafts.item(i).text()[0] == "✗"]
    assert refused and "vocabulary sizes differ" in refused[0].text()
    assert not (refused[0].flags() & Qt.ItemFlag.ItemIsEnabled)
    with qtbot.waitSignal(dialog.pairChosen) as chosen:
        dialog.use_button.click()
    assert chosen.args == [qwen_target.resolve(), qwen_draft.resolve()]
    assert s.window.pane.settings().target == qwen_target.resolve()


def test_end_to_end_with_the_qwen_pair(qtbot, fake_app, qwen_target, qwen_draft):
    app = fake_app()
    app.add_chat(target=qwen_target, draft=qwen_draft, speculation="auto", max_tokens=48)
    s = app.start(qtbot, pair_factory=load_pair)
    qtbot.waitUntil(lambda: s.answers.pair_info is not None, timeout=120_000)
    assert s.answers.pair_info.draft == qwen_draft.name and "CPU" in s.window.pair_status.text()
    send(qtbot, s.window.pane, "Write a Python function that returns the square of a number.")
    wait_idle(qtbot, s, timeout=120_000)
    last = s.store.messages(s.window.chat_id)[-1]
    assert last.state == "done" and "def " in last.content
    assert last.stats.mode == "auto" and last.stats.tokens > 5


def test_settings_are_saved_with_the_chat(qtbot, fake_app):
    app = fake_app()
    a = app.add_chat()
    s = app.start(qtbot)
    s.window.pane.update_settings(temperature=0.0, max_tokens=77)
    assert s.store.get_chat(a).settings.max_tokens == 77
    assert isinstance(s.store.get_chat(a).settings, ChatSettings)


def test_a_registry_damaged_while_the_app_runs_is_moved_aside_and_said_in_models(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    s.profile.registry.parent.mkdir(parents=True, exist_ok=True)
    s.profile.registry.write_text('{"models": [')
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    [moved] = s.profile.registry.parent.glob("registry.json.corrupt-*")
    assert moved.name in dialog.message.text()
    assert dialog.installed.count() == 0
    assert moved.read_text() == '{"models": ['  # kept aside, never rewritten


def test_a_damaged_user_catalog_hides_only_itself_in_models(qtbot, fake_app):
    app = fake_app()
    app.add_chat()
    s = app.start(qtbot)
    s.profile.user_catalog.parent.mkdir(parents=True, exist_ok=True)
    s.profile.user_catalog.write_text('[[pair]]\nid = "mine\n')
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    assert dialog.pairs  # the shipped catalog is still there
    assert len(dialog.catalog_problems) == 1 and "catalog.toml" in dialog.catalog_problems[0]


