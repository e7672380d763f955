"""A question's files go to the model: whole in the prompt the backend sends (so the context policy counts
them and the footer's prompt tokens include them), one line saying by how much when they cannot fit, and
the lookup drafter drafts an edit of an attached file from the file's own lines."""

from __future__ import annotations

import re

from helpers.fakes import FakePairFactory, FakeSpec
from specchat.attachments import chat_messages
from specchat.chat_commands import ChatCommands
from specchat.context_policy import ContextPolicy
from specchat.engine.drafters import PromptLookupDrafter
from specchat.engine.pair import PairConfig
from specchat.engine.runtime import ModelOptions
from specchat.services.answers import AnswerService
from specchat.store import ChatSettings, NewAttachment, open_store
from specchat.workers.generation import GenerationService

SOURCE = "".join(f"def helper_{i}(values):\n    return sum(v * {i} for v in values)\n\n" for i in range(12))
SOURCE += "def f(items):\n    total = 0\n    for item in items:\n        total += helper_3([item])\n    return total\n"


def ask(qtbot, tmp_path, files, *, n_ctx=2048, policy=ContextPolicy.STOP):
    store = open_store(tmp_path / "db.sqlite3")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.touch()
    draft.touch()
    settings = ChatSettings(target=target, draft=draft, speculation="lookup", max_tokens=40,
                            context_policy=policy.value)
    chat = store.create_chat("New chat", settings).id
    sent = ChatCommands(store).send(chat, "rename f to g", files)
    factory = FakePairFactory(FakeSpec(answer_tokens=20, n_ctx=n_ctx))
    gen = GenerationService(factory)
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, s.draft,
                                                              target_options=ModelOptions(n_ctx=n_ctx)))
    lines, finished = [], []
    answers.notice.connect(lambda n: lines.append(n.text) if n.error else None)
    answers.finished.connect(lambda _chat, stored: finished.append(stored))
    try:
        answers.ask(chat)
        qtbot.waitUntil(lambda: len(finished) == 1, timeout=10_000)
        prompt = bytes(t for t in factory.pairs[-1].target.tokens if t < 256).decode(errors="replace")
        return store, chat, sent, finished[0], lines, prompt
    finally:
        answers.shutdown()
        gen.shutdown()


def test_the_file_is_sent_whole_and_counted_in_the_prompt(qtbot, tmp_path):
    store, chat, sent, answer, lines, prompt = ask(
        qtbot, tmp_path, [NewAttachment("util.py", "text/x-python", SOURCE.encode())])
    try:
        assert sent.retitled and store.get_chat(chat).title == "rename f to g"
        assert not lines and answer.state == "done"
        assert "File: util.py\n```python\n" + SOURCE + "```\n\nrename f to g" in prompt
        assert answer.stats.prompt_tokens >= len(SOURCE.encode())  # the footer's "context used" counts the file
    finally:
        store.close()


def test_a_file_that_cannot_fit_is_one_line_saying_by_how_much(qtbot, tmp_path):
    big = ("x = 1\n" * 200).encode()  # 1200 bytes: the fake tokenizes by byte, past a 512-token context
    store, _chat, _sent, answer, lines, _prompt = ask(
        qtbot, tmp_path, [NewAttachment("big.py", "text/x-python", big)], n_ctx=512,
        policy=ContextPolicy.TRUNCATE_MIDDLE)
    try:
        assert answer.state == "error" and len(lines) == 1 and "\n" not in lines[0]
        tokens = int(lines[0].split("the prompt is ")[1].split()[0])
        assert f"and the context holds 512: {tokens + 1 - 512} too many" in lines[0]
        assert "the question with its files alone is too long" in lines[0]
    finally:
        store.close()


def test_lookup_drafts_an_edit_of_the_attached_file_from_its_lines(tmp_path):
    with open_store(tmp_path / "db.sqlite3") as store:
        chat = store.create_chat("c").id
        ChatCommands(store).send(chat, "rename f to g", [NewAttachment("util.py", "text/x-python", SOURCE.encode())])
        prompt = "".join(m["content"] for m in chat_messages(store, chat))
    vocab: dict[str, int] = {}

    def tokens(text: str) -> list[int]:  # a word-level tokenizer, as a model's is (words, spaces, marks)
        return [vocab.setdefault(w, len(vocab)) for w in re.findall(r"\w+|\s+|[^\w\s]", text)]

    drafter = PromptLookupDrafter(3, k_max=10)
    answer_so_far = "```python\ndef g(items):\n    total = 0\n    for item"  # the model has written this much
    proposal = drafter.propose(tokens(prompt) + tokens(answer_so_far), 10)
    words = {i: w for w, i in vocab.items()}
    # the file's next line, drafted by lookup from the attachment
    assert "".join(words[t] for t in proposal) == " in items:\n        total +="
