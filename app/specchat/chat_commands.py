"""The commands a user gives a chat, Qt-free: the model behind the chat pane, the chat list and the menus.

The widgets call these and show what comes back; the order of the writes lives here.  A command either
stores what it must or raises :class:`~specchat.store.StoreWriteError` (one line: the disk full, the
file made read-only, another process holding the lock past the busy timeout) with nothing the user
sees changed, so the widget keeps what is on the screen: the question stays in the composer, the undo
offer in its bar, the edit in its box, and the user can try again.

    commands = ChatCommands(store)
    try:
        sent = commands.send(chat_id, composer_text)
    except StoreWriteError as exc:
        show(str(exc))            # the composer still holds the text
    else:
        composer.clear()          # only now: the question is stored
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specchat.context_policy import ContextPolicy
from specchat.presets import Preset
from specchat.store import Chat, ChatSettings, Message, NewAttachment, Store, StoreError, backup, exchange

NEW_CHAT = "New chat"  # a chat's title until its first question names it
TITLE_CHARS = 60


@dataclass(frozen=True, slots=True)
class Sent:
    """A stored question, and whether the chat took its first line as its title."""

    message: Message
    retitled: bool


class ChatCommands:
    """Send, regenerate, edit, page versions, new, delete and undo, rename, change settings: each one
    transaction of the store, or the question stored first where a command writes twice."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def send(self, chat_id: int, text: str, files: Sequence[NewAttachment] = ()) -> Sent:
        """Store a question (``text``, stripped) with its files (``files``: the question and its files in
        one transaction; a file past the store's caps is ValueError with nothing stored).  Never empty: a
        question needs text or a file.  A chat still called "New chat" takes the question's first line
        (or its first file's name) as its title, after the question is stored: a title that cannot be
        written costs the title, never the question."""
        text = text.strip()
        if not text and not files:
            raise ValueError("an empty question")
        retitle = self.store.get_chat(chat_id).title == NEW_CHAT
        message = self.store.add_message(chat_id, "user", text, attachments=files)
        if retitle:
            try:
                self.store.rename_chat(chat_id, (text.splitlines()[0] if text else files[0].name)[:TITLE_CHARS])
            except StoreError:  # the question is stored; the title is named at the next send
                retitle = False
        return Sent(message, retitle)

    def last_question(self, chat_id: int) -> Message | None:
        return next((m for m in reversed(self.store.messages(chat_id)) if m.role == "user"), None)

    def regenerate(self, chat_id: int) -> Message | None:
        """A new version of the last question, to be answered again (None: the chat has no question)."""
        last = self.last_question(chat_id)
        return None if last is None else self.store.new_version(last.id)

    def edit(self, message_id: int, text: str) -> Message:
        """Save & resend: the old text and what followed it become a version; ``text`` is answered."""
        text = text.strip()
        if not text:
            raise ValueError("an empty question")
        return self.store.edit_message(message_id, text)

    def show_version(self, message_id: int, number: int) -> Message:
        return self.store.show_version(message_id, number)

    def new_chat(self, settings: ChatSettings) -> Chat:
        return self.store.create_chat(NEW_CHAT, settings)

    def delete(self, chat_id: int) -> Chat:
        """To the trash (whole, restorable until the next start purges it)."""
        return self.store.trash_chat(chat_id)

    def undo_delete(self, chat_id: int) -> Chat:
        return self.store.restore_chat(chat_id)

    def rename(self, chat_id: int, title: str) -> Chat | None:
        """None where ``title`` is blank (nothing to do)."""
        return self.store.rename_chat(chat_id, title.strip()) if title.strip() else None

    def update_settings(self, chat_id: int, settings: ChatSettings) -> Chat:
        settings.validate()
        return self.store.update_settings(chat_id, settings)

    def set_context_policy(self, chat_id: int, policy: ContextPolicy | str) -> Chat:
        """The chat's "Past the context" from its next answer on (the remedy the context error offers);
        ValueError (one line) for a policy there is no such."""
        chosen = ContextPolicy(policy)
        return self.update_settings(chat_id, self.store.get_chat(chat_id).settings.replaced(context_policy=chosen.value))

    def apply_preset(self, chat_id: int, preset: Preset) -> Chat:
        """The chat takes the preset's settings from its next answer on, keeping its models and backend."""
        return self.update_settings(chat_id, preset.apply(self.store.get_chat(chat_id).settings))

    def new_chat_with(self, settings: ChatSettings, preset: Preset | None) -> Chat:
        """A new chat on ``settings`` (the pair in use), with ``preset``'s settings over them."""
        return self.new_chat(preset.apply(settings) if preset is not None else settings)

    # -- files: export, import, backups (issue 36); every refusal one UserError line -------------------

    def export(self, chat_id: int | None, path: Path, fmt: str, *, reasoning: bool = True) -> str:
        """Write one chat (``chat_id``) or every chat (None) to ``path``, as ``fmt`` ("markdown" or "json");
        the line that says where it went (ExchangeError, one line, where it could not)."""
        ids = exchange.chat_ids(self.store, chat_id)
        if fmt == "json":
            n = exchange.export_json(self.store, ids, path)
        else:
            n = exchange.export_markdown(self.store, ids, path, reasoning=reasoning)
        what = f"“{self.store.get_chat(ids[0]).title}”" if chat_id is not None else f"{n} chat{'s' if n != 1 else ''}"
        return f"exported {what} to {path}"

    def import_file(self, path: Path) -> tuple[list[Chat], str]:
        """Add the chats of a SpecChat, ChatGPT or Open WebUI export as new chats, all or none; (the new
        chats, the line that says so).  :func:`read_import` then :meth:`store_import` is the same in two
        steps, the first on any thread."""
        return self.store_import(read_import(path), path)

    def store_import(self, read: tuple[str, list[exchange.ImportedChat]], path: Path) -> tuple[list[Chat], str]:
        kind, found = read
        chats = exchange.import_chats(self.store, found)
        article = "an" if kind[0] in "AEIOU" else "a"
        return chats, f"imported {len(chats)} chat{'s' if len(chats) != 1 else ''} from {article} {kind} export ({path})"

    def database(self) -> Path:
        """The file the store is open on."""
        row = self.store.connection.execute("PRAGMA database_list").fetchone()
        return Path(row[2])

    def backups(self) -> list[backup.Backup]:
        return backup.list_backups(backup.backup_dir(self.database()))

    def back_up(self, *, reason: str = "manual", keep: int = backup.DEFAULT_KEEP) -> Path:
        return backup.make_backup(self.store.connection, self.database(), reason=reason, keep=keep)

    def restore(self, chosen: Path, *, keep: int = backup.DEFAULT_KEEP) -> str:
        """Put the backup ``chosen`` back (what it replaces is backed up first); the line that says so."""
        from specchat.store.db import migrate

        saved = backup.restore(self.store.connection, self.database(), chosen, keep=keep, after=migrate)
        return f"restored the chats from {chosen.name}; what they were is kept as {saved.name}"


def read_import(path: Path) -> tuple[str, list[exchange.ImportedChat]]:
    """Read and check an export file whole (no store: a task runner's thread may): (its format, its chats)."""
    return exchange.read_file(path)


def export_from(database: Path, chat_id: int | None, path: Path, fmt: str, *, reasoning: bool = True) -> str:
    """:meth:`ChatCommands.export` on a connection of its own to ``database`` (a task runner's thread may):
    WAL gives it one consistent snapshot while the window writes."""
    from specchat.store import open_store

    with open_store(database, recover=False) as store:
        return ChatCommands(store).export(chat_id, path, fmt, reasoning=reasoning)
