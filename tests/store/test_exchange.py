"""Export and import: SpecChat's JSON gives back the same chats, Markdown reads well, ChatGPT's and Open WebUI's
exports import along the branch they showed, and a damaged or hostile file imports nothing."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specchat.errors import UserError
from specchat.metrics import Counts
from specchat.store import MessageStats, NewAttachment, Store, exchange, open_store
from specchat.store.exchange import ExchangeError

DATA = Path(__file__).parent / "data"
CHATGPT = DATA / "chatgpt-conversations.json"
OPENWEBUI = DATA / "openwebui-export.json"


@pytest.fixture
def store(tmp_path: Path):
    with open_store(tmp_path / "a" / "specchat.sqlite3", flush_interval=0.0) as s:
        yield s


@pytest.fixture
def fresh(tmp_path: Path):
    with open_store(tmp_path / "b" / "specchat.sqlite3", flush_interval=0.0) as s:
        yield s


def answer(store: Store, chat_id: int, text: str, *, reasoning: str = "", state: str = "done", seed: int = 0):
    writer = store.answer_writer(store.start_answer(chat_id))
    half = len(text) // 2
    writer.append(text[:half], reasoning=reasoning, origins="d")
    writer.append(text[half:], origins="t")
    counts = Counts(tokens=20 + seed, decoded=19 + seed, drafted=12 + seed, accepted=7 + seed % 5,
                    rounds=9, rounds_with_draft=6, rounds_fully_accepted=3, k_sum=12 + seed,
                    prefill_s=0.01 * (seed + 1), decode_s=0.25 + seed / 100)
    return writer.finish(state, MessageStats(counts=counts, mode="auto", stop_reason="eos",
                                             drafters=(("model", 12 + seed, 7 + seed % 5),),
                                             notes=("lookup: no match",), n_ctx=4096, left_out=seed % 3))


def generated_profile(store: Store, chats: int = 100, messages: int = 5000) -> None:
    """``chats`` chats holding ``messages`` messages in all: questions and answers with reasoning, code,
    statistics and draft tints, stopped and failed answers, regenerations and edits kept as versions."""
    rng = random.Random(7)
    per_chat = messages // chats
    for c in range(chats):
        chat = store.create_chat(f"Chat {c}: {rng.choice(['sorting', 'haiku', 'SQL', 'ünïcödé 日本'])}")
        count = 0
        while count + 2 <= per_chat:
            files = []
            if count % 14 == 0:  # a file with the question, now and then one that is not UTF-8
                files.append(NewAttachment(f"notes-{count}.py", "text/x-python", f"x = {count}\n".encode()))
            if count % 98 == 0:
                files.append(NewAttachment("latin1.txt", "text/plain", "café".encode("latin-1")))
            q = store.add_message(chat.id, "user", f"Question {count} of chat {c}\n```python\nprint({count})\n```",
                                  attachments=files)
            count += 1
            state = rng.choice(["done", "done", "done", "stopped", "error"])
            answer(store, chat.id, f"Answer {count}: use `sorted` {'x' * rng.randint(0, 80)}",
                   reasoning="Let me think." if rng.random() < 0.5 else "", state=state, seed=count)
            count += 1
            if count + 3 <= per_chat and rng.random() < 0.1:  # a regeneration: the old answer kept
                store.new_version(q.id)
                answer(store, chat.id, f"Regenerated {count}", seed=count)
                count += 1
            elif count + 3 <= per_chat and rng.random() < 0.05:  # an edit: old text and answer kept
                store.edit_message(q.id, f"Edited question {count}")
                answer(store, chat.id, f"Answer to the edit {count}", seed=count)
                count += 1
        if count < per_chat:  # a question not answered yet
            store.add_message(chat.id, "user", "One more thing")


def everything(store: Store) -> list[dict]:
    """What the store holds of every chat, shown or paged away, without database ids."""
    return [exchange.chat_document(store, c.id) for c in reversed(store.list_chats())]


def test_json_round_trip_of_100_chats_and_5000_messages_gives_back_every_message_version_and_figure(
        store, fresh, tmp_path):
    generated_profile(store)
    held = everything(store)
    assert len(held) == 100
    assert sum(len(c["messages"]) for c in held) == 5000
    assert sum(len(c["versions"]) for c in held) > 20
    assert sum(len(m.get("attachments", [])) for c in held for m in c["messages"]) > 300

    out = tmp_path / "all.json"
    assert exchange.export_json(store, exchange.chat_ids(store, None), out) == 100
    kind, imported = exchange.import_file(fresh, out)

    assert kind == "SpecChat" and len(imported) == 100
    assert everything(fresh) == held  # every message, version, state, reasoning, tint and per-answer figure
    # and what the window shows and a turn sends: the shown chat, its pager and the answers' figures
    for old, new in zip(reversed(store.list_chats()), reversed(fresh.list_chats()), strict=True):
        old_shown, new_shown = store.messages(old.id), fresh.messages(new.id)
        assert [(m.role, m.content, m.reasoning, m.state, m.stats, m.content_segments()) for m in old_shown] == \
            [(m.role, m.content, m.reasoning, m.state, m.stats, m.content_segments()) for m in new_shown]
        assert sorted(store.version_counts(old.id).values()) == sorted(fresh.version_counts(new.id).values())
        for a, b in zip(old_shown, new_shown, strict=True):  # the files, their text byte for byte
            assert [(f.name, f.mime, f.size, f.sha256, f.position, f.created_at) for f in store.attachments(a.id)] == \
                [(f.name, f.mime, f.size, f.sha256, f.position, f.created_at) for f in fresh.attachments(b.id)]
            assert [store.attachment_data(f) for f in store.attachments(a.id)] == \
                [fresh.attachment_data(f) for f in fresh.attachments(b.id)]
        assert (old.title, old.created_at, old.updated_at, old.settings) == \
            (new.title, new.created_at, new.updated_at, new.settings)


def test_an_imported_version_pages_back_to_its_old_answer(store, fresh, tmp_path):
    chat = store.create_chat("c")
    q = store.add_message(chat.id, "user", "question")
    answer(store, chat.id, "first answer")
    store.new_version(q.id)
    answer(store, chat.id, "second answer")
    exchange.export_json(store, [chat.id], tmp_path / "c.json")
    (new,) = exchange.import_file(fresh, tmp_path / "c.json")[1]
    q2 = fresh.messages(new.id)[0]
    assert [m.content for m in fresh.messages(new.id)] == ["question", "second answer"]
    fresh.show_version(q2.id, 1)
    assert [m.content for m in fresh.messages(new.id)] == ["question", "first answer"]


def test_import_never_overwrites_it_adds_new_chats(store, tmp_path):
    chat = store.create_chat("mine")
    store.add_message(chat.id, "user", "hello")
    exchange.export_json(store, [chat.id], tmp_path / "c.json")
    exchange.import_file(store, tmp_path / "c.json")
    exchange.import_file(store, tmp_path / "c.json")
    assert [c.title for c in store.list_chats()].count("mine") == 3
    assert [m.content for m in store.messages(chat.id)] == ["hello"]


def test_markdown_has_roles_collapsed_reasoning_code_fences_and_figures(store, tmp_path):
    chat = store.create_chat("Code chat")
    store.add_message(chat.id, "user", "Sort this:\n```python\nxs = [3, 1]\n```")
    answer(store, chat.id, "Here:\n```python\nsorted(xs)\n```\nDone.", reasoning="I should use sorted.")
    answer(store, chat.id, "Cut off mid-fence:\n```js\nconsole.log(1)", state="stopped")
    out = tmp_path / "c.md"
    exchange.export_markdown(store, [chat.id], out)
    text = out.read_text()
    assert text.startswith("# Code chat\n")
    assert "## User\n\nSort this:\n```python\nxs = [3, 1]\n```\n" in text
    assert "<details>\n<summary>Reasoning</summary>\n\nI should use sorted.\n\n</details>" in text
    assert "Here:\n```python\nsorted(xs)\n```\nDone." in text
    assert "accepted" in text and "tok/s" in text  # the answer's figures
    # an answer stopped inside a code block has its fence closed, so the next heading is a heading
    assert "console.log(1)\n```\n" in text and "_(stopped)_" in text

    exchange.export_markdown(store, [chat.id], out, reasoning=False)
    assert "I should use sorted" not in out.read_text() and "<details>" not in out.read_text()


def test_markdown_export_of_every_chat_holds_every_shown_message(store, tmp_path):
    generated_profile(store, chats=5, messages=60)
    out = tmp_path / "all.md"
    exchange.export_markdown(store, exchange.chat_ids(store, None), out)
    text = out.read_text()
    for chat in store.list_chats():
        assert f"# {chat.title}\n" in text
        for m in store.messages(chat.id):
            assert m.content in text


def test_chatgpt_export_imports_the_shown_branch_and_keeps_the_others_as_versions(fresh):
    kind, chats = exchange.import_file(fresh, CHATGPT)
    assert kind == "ChatGPT"
    assert [c.title for c in chats] == ["Sorting in Python", "What is in this picture?"]
    sorting = chats[0]
    shown = fresh.messages(sorting.id)
    assert [(m.role, m.content) for m in shown] == [
        ("user", "How do I sort a list in Python?"),
        ("assistant", "Use `sorted`:\n\n```python\nxs = sorted([3, 1, 2])\n```\n\nIt returns a new list."),
        ("user", "And in descending order, with a key?"),
        ("assistant", "```python\nsorted(xs, key=abs, reverse=True)\n```"),
    ]
    assert shown[3].reasoning == "They want reverse=True with key=."  # the "thoughts" before it
    assert sorting.created_at == 1700000000.0

    first_question, second_question = shown[0], shown[2]
    fresh.show_version(first_question.id, 1)  # the answer that was regenerated
    assert [m.content for m in fresh.messages(sorting.id)] == ["How do I sort a list in Python?", "Call list.sort()."]
    fresh.show_version(first_question.id, 2)
    fresh.show_version(second_question.id, 1)  # the question before its edit, with its answer
    assert [m.content for m in fresh.messages(sorting.id)][2:] == ["And reverse?", "Pass reverse=True."]

    picture = fresh.messages(chats[1].id)
    assert [m.content for m in picture] == ["Describe it.", "A cat on a mat."]


def test_a_chatgpt_upload_without_its_text_is_not_attached(fresh):
    chats = exchange.import_file(fresh, CHATGPT)[1]
    question = fresh.messages(chats[1].id)[0]
    assert question.content == "Describe it." and fresh.attachments(question.id) == []


def test_markdown_names_a_message_s_files(store, tmp_path):
    chat = store.create_chat("c")
    store.add_message(chat.id, "user", "Look at this", attachments=[NewAttachment("main.py", "text/x-python", b"x=1")])
    exchange.export_markdown(store, [chat.id], tmp_path / "c.md")
    assert "- Attachment: `main.py` (text/x-python, 3 bytes)" in (tmp_path / "c.md").read_text()


def test_a_file_past_the_store_s_cap_refuses_the_import(store, fresh, tmp_path):
    doc = _specchat_doc(store, tmp_path)
    doc["chats"][1]["messages"][0]["attachments"] = [{"name": "big.txt", "text": "x" * (2 << 20)}]
    (tmp_path / "big.json").write_text(json.dumps(doc))
    with pytest.raises(ExchangeError, match="big.txt"):
        exchange.import_file(fresh, tmp_path / "big.json")
    assert fresh.list_chats() == []


def test_openwebui_export_imports_the_shown_branch_with_its_reasoning(fresh):
    kind, (chat,) = exchange.import_file(fresh, OPENWEBUI)
    assert kind == "Open WebUI" and chat.title == "Sea haiku"
    shown = fresh.messages(chat.id)
    assert [(m.role, m.content) for m in shown] == [
        ("user", "Write a haiku about the sea"),
        ("assistant", "Salt wind on the pier\ngulls argue over the tide\nthe sea keeps its own"),
        ("user", "Now explain it in one line, using my notes"),
        ("assistant", "The sea outlasts every quarrel on its shore."),
    ]
    assert shown[3].reasoning == "The user wants one line.\nKeep it short."
    (notes,) = fresh.attachments(shown[2].id)  # the file's text Open WebUI kept
    assert (notes.name, notes.mime, fresh.attachment_text(notes)) == ("notes.txt", "text/plain",
                                                                      "the sea: salt, gulls, tide\n")
    fresh.show_version(shown[0].id, 1)
    assert [m.content for m in fresh.messages(chat.id)] == ["Write a haiku about the sea", "Waves fold into foam"]


def test_openwebui_without_a_tree_reads_the_message_list(fresh, tmp_path):
    doc = json.loads(OPENWEBUI.read_text())
    del doc[0]["chat"]["history"]
    (tmp_path / "flat.json").write_text(json.dumps(doc))
    chat = exchange.import_file(fresh, tmp_path / "flat.json")[1][0]
    assert len(fresh.messages(chat.id)) == 4


def test_a_chatgpt_export_without_parents_reads_its_messages_in_time_order(fresh, tmp_path):
    def node(role: str, text: str, t: float) -> dict:
        return {"message": {"author": {"role": role}, "content": {"parts": [text]}, "create_time": t}}

    doc = [{"title": "flat", "mapping": {"b": node("assistant", "Here's how", 2.0), "a": node("user", "How?", 1.0),
                                         "c": node("user", "Thanks", 3.0)}}]
    (tmp_path / "flat.json").write_text(json.dumps(doc))
    chat = exchange.import_file(fresh, tmp_path / "flat.json")[1][0]
    assert [m.content for m in fresh.messages(chat.id)] == ["How?", "Here's how", "Thanks"]


def test_a_chatgpt_tree_with_a_cycle_imports_without_hanging(fresh, tmp_path):
    doc = json.loads(CHATGPT.read_text())[:1]
    doc[0]["mapping"]["aaa-root"]["parent"] = "a2"  # the root's parent is the leaf
    (tmp_path / "cycle.json").write_text(json.dumps(doc))
    chat = exchange.import_file(fresh, tmp_path / "cycle.json")[1][0]
    assert len(fresh.messages(chat.id)) == 4


def test_a_chatgpt_export_whose_branches_share_one_long_chain_takes_each_node_once(fresh, tmp_path):
    """A hostile "tree": every question on the path also lists the same 2,000-message chain as another
    answer.  Followed for each, that is 400,000 messages; each node becomes one message at most."""
    mapping = {"r": {"id": "r", "message": None, "parent": None, "children": ["q0"]}}
    shared = [f"s{i}" for i in range(2000)]
    for i, sid in enumerate(shared):
        mapping[sid] = {"id": sid, "parent": shared[i - 1] if i else None, "children": shared[i + 1:i + 2],
                        "message": {"author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["s"]}}}
    previous = "r"
    for i in range(200):
        q, a = f"q{i}", f"a{i}"
        mapping[q] = {"id": q, "parent": previous, "children": ["s0", a],
                      "message": {"author": {"role": "user"}, "content": {"content_type": "text", "parts": [f"q{i}"]}}}
        mapping[a] = {"id": a, "parent": q, "children": [f"q{i + 1}"] if i < 199 else [],
                      "message": {"author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["a"]}}}
        previous = a
    (tmp_path / "dag.json").write_text(json.dumps([{"title": "dag", "mapping": mapping, "current_node": "a199"}]))
    (chat,) = exchange.import_file(fresh, tmp_path / "dag.json")[1]
    assert len(fresh.messages(chat.id)) == 400
    held = fresh.connection.execute("SELECT count(*) FROM messages WHERE chat_id = ?", (chat.id,)).fetchone()[0]
    assert held <= 400 + 2000


def _specchat_doc(store: Store, tmp_path: Path) -> dict:
    for i in range(2):
        chat = store.create_chat(f"chat {i}")
        store.add_message(chat.id, "user", "q")
        answer(store, chat.id, "a")
    exchange.export_json(store, exchange.chat_ids(store, None), tmp_path / "ok.json")
    return json.loads((tmp_path / "ok.json").read_text())


def _damaged(doc: dict, how: str) -> dict:
    second = doc["chats"][1]
    if how == "role":
        second["messages"][0]["role"] = "root"
    elif how == "stats":
        second["messages"][1]["stats"] = {"counts": "many"}
    elif how == "version-loop":
        second["versions"] = [{"key": 1, "message": 2, "number": 1, "content": "x"}]
        second["messages"][0]["in_version"] = 1  # message 1 in the tail of message 2's version
    elif how == "newer":
        doc["version"] = exchange.FORMAT_VERSION + 1
    elif how == "text":
        second["messages"][0]["content"] = {"not": "text"}
    elif how == "surrogate":
        second["messages"][0]["content"] = "\ud800"
    elif how == "keys":
        second["messages"][1]["key"] = 1
    return doc


@pytest.mark.parametrize("how, words", [
    ("role", "role must be one of"), ("stats", "stats"), ("version-loop", "tail of a later message"),
    ("newer", "newer SpecChat"), ("text", "content is not text"), ("surrogate", "not Unicode"),
    ("keys", "unique and increasing"),
])
def test_a_damaged_specchat_file_is_one_line_and_imports_nothing(store, fresh, tmp_path, how, words):
    doc = _damaged(_specchat_doc(store, tmp_path), how)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ExchangeError) as err:
        exchange.import_file(fresh, bad)
    assert words in str(err.value) and str(bad) in str(err.value) and "\n" not in str(err.value)
    assert fresh.list_chats() == []  # the first chat, which was fine, is not stored either


@pytest.mark.parametrize("content, words", [
    (b"not json", "not JSON"), (b"\xff\xfe\x00bad", "not UTF-8"), (b"[" * 5000 + b"]" * 5000, "nested deeper"),
    (b'{"format": "specchat-chats"}', "format version"), (b"[]", "not a SpecChat, ChatGPT"),
    (b'[{"mapping": {"n": {"children": 5}}}]', "children is not a list"), (b"{}", "not a SpecChat, ChatGPT"),
])
def test_a_hostile_file_is_one_line_and_imports_nothing(fresh, tmp_path, content, words):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(UserError) as err:
        exchange.import_file(fresh, bad)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert fresh.list_chats() == []


def test_a_file_past_the_size_cap_is_refused_before_it_is_parsed(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(exchange, "MAX_FILE_BYTES", 1000)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"format": "specchat-chats", "version": 1, "chats": [], "pad": "x" * 2000}))
    with pytest.raises(ExchangeError, match="larger than"):
        exchange.import_file(fresh, big)


def test_too_many_messages_are_refused(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(exchange, "MAX_MESSAGES", 3)
    with pytest.raises(ExchangeError, match="more than 3 messages"):
        exchange.import_file(fresh, CHATGPT)
    assert fresh.list_chats() == []


def test_export_to_a_folder_or_a_missing_chat_is_one_line(store, tmp_path):
    chat = store.create_chat("c")
    with pytest.raises(ExchangeError, match="a folder"):
        exchange.export_json(store, [chat.id], tmp_path)
    with pytest.raises(ExchangeError, match="no chat 999"):
        exchange.chat_ids(store, 999)
