"""Writes ``v1-release.sqlite3``: a chat database as the schema-1 release left it.

Run once, with the code of the schema-1 release (commit 783394c, before the "one
vocabulary" change): ``PYTHONPATH=app python tests/store/data/make_v1_fixture.py``.
The file is committed; the migration tests open a copy of it with today's code, so
they check real old rows, not what today's code thinks old rows looked like.  Running
this script with newer code would write a newer schema, which is why it refuses to.

What is in it (timestamps fixed, so the file is the same on every run):

- "Prime numbers" (task code, speculation draft): a system message, a question, a
  finished draft answer with reasoning, token origins and the engine's stats, a second
  question and a stopped answer with partial stats.
- "A poem" (task creative, speculation "off", the old name of plain decoding): a
  question, a plain answer written with mode "off" (as early builds did) and one with
  "baseline" (as the engine says).
- "JSON please" (task json, speculation lookup): a question, a lookup answer, an
  answer that ended in an error, and an assistant message added without stats.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specchat.engine.events import GenerationStats
from specchat.store import SCHEMA_VERSION, ChatSettings, MessageStats, open_store

OUT = Path(__file__).with_name("v1-release.sqlite3")


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def engine_stats(mode: str, *, prompt_tokens: int, tokens: int, prefill_s: float, decode_s: float,
                 drafted: int = 0, accepted: int = 0, rounds: int = 0, rwd: int = 0, rfa: int = 0,
                 draft_s: float = 0.0, verify_s: float = 0.0, overhead_s: float = 0.0, k_sum: int = 0,
                 fallback_rounds: int = 0, fallbacks: tuple[str, ...] = ()) -> GenerationStats:
    return GenerationStats(
        mode=mode, prompt_tokens=prompt_tokens, tokens=tokens, prefill_s=prefill_s, decode_s=decode_s,
        drafted=drafted, accepted=accepted, rounds=rounds, rounds_with_draft=rwd, rounds_fully_accepted=rfa,
        draft_s=draft_s, verify_s=verify_s, overhead_s=overhead_s, k_sum=k_sum,
        fallback_rounds=fallback_rounds, fallbacks=fallbacks,
    )


def main() -> None:
    if SCHEMA_VERSION != 1:
        sys.exit(f"this writes a schema-1 database; this code writes schema {SCHEMA_VERSION}")
    OUT.unlink(missing_ok=True)
    clock = Clock()
    with open_store(OUT, now=clock, clock=clock, flush_interval=0.0) as store:
        code = store.create_chat("Prime numbers", ChatSettings(
            target="/models/qwen2.5-coder-1.5b-q4_k_m.gguf", draft="/models/qwen2.5-coder-0.5b-q4_k_m.gguf",
            speculation="draft", task="code", temperature=0.0, max_tokens=512))
        store.add_message(code.id, "system", "Answer with code.")
        store.add_message(code.id, "user", "Write is_prime in Python.")
        writer = store.answer_writer(store.start_answer(code.id))
        # as the window streams it: reasoning first, then answer chunks with one origin each
        writer.append("", "The user wants a primality test.", ["target"] * 6)
        writer.append("def", "", ["target"])
        writer.append(" is_prime(n):", "", ["draft"] * 4)
        writer.append("\n    ", "", ["target"])
        writer.append("return n > 1 and all(n % d for d in range(2, n))", "", ["draft"] * 14)
        writer.append("\n", "", ["target"])
        stats = engine_stats("draft", prompt_tokens=40, tokens=101, prefill_s=0.5, decode_s=4.0, drafted=120,
                             accepted=90, rounds=40, rwd=30, rfa=12, draft_s=1.0, verify_s=2.5, overhead_s=0.5,
                             k_sum=120, fallback_rounds=2, fallbacks=("token acceptance 40% < 50%",))
        writer.finish("done", MessageStats.from_generation(stats, "eog"))

        store.add_message(code.id, "user", "Now make it fast for big n.")
        writer = store.answer_writer(store.start_answer(code.id))
        writer.append("Use Miller-Rabin", "", ["target", "draft", "draft", "draft"])
        stats = engine_stats("draft", prompt_tokens=180, tokens=21, prefill_s=0.25, decode_s=1.0, drafted=21,
                             accepted=14, rounds=7, rwd=7, rfa=3, draft_s=0.2, verify_s=0.7, overhead_s=0.1,
                             k_sum=21)
        writer.finish("stopped", MessageStats.from_generation(stats, "cancelled"))

        poem = store.create_chat("A poem", ChatSettings(speculation="off", task="creative", temperature=0.8))
        store.add_message(poem.id, "user", "A haiku about autumn leaves, please.")
        writer = store.answer_writer(store.start_answer(poem.id))
        writer.append("Red leaves drift and fall", "", ["target"] * 5)
        writer.finish("done", MessageStats(tokens=41, decode_s=2.0, mode="off", stop_reason="eog",
                                           decode_tok_s=20.0, prompt_tokens=30, rounds=40))
        store.add_message(poem.id, "user", "Another one.")
        writer = store.answer_writer(store.start_answer(poem.id))
        writer.append("Crisp air, amber light", "", ["target"] * 5)
        stats = engine_stats("baseline", prompt_tokens=60, tokens=61, prefill_s=0.3, decode_s=4.0, rounds=60,
                             verify_s=3.6, overhead_s=0.4)
        writer.finish("done", MessageStats.from_generation(stats, "eog"))

        data = store.create_chat("JSON please", ChatSettings(speculation="lookup", task="json"))
        store.add_message(data.id, "user", 'Give me {"name": "Ada"} with an age field.')
        writer = store.answer_writer(store.start_answer(data.id))
        writer.append('{"name": "Ada"', "", ["draft"] * 5)
        writer.append(', "age": 36}', "", ["target"] * 6)
        stats = engine_stats("lookup", prompt_tokens=50, tokens=31, prefill_s=0.2, decode_s=1.5, drafted=40,
                             accepted=20, rounds=12, rwd=10, rfa=5, draft_s=0.01, verify_s=1.3, overhead_s=0.19,
                             k_sum=40)
        writer.finish("done", MessageStats.from_generation(stats, "eog"))
        store.add_message(data.id, "user", "And a list of three.")
        writer = store.answer_writer(store.start_answer(data.id))
        writer.append("[", "", ["target"])
        stats = engine_stats("lookup", prompt_tokens=90, tokens=1, prefill_s=0.3, decode_s=0.0)
        writer.finish("error", MessageStats.from_generation(stats, "error", error="llama_decode returned -3"))
        store.add_message(data.id, "assistant", "An answer pasted in by hand.")
        store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
