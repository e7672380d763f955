"""Other apps' chat exports as SpecChat's JSON documents (:mod:`specchat.store.exchange` checks and
stores them).  Qt-free.

Both apps keep a conversation as a tree: every edit or regeneration is a new child of the message it
branched from, and the app shows one path through it.

- **ChatGPT** (Settings → Data controls → Export: ``conversations.json``): a list of conversations,
  each ``{"title", "create_time", "update_time", "mapping": {id: node}, "current_node"}``; a node is
  ``{"id", "message", "parent", "children"}``, its message ``{"author": {"role"}, "content":
  {"content_type", "parts" | "text" | "thoughts"}, "create_time", "metadata", "recipient"}``.
- **Open WebUI** (Settings → Chats → Export): a list of ``{"id", "title", "chat": {"history":
  {"messages": {id: message}, "currentId"}, "messages": [...]}, "created_at", "updated_at"}``; a
  message is ``{"id", "parentId", "childrenIds", "role", "content", "timestamp", "files"}``, its
  reasoning a ``<details type="reasoning">`` block at the start of the answer.

The shown path (to ``current_node`` / ``currentId``) becomes the chat.  The other branches become
versions where SpecChat has them: another answer to a question on the path (a regeneration) is a
version of that question with that answer and what followed it; another question after the same
message (an edit) is a version of the shown question with its text and what followed it.  A branch
inside a branch is followed along its newest child.  Tool calls, hidden system messages and empty
messages are left out.  A file whose text the export holds (Open WebUI's ``file.data.content``) is attached
with it; one without (ChatGPT's images and uploads) cannot be stored, as SpecChat keeps a file's text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_NODES = 1_000_000  # in one file: beyond exchange.MAX_MESSAGES anyway


@dataclass(slots=True)
class Node:
    """One message of a tree; ``role`` None for a node that is not shown (the root, a tool call)."""

    id: str
    parent: str | None
    children: list[str]
    role: str | None = None
    content: str = ""
    reasoning: str = ""  # a node with reasoning only (ChatGPT's "thoughts") hands it to the next answer
    created_at: float = 0.0
    attachments: list[dict[str, object]] = field(default_factory=list)


def kind_of(doc: object) -> str | None:
    """"chatgpt", "openwebui" or None, from the first conversation's keys."""
    items = doc if isinstance(doc, list) else [doc]
    first = next((x for x in items if isinstance(x, dict)), None)
    if first is None:
        return None
    if isinstance(first.get("mapping"), dict):
        return "chatgpt"
    chat = first.get("chat")
    if isinstance(chat, dict) and (isinstance(chat.get("history"), dict) or isinstance(chat.get("messages"), list)):
        return "openwebui"
    return None


def _conversations(doc: object) -> list[object]:
    items = doc if isinstance(doc, list) else [doc]
    if len(items) > MAX_NODES:
        raise ValueError(f"more than {MAX_NODES} conversations")
    return items


# -- ChatGPT -------------------------------------------------------------------------------------------


def chatgpt_chats(doc: object) -> list[dict[str, Any]]:
    chats = []
    total = 0
    for i, conv in enumerate(_conversations(doc)):
        where = f"conversation {i + 1}"
        if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
            raise ValueError(f"{where} has no 'mapping' of messages")
        mapping = conv["mapping"]
        total += len(mapping)
        if total > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} messages")
        nodes = {}
        for key, raw in mapping.items():
            if not isinstance(raw, dict):
                raise ValueError(f"{where}: node {str(key)[:40]} is not an object")
            nodes[str(key)] = _chatgpt_node(str(key), raw, where)
        current = conv.get("current_node")
        if len(nodes) > 1 and all(n.parent is None and not n.children for n in nodes.values()):
            current = _chained(nodes)  # no tree at all (a hand-made or trimmed export): the messages in time order
        chats.append(tree_chat(_title(conv.get("title")), _seconds(conv.get("create_time")),
                               _seconds(conv.get("update_time")), nodes,
                               current if isinstance(current, str) else None))
    return chats


def _chatgpt_node(key: str, raw: Mapping[str, Any], where: str) -> Node:
    node = Node(key, _id(raw.get("parent")), _ids(raw.get("children"), where))
    message = raw.get("message")
    if not isinstance(message, dict):
        return node
    author = message.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    metadata: dict[str, Any] = message["metadata"] if isinstance(message.get("metadata"), dict) else {}
    if metadata.get("is_visually_hidden_from_conversation") or role not in ("user", "assistant", "system"):
        return node  # tool output, hidden context: not what the conversation showed
    recipient = message.get("recipient")
    if role == "assistant" and isinstance(recipient, str) and recipient not in ("all", ""):
        return node  # a call to a tool, not an answer
    content: dict[str, Any] = message["content"] if isinstance(message.get("content"), dict) else {}
    kind = content.get("content_type")
    text: list[str] = []
    if kind == "thoughts":
        thoughts: list[Any] = content["thoughts"] if isinstance(content.get("thoughts"), list) else []
        node.reasoning = "\n\n".join(str(t.get("content", "")) for t in thoughts if isinstance(t, dict)).strip()
        node.created_at = _seconds(message.get("create_time"))
        return node  # role stays None: the reasoning goes to the next answer
    if isinstance(content.get("parts"), list):
        for part in content["parts"]:
            if isinstance(part, str):
                text.append(part)
            elif isinstance(part, dict):
                name = part.get("name") or part.get("asset_pointer") or part.get("content_type") or "attachment"
                node.attachments.append({"name": str(name)[:300]})
    elif isinstance(content.get("text"), str):  # "code", "execution_output", ...
        text.append(content["text"])
    for a in metadata.get("attachments", []) if isinstance(metadata.get("attachments"), list) else []:
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            node.attachments.append({"name": a["name"][:300]})
    node.content = "\n".join(t for t in text if t)
    if not node.content.strip() and not node.attachments:
        return node  # an empty placeholder (the root's system message, an answer that never came)
    node.role = role
    node.created_at = _seconds(message.get("create_time"))
    return node


def _chained(nodes: Mapping[str, Node]) -> str:
    """Link nodes that say nothing of each other one after another, by time (ties: as listed); the last."""
    order = sorted(nodes.values(), key=lambda n: n.created_at)
    for before, after in zip(order, order[1:], strict=False):
        before.children.append(after.id)
        after.parent = before.id
    return order[-1].id


# -- Open WebUI ------------------------------------------------------------------------------------------

_REASONING = re.compile(r'\A\s*<details\s+type="reasoning"[^>]*>\s*(?:<summary>.*?</summary>)?(.*?)</details>\s*',
                        re.DOTALL)


def openwebui_chats(doc: object) -> list[dict[str, Any]]:
    chats = []
    total = 0
    for i, item in enumerate(_conversations(doc)):
        where = f"chat {i + 1}"
        if not isinstance(item, dict) or not isinstance(item.get("chat"), dict):
            raise ValueError(f"{where} has no 'chat'")
        chat = item["chat"]
        history = chat.get("history")
        raw_messages = history.get("messages") if isinstance(history, dict) else None
        nodes: dict[str, Node] = {}
        current = None
        if isinstance(raw_messages, dict) and raw_messages:
            for key, raw in raw_messages.items():
                if not isinstance(raw, dict):
                    raise ValueError(f"{where}: message {str(key)[:40]} is not an object")
                nodes[str(key)] = _openwebui_node(str(key), raw, _id(raw.get("parentId")),
                                                  _ids(raw.get("childrenIds"), where))
            current = history.get("currentId") if isinstance(history, dict) else None
        elif isinstance(chat.get("messages"), list):  # no tree: the list as shown
            previous = None
            for j, raw in enumerate(chat["messages"]):
                if not isinstance(raw, dict):
                    raise ValueError(f"{where}: message {j + 1} is not an object")
                key = f"#{j}"
                nodes[key] = _openwebui_node(key, raw, previous, [])
                if previous is not None:
                    nodes[previous].children.append(key)
                previous = key
            current = previous
        total += len(nodes)
        if total > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} messages")
        created = _seconds(item.get("created_at", chat.get("timestamp")))
        chats.append(tree_chat(_title(item.get("title", chat.get("title"))), created,
                               _seconds(item.get("updated_at")) or created, nodes,
                               current if isinstance(current, str) else None))
    return chats


def _openwebui_node(key: str, raw: Mapping[str, Any], parent: str | None, children: list[str]) -> Node:
    node = Node(key, parent, children)
    role = raw.get("role")
    content = raw.get("content")
    if role not in ("user", "assistant", "system") or not isinstance(content, str):
        return node
    match = _REASONING.match(content) if role == "assistant" else None
    if match:
        node.reasoning = "\n".join(line[1:].lstrip() if line.startswith(">") else line
                                   for line in match.group(1).strip().split("\n"))
        content = content[match.end():]
    node.content = content
    for f in raw.get("files", []) if isinstance(raw.get("files"), list) else []:
        if isinstance(f, dict):
            inner: dict[str, Any] = f["file"] if isinstance(f.get("file"), dict) else {}
            name = f.get("name") or inner.get("filename") or f.get("url") or "attachment"
            record: dict[str, object] = {"name": str(name)[:300]}
            data: dict[str, Any] = inner["data"] if isinstance(inner.get("data"), dict) else {}
            if isinstance(data.get("content"), str):  # the text Open WebUI extracted: what its model read
                record["text"] = data["content"]
            meta: dict[str, Any] = inner["meta"] if isinstance(inner.get("meta"), dict) else {}
            if isinstance(meta.get("content_type"), str):
                record["mime"] = meta["content_type"]
            node.attachments.append(record)
    if not content.strip() and not node.reasoning and not node.attachments:
        return node
    node.role = role
    node.created_at = _seconds(raw.get("timestamp"))
    return node


# -- a tree as a SpecChat chat -------------------------------------------------------------------------


def tree_chat(title: str, created: float, updated: float, nodes: Mapping[str, Node],
              current: str | None) -> dict[str, Any]:
    """A SpecChat JSON chat: the path to ``current`` shown, the branches off it as versions."""
    path = _shown_path(nodes, current)
    messages: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    key_of: dict[str, int] = {}

    def add(chain: Iterable[Node], in_version: int | None) -> list[int]:
        keys = []
        reasoning = ""
        for node in chain:
            if node.role is None:
                reasoning = "\n\n".join(x for x in (reasoning, node.reasoning) if x)
                continue
            key = len(messages) + 1
            doc: dict[str, Any] = {"key": key, "role": node.role, "content": node.content,
                                   "created_at": node.created_at, "attachments": node.attachments}
            merged = "\n\n".join(x for x in (reasoning, node.reasoning) if x) if node.role == "assistant" else ""
            if merged:
                doc["reasoning"] = merged
            if node.role == "assistant":
                doc["state"] = "done"
                reasoning = ""
            if in_version is not None:
                doc["in_version"] = in_version
            messages.append(doc)
            key_of[node.id] = key
            keys.append(key)
        return keys

    add((nodes[i] for i in path), None)
    used = set(path)  # a node becomes one message at most (an export whose "tree" shares nodes is cut there)
    owners: dict[int, list[tuple[str, list[Node]]]] = {}  # message key -> (version text, tail) per branch
    for i, node_id in enumerate(path[:-1]):
        here, following = nodes[node_id], path[i + 1]
        for sibling in here.children:
            if sibling == following or sibling in used or sibling not in nodes:
                continue
            branch = nodes[sibling]
            nxt = nodes[following]
            if nxt.role == "user" and branch.role == "user" and following in key_of:
                # an edit: another text of the question shown next, with what followed it
                chain = _newest_chain(nodes, branch.id, used)
                owners.setdefault(key_of[following], []).append((branch.content, chain[1:]))
            elif here.role == "user" and node_id in key_of:
                # a regeneration: another answer to this question
                chain = _newest_chain(nodes, branch.id, used)
                owners.setdefault(key_of[node_id], []).append((here.content, chain))
            else:
                continue
            used.update(n.id for n in chain)
    for owner, branches in owners.items():
        for number, (text, tail) in enumerate(branches, start=1):
            vkey = len(versions) + 1
            versions.append({"key": vkey, "message": owner, "number": number, "content": text,
                             "created_at": tail[0].created_at if tail else 0.0})
            add(tail, vkey)
        messages[owner - 1]["version"] = len(branches) + 1
    return {"title": title, "created_at": created, "updated_at": max(updated, created), "settings": {},
            "messages": messages, "versions": versions}


def _shown_path(nodes: Mapping[str, Node], current: str | None) -> list[str]:
    """The ids from the root to ``current`` (the newest leaf when it is missing); a cycle is cut."""
    if current not in nodes:
        roots = [n.id for n in nodes.values() if n.parent is None or n.parent not in nodes]
        if not roots:
            return []
        current = _newest_chain(nodes, roots[-1])[-1].id if _newest_chain(nodes, roots[-1]) else roots[-1]
    path: list[str] = []
    seen: set[str] = set()
    at: str | None = current
    while at is not None and at in nodes and at not in seen:
        seen.add(at)
        path.append(at)
        at = nodes[at].parent
    return path[::-1]


def _newest_chain(nodes: Mapping[str, Node], start: str, used: set[str] | frozenset[str] = frozenset()) -> list[Node]:
    """``start`` and below it the newest (last) child at each step, up to a node already ``used``; a cycle
    is cut."""
    chain: list[Node] = []
    seen: set[str] = set()
    at: str | None = start
    while at is not None and at in nodes and at not in seen and at not in used:
        seen.add(at)
        chain.append(nodes[at])
        kids = [c for c in nodes[at].children if c in nodes]
        at = kids[-1] if kids else None
    return chain


def _id(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _ids(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: children is not a list")
    return [v for v in value if isinstance(v, str)]


def _title(value: object) -> str:
    return value if isinstance(value, str) and value.strip() else "Imported chat"


def _seconds(value: object) -> float:
    """A time in seconds since the epoch (Open WebUI's are whole seconds, ChatGPT's fractional); 0 unknown;
    milliseconds are taken for what they are."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        return 0.0
    value = float(value)
    if value > 1e11:  # milliseconds (or nanoseconds): what some exports write
        value /= 1000.0 if value < 1e14 else 1e9
    return value if value < 1e11 else 0.0
