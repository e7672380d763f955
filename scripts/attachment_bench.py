"""A bench suite for issue 36's goal: a large source file attached and "rename function f to g everywhere".

Writes a one-line JSONL suite for ``specchat bench --suite``: the file is real Python (SpecChat's own
modules, with a function ``f`` defined at the top and called throughout), put into the question exactly
as the app sends an attached file (``specchat.attachments.message_text``), under the shipped "Code editing
(lookup)" preset's system prompt.  ``--tokens`` sizes the file to the target's tokenizer, so the prompt
fits the bench's ``--ctx`` with room for the answer.

    python scripts/attachment_bench.py --target T.gguf --tokens 15500 --out /tmp/rename.jsonl
    specchat bench --target T.gguf --draft D.gguf --ctx 16384 --suite /tmp/rename.jsonl \\
        --modes baseline,lookup,auto --max-tokens 192
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import specchat  # noqa: F401  (llama.cpp first)
from specchat.attachments import message_text
from specchat.presets import SHIPPED

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["store/chats.py", "store/records.py", "store/schema.py", "engine/drafters.py", "context_policy.py",
           "harness/suite.py", "attachments.py", "presets.py", "files.py", "bounded_json.py", "metrics.py",
           "engine/controller.py", "engine/generate.py", "backends/local.py", "chat_commands.py"]
HEADER = ('"""Helpers gathered in one module."""\n\nfrom __future__ import annotations\n\n\n'
          "def f(value, default=None):\n    \"\"\"The value, or the default when it is None.\"\"\"\n"
          "    return default if value is None else value\n\n\n")


def source(limit_chars: int) -> str:
    """SpecChat's modules, one after another, each `return x` of a bare name written `return f(x)`."""
    text = HEADER
    for rel in SOURCES:
        body = (ROOT / "app" / "specchat" / rel).read_text(encoding="utf-8")
        body = re.sub(r"^from __future__ import annotations\n", "", body, flags=re.M)
        body = re.sub(r"(\n\s+return )([a-z_][a-z_0-9]*)\n", r"\1f(\2)\n", body)
        text += f"# --- {rel} ---\n" + body + "\n\n"
        if len(text) >= limit_chars:
            break
    return text[:limit_chars].rsplit("\n\n\n", 1)[0] + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, required=True, help="the target GGUF (its tokenizer sizes the file)")
    ap.add_argument("--tokens", type=int, default=15500, help="the prompt's size in the target's tokens")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from llama_cpp import Llama

    vocab = Llama(str(args.target), vocab_only=True, verbose=False)
    preset = SHIPPED[0]
    lo, hi = 1000, 400_000
    best = None
    while lo <= hi:  # the largest file whose question fits in --tokens
        mid = (lo + hi) // 2
        text = source(mid)
        question = message_text("Rename the function f to g everywhere in this file.",
                                [("helpers.py", "text/x-python", text)])
        n = len(vocab.tokenize((preset.settings.system_prompt + question).encode(), add_bos=False))
        if n <= args.tokens:
            best, lo = (text, question, n), mid + 1
        else:
            hi = mid - 1
        if len(text) < mid - 2000 and n <= args.tokens:  # every module is in: it cannot grow
            break
    if best is None:
        print("no file fits", file=sys.stderr)
        return 1
    text, question, n = best
    line = {"id": "rename-f-to-g", "task": "edit",
            "messages": [{"role": "system", "content": preset.settings.system_prompt},
                         {"role": "user", "content": question}]}
    args.out.write_text(json.dumps(line) + "\n", encoding="utf-8")
    calls = len(re.findall(r"(?<![\w.])f\(", text)) - 1  # the definition is not a call
    print(f"{args.out}: a {len(text.encode()) / 1024:.0f} KiB file, {calls} calls of f; "
          f"the prompt is about {n} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
