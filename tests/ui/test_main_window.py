"""The window driven as a person would, headless, on real models (SmolLM2 drafting for itself)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from specchat.config import AppConfig
from specchat.models.registry import Registry
from specchat.store import ChatSettings, open_store
from specchat.ui.main_window import MainWindow
from specchat.workers.download import DownloadService
from specchat.workers.generation import GenerationService

pytestmark = pytest.mark.real_models


@pytest.fixture
def env(tmp_path):
    return {"db": tmp_path / "chats.sqlite3", "registry": tmp_path / "registry.json",
            "config": tmp_path / "config.toml"}


def make_window(qtbot, env, settings: ChatSettings | None = None):
    store = open_store(env["db"])
    if settings is not None and not store.list_chats():
        store.create_chat("New chat", settings)
    service = GenerationService()
    downloads = DownloadService()
    window = MainWindow(store, service, downloads, Registry(env["registry"]), AppConfig(env["config"]))
    qtbot.addWidget(window)
    window.show()
    window._teardown = (service, store)
    return window


def close(window):
    window.close()
    service, store = window._teardown
    service.shutdown()
    store.close()


def wait_loaded(qtbot, w):
    qtbot.waitUntil(lambda: w.pair_info is not None, timeout=60_000)


def send(qtbot, w, text, wait=True):
    w.composer.setPlainText(text)
    qtbot.keyClick(w.composer, Qt.Key.Key_Return)
    if wait:
        qtbot.waitUntil(lambda: not w.generating, timeout=120_000)


@pytest.fixture
def small(smollm):
    return ChatSettings(target=smollm, draft=smollm, speculation="draft", max_tokens=40)


def test_send_streams_an_answer_with_a_footer_and_saves_it(qtbot, env, small):
    w = make_window(qtbot, env, small)
    wait_loaded(qtbot, w)
    send(qtbot, w, "Count from 1 to 10.")
    answer = w.conversation.messages[-1]
    assert answer.role == "assistant" and "3" in answer.content
    assert "tok/s" in answer.footer and "draft accepted" in answer.footer and "stop:" in answer.footer
    stored = w.store.messages(w.chat_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[-1].content == answer.content and stored[-1].state == "done"
    assert w.chat_list.item(0).text().startswith("Count from 1 to 10")  # the chat got a title
    # the telemetry dock is open by default and plotted this answer's rounds
    assert w.telemetry.isVisible()
    w.telemetry.repaint_now()
    assert len(w.telemetry.c_k.yData) == stored[-1].stats.rounds > 0
    close(w)


def test_shift_enter_makes_a_newline_not_a_message(qtbot, env, small):
    w = make_window(qtbot, env, small)
    w.composer.setPlainText("line one")
    w.composer.moveCursor(w.composer.textCursor().MoveOperation.End)
    qtbot.keyClick(w.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert w.composer.toPlainText() == "line one\n"
    assert w.store.messages(w.chat_id) == []
    close(w)


def test_stop_keeps_the_partial_answer(qtbot, env, small):
    from dataclasses import replace

    w = make_window(qtbot, env, replace(small, max_tokens=400))
    wait_loaded(qtbot, w)
    send(qtbot, w, "Write a very long story about a cat.", wait=False)
    assert w.send_button.text() == "Stop"
    qtbot.waitUntil(lambda: len(w.conversation.messages[-1].content) > 20, timeout=60_000)
    qtbot.mouseClick(w.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.generating, timeout=30_000)
    last = w.store.messages(w.chat_id)[-1]
    assert last.state == "stopped" and len(last.content) > 20
    assert last.stats.stop_reason == "cancelled" and last.stats.tokens < 400
    assert w.send_button.text() == "Send"
    close(w)


def test_regenerate_replaces_the_last_answer(qtbot, env, small):
    w = make_window(qtbot, env, small)
    wait_loaded(qtbot, w)
    send(qtbot, w, "Say hello.")
    first_id = w.store.messages(w.chat_id)[-1].id
    qtbot.mouseClick(w.regen_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.generating, timeout=60_000)
    msgs = w.store.messages(w.chat_id)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[-1].id != first_id
    assert len(w.conversation.messages) == 2
    close(w)


def test_switches_are_per_chat_and_survive_a_restart(qtbot, env, small):
    w = make_window(qtbot, env, small)
    first = w.chat_id
    w.header.speculation.setCurrentIndex(w.header.speculation.findData("lookup"))
    w.header.reasoning.setChecked(False)
    qtbot.mouseClick(w.new_button, Qt.MouseButton.LeftButton)
    second = w.chat_id
    assert second != first
    w.header.speculation.setCurrentIndex(w.header.speculation.findData("off"))
    close(w)

    w2 = make_window(qtbot, env)
    assert w2.store.get_chat(first).settings.speculation == "lookup"
    assert w2.store.get_chat(first).settings.reasoning is False
    assert w2.store.get_chat(second).settings.speculation == "off"
    w2.open_chat(first)
    assert w2.header.speculation.currentData() == "lookup" and not w2.header.reasoning.isChecked()
    w2.open_chat(second)
    assert w2.header.speculation.currentData() == "off"
    close(w2)


def test_delete_chat(qtbot, env, small):
    w = make_window(qtbot, env, small)
    qtbot.mouseClick(w.new_button, Qt.MouseButton.LeftButton)
    doomed = w.chat_id
    assert len(w.store.list_chats()) == 2
    w.delete_chat()
    assert [c.id for c in w.store.list_chats()] != [] and doomed not in [c.id for c in w.store.list_chats()]
    assert w.chat_list.count() == 1
    close(w)


def test_search_filters_the_chat_list(qtbot, env, small):
    w = make_window(qtbot, env, small)
    w.store.add_message(w.chat_id, "user", "tell me about pelicans")
    qtbot.mouseClick(w.new_button, Qt.MouseButton.LeftButton)
    w.search.setText("pelicans")
    assert w.chat_list.count() == 1
    w.search.setText("")
    assert w.chat_list.count() == 2
    close(w)


def test_a_model_that_cannot_load_is_a_message_not_a_crash(qtbot, env, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_text("nope")
    w = make_window(qtbot, env, ChatSettings(target=bad))
    qtbot.waitUntil(lambda: w.notice.isVisible(), timeout=10_000)
    assert "not a GGUF file" in w.notice.text()
    send(qtbot, w, "hello", wait=False)
    qtbot.waitUntil(lambda: not w.generating, timeout=10_000)
    assert w.store.messages(w.chat_id)[-1].state == "error"
    close(w)


def test_models_dialog_lists_refused_drafts_with_the_reason(qtbot, env, qwen_target, qwen_draft, smollm):
    w = make_window(qtbot, env)
    for p in (qwen_target, qwen_draft, smollm):
        w.registry.add(p)
    dialog = w.models_dialog()
    qtbot.addWidget(dialog)
    dialog.tabs.setCurrentIndex(1)
    rows = [dialog.installed.item(i).data(Qt.ItemDataRole.UserRole) for i in range(dialog.installed.count())]
    dialog.installed.setCurrentRow(rows.index(str(qwen_target.resolve())))
    texts = [dialog.drafts.item(i).text() for i in range(dialog.drafts.count())]
    assert any(t.startswith("✓") and "0.5B" in t for t in texts)
    refused = [dialog.drafts.item(i) for i in range(dialog.drafts.count()) if dialog.drafts.item(i).text()[0] == "✗"]
    assert refused and "vocabulary sizes differ" in refused[0].text()
    assert not (refused[0].flags() & Qt.ItemFlag.ItemIsEnabled)
    with qtbot.waitSignal(dialog.pairChosen) as chosen:
        dialog.use_button.click()
    assert chosen.args == [qwen_target.resolve(), qwen_draft.resolve()]
    assert w.settings().target == qwen_target.resolve()
    close(w)


def test_end_to_end_with_the_qwen_pair(qtbot, env, qwen_target, qwen_draft):
    w = make_window(qtbot, env, ChatSettings(target=qwen_target, draft=qwen_draft, speculation="auto",
                                             max_tokens=48))
    wait_loaded(qtbot, w)
    assert w.pair_info.draft == qwen_draft.name and "CPU" in w.pair_status.text()
    send(qtbot, w, "Write a Python function that returns the square of a number.")
    last = w.store.messages(w.chat_id)[-1]
    assert last.state == "done" and "def " in last.content
    assert last.stats.mode == "auto" and last.stats.tokens > 5
    close(w)


def test_edit_and_resend_replaces_the_question_and_its_answer(qtbot, env, small):
    w = make_window(qtbot, env, small)
    wait_loaded(qtbot, w)
    send(qtbot, w, "Say hello.")
    w.edit_last("Count from 1 to 5.")
    qtbot.waitUntil(lambda: not w.generating, timeout=60_000)
    msgs = w.store.messages(w.chat_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[0].content == "Count from 1 to 5." and msgs[1].state == "done"
    close(w)


def test_closing_the_window_while_generating_keeps_the_partial_answer(qtbot, env, small):
    from dataclasses import replace

    w = make_window(qtbot, env, replace(small, max_tokens=400))
    wait_loaded(qtbot, w)
    send(qtbot, w, "Write a very long story about a cat.", wait=False)
    qtbot.waitUntil(lambda: len(w.conversation.messages[-1].content) > 20, timeout=60_000)
    shown = w.conversation.messages[-1].content
    close(w)
    store = open_store(env["db"])
    last = store.messages(store.list_chats()[0].id)[-1]
    assert last.state == "stopped" and last.content.startswith(shown[:20]) and len(last.content) >= len(shown)
    store.close()


def test_first_chat_takes_the_pair_from_the_config_file(qtbot, env, smollm):
    env["config"].write_text(f'target = "{smollm}"\ndraft = "{smollm}"\ndefault_mode = "lookup"\n')
    w = make_window(qtbot, env)  # an empty database: the window makes the first chat
    s = w.settings()
    assert s.target == smollm and s.draft == smollm and s.speculation == "lookup"
    wait_loaded(qtbot, w)
    assert w.pair_info.target == smollm.name
    close(w)


def test_a_hidden_telemetry_panel_stays_hidden_after_a_restart(qtbot, env, small, tmp_path):
    from PySide6.QtCore import QSettings

    state = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    store = open_store(env["db"])
    store.create_chat("New chat", small)
    store.close()

    def window():
        store = open_store(env["db"])
        service = GenerationService()
        w = MainWindow(store, service, DownloadService(), Registry(env["registry"]), AppConfig(env["config"]),
                       window_state=state)
        qtbot.addWidget(w)
        w.show()
        w._teardown = (service, store)
        return w

    w = window()
    assert w.telemetry.isVisible()  # the default
    w.telemetry.toggleViewAction().trigger()
    assert not w.telemetry.isVisible()
    close(w)
    again = window()
    assert not again.telemetry.isVisible()
    again.telemetry.toggleViewAction().trigger()
    close(again)
    third = window()
    assert third.telemetry.isVisible()
    close(third)
