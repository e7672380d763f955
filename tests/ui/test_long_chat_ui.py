"""A long chat in the window: the policy is picked in Chat settings, and each answer's footer says how
much of the context it used and how many earlier messages were not sent."""

from __future__ import annotations

from pathlib import Path

from helpers.app_driver import send, wait_idle
from helpers.fakes import FakeSpec
from specchat.metrics import Counts
from specchat.stats_line import stats_line
from specchat.store import ChatSettings, MessageStats
from specchat.ui.settings_dialogs import ChatSettingsDialog


def test_chat_settings_offers_the_three_policies_and_keeps_the_choice(qtbot, tasks):
    dialog = ChatSettingsDialog(ChatSettings(target=Path("t.gguf"), context_policy="truncate_middle"), tasks=tasks)
    qtbot.addWidget(dialog)
    combo = dialog.context_policy
    assert [combo.itemData(i) for i in range(combo.count())] == ["stop", "truncate_middle", "rolling_window"]
    assert combo.currentData() == "truncate_middle" and combo.currentText() == "Truncate middle"
    combo.setCurrentIndex(combo.findData("rolling_window"))
    chosen = dialog.result_settings()
    assert chosen.context_policy == "rolling_window" and chosen.target == Path("t.gguf")
    assert ChatSettings.from_json(chosen.to_json()) == chosen  # stored with the chat


def test_an_older_chat_without_a_policy_reads_as_stop():
    assert ChatSettings.from_json('{"max_tokens": 77}').context_policy == "stop"
    stats = MessageStats.from_json('{"counts": {"tokens": 3}, "mode": "draft"}')
    assert stats is not None and stats.n_ctx == 0 and "context" not in stats_line(stats, "done")


def test_the_footer_says_the_context_used_and_what_was_left_out():
    stats = MessageStats(Counts.of_answer(40, 1.0, prompt_tokens=400), mode="draft", stop_reason="eog",
                         n_ctx=512, left_out=6)
    assert "context 440 / 512 (6 earlier messages not sent)" in stats_line(stats, "done")
    assert MessageStats.from_json(stats.to_json()) == stats


def test_a_long_chat_in_the_window_keeps_answering_and_the_footer_shows_the_context(qtbot, fake_app):
    app = fake_app(FakeSpec(answer_tokens=60, n_ctx=512))
    app.add_chat(max_tokens=80, context_policy="rolling_window", system_prompt="Be brief.")
    s = app.start(qtbot)
    pane = s.window.pane
    for i in range(8):
        send(qtbot, pane, f"question {i}: tell me more about the draft model and the loop")
        wait_idle(qtbot, s)
    stored = s.store.messages(pane.chat_id)
    assert len(stored) == 16 and all(m.state == "done" for m in stored if m.role == "assistant")
    last = stored[-1].stats
    assert last.left_out > 0 and last.prompt_tokens <= 512 - 80
    footer = pane.conversation.messages[-1].footer
    assert f"context {last.prompt_tokens + last.tokens} / 512" in footer
    assert f"({last.left_out} earlier messages not sent)" in footer
