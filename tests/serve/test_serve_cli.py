"""``specchat serve`` as a user runs it, over the real test pair: the same tokens as ``specchat chat``,
structured output through ``response_format``, a clean stop on SIGTERM, and a port in use in one line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import jsonschema
import openai
import pytest

pytestmark = pytest.mark.slow
PROMPT = "Write a Python function that returns the square of a number."


def specchat(*args) -> list[str]:
    return [sys.executable, "-m", "specchat", *map(str, args)]


@pytest.fixture(scope="module")
def served(qwen_target, qwen_draft):
    proc = subprocess.Popen(specchat("serve", "--target", qwen_target, "--draft", qwen_draft, "--ctx", 2048,
                                     "--port", 0, "--mode", "auto"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    found = re.search(r"at (http://\S+/v1)", line)
    assert found, line + proc.stderr.read() if proc.poll() is not None else line
    yield proc, found.group(1)
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


def test_the_server_answers_the_same_tokens_as_specchat_chat(served, qwen_target, qwen_draft):
    proc, url = served
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
    r = client.chat.completions.create(model="any", messages=[{"role": "user", "content": PROMPT}], max_tokens=40,
                                       temperature=0)
    chat = subprocess.run(specchat("chat", "--target", qwen_target, "--draft", qwen_draft, "--ctx", 2048,
                                   "--max-tokens", 40, "--mode", "baseline", PROMPT),
                          capture_output=True, text=True, timeout=600)
    assert chat.returncode == 0, chat.stderr
    printed = chat.stdout.rsplit("\n\n-- ", 1)[0]
    assert r.choices[0].message.content == printed
    assert r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length"
    assert r.model_extra["specchat"]["mode"] == "auto"


def test_response_format_json_schema_holds_the_answer_to_the_schema(served):
    proc, url = served
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
    r = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Invent a person. Answer in JSON."}], max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_a_second_server_on_the_same_port_says_so_in_one_line(served, qwen_target):
    proc, url = served
    port = url.rsplit(":", 1)[1].split("/")[0]
    second = subprocess.run(specchat("serve", "--target", qwen_target, "--port", port), capture_output=True,
                            text=True, timeout=600)
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [f"specchat: cannot listen on 127.0.0.1:{port}: Address already in use"]


def test_sigterm_stops_the_server_cleanly(served):
    proc, url = served
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert "stopped" in proc.stderr.read()
