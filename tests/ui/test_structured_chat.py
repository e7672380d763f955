"""A chat held to a JSON schema, in the real window with the real Qwen pair: the schema set in the
chat's settings reaches the engine, the answer validates, the footer says it ran under the schema,
and the speculative rounds were verified under it (drafted and accepted)."""

from __future__ import annotations

import json
import os

import jsonschema

from helpers.app_driver import send, wait_idle
from specchat.harness.suite import PERSON_SCHEMA
from specchat.sampling_settings import StructuredOutput
from specchat.workers.generation import load_pair


def test_a_chat_with_a_json_schema_answers_valid_json_with_speculation_on(qtbot, fake_app, qwen_target,
                                                                          qwen_draft) -> None:  # noqa: ANN001
    app = fake_app()
    schema = PERSON_SCHEMA  # the builtin suite's schema, as JSON text
    app.add_chat(target=qwen_target, draft=qwen_draft, speculation="draft", max_tokens=160, task="json",
                 structured=StructuredOutput("json_schema", schema), system_prompt="Answer with JSON only.")
    s = app.start(qtbot, pair_factory=load_pair)
    send(qtbot, s.window.pane, "A person with name, age, email and three hobbies, realistic values.")
    wait_idle(qtbot, s, timeout=240_000)
    answer = s.store.messages(s.window.chat_id)[-1]
    assert answer.state == "done", answer.stats.error
    jsonschema.validate(json.loads(answer.content), json.loads(PERSON_SCHEMA))
    assert answer.stats.structured == "json_schema" and answer.stats.drafted > 0 and answer.stats.accepted > 0
    shown = s.window.pane.conversation.messages[-1]
    assert "JSON schema" in shown.footer and "draft accepted" in shown.footer
    if os.environ.get("SPECCHAT_SHOT"):  # python -m pytest ... with SPECCHAT_SHOT=path: the docs screenshot
        s.window.resize(1280, 800)
        qtbot.wait(300)
        s.window.grab().save(os.environ["SPECCHAT_SHOT"])
