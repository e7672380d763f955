"""Benchmark suites: the built-in one, and JSONL files of ``{"id", "task", "messages"}``
(with an optional ``"schema"``: a JSON schema object the answer can be held to).

The built-in suite covers the task types whose acceptance differs most in
practice: code, edits of pasted code (where prompt lookup shines: the answer
repeats the prompt), chat, structured JSON, summarisation and creative writing.
Its JSON prompts carry a schema, so ``specchat bench --structured`` measures them
under it (schema-constrained JSON is where published speed-ups are highest).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from specchat.errors import UserError

SCHEMA_SUFFIX = "+schema"  # the task of a prompt run under its schema: "json+schema"


@dataclass(frozen=True, slots=True)
class BenchPrompt:
    id: str
    task: str
    messages: tuple[dict[str, str], ...]
    schema: str = ""  # a JSON schema (text) the answer can be held to; "" none
    constrained: bool = False  # run under ``schema`` (see :meth:`under_schema`)

    def under_schema(self) -> BenchPrompt:
        """This prompt held to its schema, as a prompt and task of its own ("json-person+schema",
        "json+schema") so that a table compares it with the free runs and its multiplier is
        against its own plain runs."""
        return replace(self, id=self.id + SCHEMA_SUFFIX, task=self.task + SCHEMA_SUFFIX, constrained=True)


def _schema(properties: dict[str, dict], **extra: object) -> str:
    return json.dumps({"type": "object", "properties": properties, "required": list(properties),
                       "additionalProperties": False, **extra})


PERSON_SCHEMA = _schema({
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string"},
    "hobbies": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
})
VOTE_SCHEMA = _schema({key: {"type": "integer", "minimum": 0}
                       for key in ("vote_for", "vote_against", "streets", "trial_months")})


_ARTICLE = (
    "The city council met on Tuesday to discuss the new bicycle lanes planned for the river district. "
    "Supporters said the lanes would cut car traffic and make the area safer for children walking to "
    "school. Shop owners worried that removing forty parking spaces would hurt their business, and asked "
    "for a six-month trial first. The council voted 7 to 2 to build the lanes on two streets as a trial, "
    "measure traffic and sales during the trial, and decide in the spring whether to extend them."
)

_PARSER = (
    "def parse_ranges(text):\n"
    "    result = []\n"
    "    for part in text.split(','):\n"
    "        part = part.strip()\n"
    "        if '-' in part:\n"
    "            start, end = part.split('-')\n"
    "            result.extend(range(int(start), int(end)))\n"
    "        elif part:\n"
    "            result.append(int(part))\n"
    "    return sorted(set(result))\n"
)

_TOTALS = (
    "import csv\n\n"
    "def category_totals(path):\n"
    "    acc = {}\n"
    "    with open(path, newline='') as f:\n"
    "        for buf in csv.DictReader(f):\n"
    "            key = buf['category'].strip().lower()\n"
    "            acc[key] = acc.get(key, 0.0) + float(buf['amount'])\n"
    "    return dict(sorted(acc.items(), key=lambda kv: kv[1], reverse=True))\n\n"
    "def print_totals(path):\n"
    "    acc = category_totals(path)\n"
    "    for key, value in acc.items():\n"
    "        print(f'{key:<20} {value:>10.2f}')\n"
)

BUILTIN: tuple[BenchPrompt, ...] = (
    BenchPrompt("code-fib", "code", (
        {"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number iteratively, "
                                    "with a docstring and type hints."},)),
    BenchPrompt("code-refactor", "code", (
        {"role": "user", "content": "Rewrite this function to use a list comprehension and explain the change:\n\n"
                                    "def evens(xs):\n    out = []\n    for x in xs:\n        if x % 2 == 0:\n"
                                    "            out.append(x)\n    return out\n"},)),
    BenchPrompt("edit-fix", "edit", (
        {"role": "user", "content": "Fix the bug in this function and return the whole corrected function:\n\n"
                                    + _PARSER},)),
    BenchPrompt("edit-rename", "edit", (
        {"role": "user", "content": "Rename the variable `buf` to `line` and `acc` to `totals` everywhere in this "
                                    "code. Return only the code.\n\n" + _TOTALS},)),
    BenchPrompt("edit-hints", "edit", (
        {"role": "user", "content": "Add type hints and a docstring to this function; change nothing else. "
                                    "Return only the code.\n\n" + _PARSER},)),
    BenchPrompt("chat-explain", "chat", (
        {"role": "user", "content": "Explain in a few sentences why the sky is blue."},)),
    BenchPrompt("chat-advice", "chat", (
        {"role": "user", "content": "I have a job interview tomorrow. Give me five short tips."},)),
    BenchPrompt("json-person", "json", (
        {"role": "system", "content": "Answer with JSON only."},
        {"role": "user", "content": "Give a JSON object for a person with fields name, age, email, and a list "
                                    "of three hobbies. Use realistic values."},), PERSON_SCHEMA),
    BenchPrompt("json-extract", "json", (
        {"role": "system", "content": "Answer with JSON only."},
        {"role": "user", "content": "Extract {\"vote_for\": int, \"vote_against\": int, \"streets\": int, "
                                    "\"trial_months\": int} from: " + _ARTICLE},), VOTE_SCHEMA),
    BenchPrompt("summary-council", "summary", (
        {"role": "user", "content": "Summarise this in two sentences:\n\n" + _ARTICLE},)),
    BenchPrompt("summary-bullets", "summary", (
        {"role": "user", "content": "List the key points of this text as bullet points:\n\n" + _ARTICLE},)),
    BenchPrompt("creative-poem", "creative", (
        {"role": "user", "content": "Write a short poem about a lighthouse keeper who befriends a seagull."},)),
    BenchPrompt("creative-story", "creative", (
        {"role": "user", "content": "Write the opening paragraph of a mystery story set on a night train."},)),
)


MAX_SUITE_BYTES = 64 << 20


class SuiteError(UserError, ValueError):
    pass


def _line_schema(schema: object) -> str:
    """A suite line's ``schema``: an object (or its JSON text); checked when a run uses it."""
    if schema is None or schema == "":
        return ""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        return json.dumps(schema)
    raise ValueError("schema must be a JSON schema object")


def with_schemas(prompts: list[BenchPrompt], structured: str) -> list[BenchPrompt]:
    """``structured`` "off": the prompts as they are; "on": those with a schema held to it (the others
    as they are); "both": each prompt with a schema twice, free and held to it."""
    if structured == "off":
        return prompts
    out: list[BenchPrompt] = []
    for p in prompts:
        if not p.schema:
            out.append(p)
            continue
        if structured == "both":
            out.append(p)
        out.append(p.under_schema())
    return out


def load_suite(spec: str) -> list[BenchPrompt]:
    if spec == "builtin":
        return list(BUILTIN)
    path = Path(spec)
    try:
        if path.stat().st_size > MAX_SUITE_BYTES:
            raise SuiteError(f"{spec}: a suite file over {MAX_SUITE_BYTES >> 20} MiB is not a prompt list")
        lines = path.read_bytes().decode("utf-8-sig").splitlines()
    except OSError as exc:
        raise SuiteError(f"{spec}: cannot read suite ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{spec}: not UTF-8 text (byte {exc.start})") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object with 'messages'")
            msgs = obj["messages"]
            if not isinstance(msgs, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                     and isinstance(m.get("content"), str) for m in msgs):
                raise ValueError("messages must be a list of {role, content}")
            out.append(BenchPrompt(str(obj.get("id", f"line{n}")), str(obj.get("task", "custom")), tuple(msgs),
                                   _line_schema(obj.get("schema"))))
        except (ValueError, KeyError, TypeError) as exc:
            raise SuiteError(f"{path.name}:{n}: not a suite line ({exc})") from None
    if not out:
        raise SuiteError(f"{path.name}: no prompts")
    return out
