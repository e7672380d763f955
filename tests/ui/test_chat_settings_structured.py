"""Chat settings → Structured output: a JSON schema or GBNF grammar, checked on OK in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specchat.sampling_settings import SamplingSettings, StructuredOutput
from specchat.store import ChatSettings, open_store
from specchat.ui.settings_dialogs import ChatSettingsDialog

SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})


def open_dialog(qtbot, tasks, settings: ChatSettings | None = None) -> ChatSettingsDialog:
    dialog = ChatSettingsDialog(settings or ChatSettings(), tasks=tasks)
    qtbot.addWidget(dialog)
    return dialog


def ok(qtbot, dialog: ChatSettingsDialog) -> None:
    """Press OK and wait for the check (a task) to answer."""
    dialog.accept()
    qtbot.waitUntil(lambda: dialog.structured_check is None, timeout=30_000)


def choose(dialog: ChatSettingsDialog, kind: str, text: str) -> None:
    dialog.structured_kind.setCurrentIndex(dialog.structured_kind.findData(kind))
    dialog.structured_text.setPlainText(text)


def test_a_valid_schema_is_accepted_saved_with_the_chat_and_shown_again(qtbot, tasks, tmp_path):
    dialog = open_dialog(qtbot, tasks)
    choose(dialog, "json_schema", SCHEMA)
    ok(qtbot, dialog)
    assert dialog.result() == ChatSettingsDialog.DialogCode.Accepted
    new = dialog.result_settings()
    assert new.sampling.structured == StructuredOutput("json_schema", SCHEMA)
    with open_store(tmp_path / "chats.db") as store:  # stored with the chat, read back as given
        chat = store.create_chat("t", new)
        again = store.get_chat(chat.id).settings
    assert again.sampling.structured == StructuredOutput("json_schema", SCHEMA)
    reopened = open_dialog(qtbot, tasks, again)
    assert reopened.structured_kind.currentData() == "json_schema"
    assert reopened.structured_text.toPlainText() == SCHEMA and reopened.structured_text.isEnabled()


def test_a_bad_grammar_stays_open_with_one_line_and_nothing_saved(qtbot, tasks):
    dialog = open_dialog(qtbot, tasks)
    choose(dialog, "grammar", 'root ::= ("yes" | "no"')
    ok(qtbot, dialog)
    assert dialog.result() != ChatSettingsDialog.DialogCode.Accepted
    message = dialog.structured_error.text()
    assert "not a valid GBNF grammar" in message and "expecting ')'" in message and "\n" not in message
    assert not dialog.structured_error.isHidden()


def test_a_schema_that_is_not_json_or_not_supported_is_one_line(qtbot, tasks):
    dialog = open_dialog(qtbot, tasks)
    for text, expected in (('{"type": "object",', "not valid JSON"),
                           ('{"type": "frobnicate"}', "not a schema llama.cpp can follow"),
                           ('{"type": "array", "minItems": 1000000000}', "out of range"),
                           ("", "is empty")):
        choose(dialog, "json_schema", text)
        ok(qtbot, dialog)
        assert dialog.result() != ChatSettingsDialog.DialogCode.Accepted, text
        assert expected in dialog.structured_error.text() and "\n" not in dialog.structured_error.text()


def test_none_keeps_no_text_and_the_box_is_disabled(qtbot, tasks):
    dialog = open_dialog(qtbot, tasks, ChatSettings(sampling=SamplingSettings(structured=StructuredOutput("grammar", 'root ::= "x"'))))
    dialog.structured_kind.setCurrentIndex(dialog.structured_kind.findData(""))
    assert not dialog.structured_text.isEnabled()
    ok(qtbot, dialog)
    assert dialog.result() == ChatSettingsDialog.DialogCode.Accepted
    new = dialog.result_settings()
    assert new.sampling.structured == StructuredOutput("", "")


def test_load_file_fills_the_box_and_a_bad_file_is_one_line(qtbot, tasks, tmp_path):
    dialog = open_dialog(qtbot, tasks)
    choose(dialog, "grammar", "")
    good = tmp_path / "yes-no.gbnf"
    good.write_text('root ::= "yes" | "no"\n', encoding="utf-8")
    assert dialog.load_structured_file(str(good))
    assert dialog.structured_text.toPlainText() == 'root ::= "yes" | "no"\n'
    binary = tmp_path / "blob.gbnf"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert not dialog.load_structured_file(str(binary))
    assert "not UTF-8" in dialog.structured_error.text()
    assert dialog.structured_text.toPlainText() == 'root ::= "yes" | "no"\n'  # left as it was
    assert not dialog.load_structured_file(str(tmp_path / "missing.json"))
    assert "cannot read it" in dialog.structured_error.text()


def test_screenshot_a_chat_with_a_json_schema(qtbot, tasks):
    """docs/screenshot-structured-output.png: the dialog with a schema (SPECCHAT_SCREENSHOTS=1 writes it)."""
    from specchat.harness.suite import PERSON_SCHEMA

    dialog = open_dialog(qtbot, tasks, ChatSettings(target=Path("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
                                             draft=Path("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
                                             speculation="draft", task="json", sampling=SamplingSettings(structured=StructuredOutput(
                                                 "json_schema", json.dumps(json.loads(PERSON_SCHEMA), indent=2)))))
    dialog.resize(640, dialog.sizeHint().height())
    dialog.show()
    qtbot.waitExposed(dialog)
    image = dialog.grab()
    assert not image.isNull()
    if os.environ.get("SPECCHAT_SCREENSHOTS"):
        image.save(str(Path(__file__).resolve().parents[2] / "docs" / "screenshot-structured-output.png"))


def test_a_costly_grammar_is_refused_in_one_line_while_the_dialog_answers(qtbot, tasks):
    """The check runs as a task: the dialog says so at once and stays responsive; a grammar whose parse
    stacks double at every character is refused by the bounded check, in one line."""
    dialog = open_dialog(qtbot, tasks)
    choose(dialog, "grammar", 's ::= [a-z] s "b"? | [a-z] s "c"? | ""\nroot ::= s')
    dialog.accept()
    assert dialog.structured_check is not None and "checking the GBNF grammar" in dialog.structured_error.text()
    qtbot.waitUntil(lambda: dialog.structured_check is None, timeout=30_000)
    assert dialog.result() != ChatSettingsDialog.DialogCode.Accepted
    assert "too costly" in dialog.structured_error.text() and "\n" not in dialog.structured_error.text()


def test_closing_the_dialog_during_the_check_cancels_it(qtbot, tasks):
    dialog = open_dialog(qtbot, tasks)
    choose(dialog, "json_schema", SCHEMA + " ")  # a text not checked before in this process
    dialog.accept()
    handle = dialog.structured_check
    assert handle is not None
    dialog.reject()
    assert dialog.structured_check is None and dialog.result() == ChatSettingsDialog.DialogCode.Rejected
    qtbot.waitUntil(lambda: not tasks.busy, timeout=10_000)

