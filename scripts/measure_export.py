"""How long do the chats' exports take?  A generated profile of ``--chats`` chats holding ``--messages``
messages (questions with code, answers with reasoning, statistics and draft tints, some regenerated) is
exported to Markdown and to SpecChat JSON, and the JSON imported into a fresh profile; best of ``--repeat``.

    python scripts/measure_export.py [--chats 100] [--messages 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import specchat  # noqa: F401  (the native libraries first)
from specchat.metrics import Counts
from specchat.store import MessageStats, Store, exchange, open_store


def generate(store: Store, chats: int, messages: int) -> None:
    rng = random.Random(7)
    per_chat = messages // chats
    for c in range(chats):
        chat = store.create_chat(f"Chat {c}")
        count = 0
        while count + 2 <= per_chat:
            q = store.add_message(chat.id, "user", f"Question {count}\n```python\nprint({count})\n```\n" + "words " * 40)
            count += 1
            for _ in range(2 if count + 2 <= per_chat and rng.random() < 0.1 else 1):
                writer = store.answer_writer(store.start_answer(chat.id))
                writer.append("Answer " + "text " * rng.randint(50, 300) + "\n```python\nsorted(xs)\n```",
                              reasoning="thinking " * rng.randint(0, 100), origins="dt")
                writer.finish("done", MessageStats(Counts(tokens=300, decoded=299, drafted=200, accepted=150,
                                                          decode_s=3.0), mode="auto"))
                count += 1
                if count + 1 <= per_chat and _ == 0 and rng.random() < 0.1:
                    store.new_version(q.id)
        if count < per_chat:
            store.add_message(chat.id, "user", "One more thing")


def best(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with open_store(root / "a.sqlite3", flush_interval=0.0) as store:
            generate(store, args.chats, args.messages)
            ids = exchange.chat_ids(store, None)
            held = store.connection.execute("SELECT count(*) FROM messages").fetchone()[0]
            md = best(args.repeat, lambda: exchange.export_markdown(store, ids, root / "all.md"))
            js = best(args.repeat, lambda: exchange.export_json(store, ids, root / "all.json"))
        runs = iter(range(args.repeat))
        imp = best(args.repeat, lambda: exchange.import_file(
            open_store(root / f"b{next(runs)}.sqlite3"), root / "all.json"))
        print(f"{len(ids)} chats, {held} messages: Markdown export {md:.2f} s "
              f"({(root / 'all.md').stat().st_size / 1e6:.1f} MB), JSON export {js:.2f} s "
              f"({(root / 'all.json').stat().st_size / 1e6:.1f} MB), JSON import {imp:.2f} s (best of {args.repeat})")


if __name__ == "__main__":
    main()
