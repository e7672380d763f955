"""Issue 25 item 5: a new chat starts from the user's defaults, not from the chat used last."""

from __future__ import annotations

from PySide6.QtCore import Qt

from specchat.sampling_settings import SamplingSettings, StructuredOutput

SCHEMA = StructuredOutput("json_schema", '{"type": "object"}')


def test_a_new_chat_takes_no_schema_system_prompt_sampling_or_server_from_the_last_chat(qtbot, fake_app):
    app = fake_app()
    target, draft = app.model_files()
    app.add_chat("local, with a schema", structured=SCHEMA, system_prompt="Answer in JSON.", temperature=1.3,
                 speculation="lookup")
    w = app.start(qtbot).window
    header = w.pane.header
    assert header.active.isVisible() and header.active.text() == "JSON schema · system prompt"
    qtbot.mouseClick(w.chats.new_button, Qt.MouseButton.LeftButton)
    new = w.pane.settings()
    assert new.sampling == SamplingSettings() and not new.sampling.structured.active
    assert new.system_prompt == "" and new.backend == "" and new.speculation == "auto"  # the config's default mode
    assert (new.target, new.draft) == (target, draft)  # no default pair in the settings: the last local pair
    assert not header.active.isVisible()
    assert w.focusWidget() is w.pane.composer  # ready to type


def test_a_new_chat_after_a_server_chat_runs_on_this_machine_with_the_default_pair(qtbot, fake_app):
    app = fake_app()
    target, draft = app.model_files()
    other = app.root / "other-target.gguf"
    other.touch()
    (app.root / "config.toml").write_text(f'target = "{target}"\ndraft = "{draft}"\ndefault_mode = "baseline"\n')
    app.add_chat("older, local", target=other, draft=None)
    app.add_chat("on a server", backend="nowhere", structured=SCHEMA)
    w = app.start(qtbot).window
    assert w.pane.header.pair_label.text() == "on nowhere" and w.pane.header.active.text() == "JSON schema"
    w.actions_by_slot["new_chat"].trigger()  # File → New chat (Ctrl+N)
    new = w.pane.settings()
    assert new.backend == "" and (new.target, new.draft) == (target, draft) and new.speculation == "baseline"
    assert not new.sampling.structured.active
    assert w.pane.header.pair_label.text().startswith("fake-target.gguf")
    assert w.focusWidget() is w.pane.composer


def test_no_model_pair_goes_once_a_pair_loads(qtbot, fake_app):
    """Issue 25 item 6: a stale "No model pair" line stayed on screen after the pair loaded."""
    app = fake_app()
    w = app.start(qtbot).window  # no pair anywhere: the first chat has none
    w.pane.composer.setPlainText("Hi.")
    w.pane.send()
    assert w.pane.notice.isVisible() and w.pane.notice.text().startswith("No model pair")
    w._pair_chosen(*app.model_files())  # what Models → Use this pair does
    qtbot.waitUntil(lambda: w.session.answers.pair_info is not None, timeout=5_000)
    qtbot.waitUntil(lambda: not w.pane.notice.isVisible(), timeout=5_000)
