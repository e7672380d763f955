"""The API's ``"specchat": {"task": ...}``: the task tag ``auto`` on a managed llama-server keeps its rates by
(backends/server_auto.py), checked like every field of a request."""

from __future__ import annotations

import pytest

from specchat.engine.settings import Mode
from specchat.serve.wire import ApiError, parse

HI = [{"role": "user", "content": "hi"}]


def test_a_request_names_its_task_and_one_that_does_not_is_a_chat():
    asked = parse({"messages": HI, "specchat": {"mode": "auto", "task": " Code "}}, "chat", Mode.BASELINE)
    assert asked.request.task == "code" and asked.request.mode is Mode.AUTO
    assert parse({"messages": HI}, "chat", Mode.AUTO).request.task == "chat"
    assert parse({"messages": HI, "specchat": {"task": "sql"}}, "chat", Mode.AUTO).request.task == "sql"  # your own


@pytest.mark.parametrize("task", [3, "", "  ", "x" * 65, "code\x1b[2J", ["code"]])
def test_a_task_that_is_not_a_tag_is_one_error_naming_the_field(task):
    with pytest.raises(ApiError) as e:
        parse({"messages": HI, "specchat": {"task": task}}, "chat", Mode.AUTO)
    assert e.value.param == "specchat.task" and e.value.status == 400 and "\n" not in str(e.value)
