"""The command line for chats: ``specchat chats list|export|import|backup``.

``export (--all | CHAT_ID) --format markdown|json --out PATH`` writes one chat or every chat (not those
in the trash); ``import FILE`` adds the chats of a SpecChat, ChatGPT or Open WebUI export as new chats,
all or none.  A file refused, a chat that is not there, a path that cannot be written: one line, exit 2
(a :class:`~specchat.store.exchange.ExchangeError`, a ``UserError``).  The app may be running: the
database is opened without touching answers it is streaming (``recover=False``), and every write is one
transaction.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specchat.errors import printable
from specchat.store import backup, exchange, open_store


def _chat_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a chat id: {printable(text, 40)} ('specchat chats list')") from None
    if value < 1:
        raise argparse.ArgumentTypeError("a chat id is a whole number from 1")
    return value


def add_parsers(sub: argparse._SubParsersAction) -> None:
    chats = sub.add_parser("chats", help="export, import and back up the chats")
    csub = chats.add_subparsers(dest="chats_command", required=True)
    lst = csub.add_parser("list", help="the chats, newest first, with their ids")
    lst.add_argument("--search", default="", help="only chats whose title or messages hold these words")
    export = csub.add_parser("export", help="write one chat or all of them to a file")
    which = export.add_mutually_exclusive_group(required=True)
    which.add_argument("chat", nargs="?", type=_chat_id, default=None, metavar="CHAT_ID")
    which.add_argument("--all", action="store_true", help="every chat (not those in the trash)")
    export.add_argument("--format", choices=("markdown", "json"), required=True,
                        help="markdown: to read; json: SpecChat's own, everything the store holds (imports back)")
    export.add_argument("--out", type=Path, required=True, metavar="PATH")
    export.add_argument("--no-reasoning", action="store_true", help="markdown: leave the reasoning out")
    imp = csub.add_parser("import", help="add the chats of a SpecChat, ChatGPT or Open WebUI export as new chats")
    imp.add_argument("file", type=Path, metavar="FILE")
    csub.add_parser("backup", help="back up the chat database now (kept beside it, backup_keep deep)")
    csub.add_parser("backups", help="list the backups, newest first")


def cmd_chats(args: argparse.Namespace) -> int:
    command = args.chats_command
    profile = args.profile
    if command == "backups":
        found = backup.list_backups(backup.backup_dir(profile.database))
        if not found:
            print("no backups yet: 'specchat chats backup'")
        for b in found:
            print(f"{b.when_text}  {b.reason:<10} {b.size / 1e6:8.1f} MB  {b.path}")
        return 0
    with open_store(profile.database, recover=False) as store:
        if command == "list":
            for chat in store.list_chats(args.search):
                print(f"{chat.id:>6}  {printable(chat.title, 80)}")
            return 0
        if command == "export":
            ids = exchange.chat_ids(store, None if args.all else args.chat)
            if args.format == "json":
                n = exchange.export_json(store, ids, args.out)
            else:
                n = exchange.export_markdown(store, ids, args.out, reasoning=not args.no_reasoning)
            print(f"exported {n} chat{'s' if n != 1 else ''} to {args.out}")
            return 0
        if command == "import":
            kind, chats = exchange.import_file(store, args.file)
            messages = sum(len(store.messages(c.id)) for c in chats)
            print(f"imported {len(chats)} chat{'s' if len(chats) != 1 else ''} ({messages} messages shown) "
                  f"from {'an' if kind[0] in 'AEIOU' else 'a'} {kind} export: {', '.join(printable(c.title, 40) for c in chats[:3])}"
                  + (", …" if len(chats) > 3 else ""))
            return 0
        if command == "backup":
            made = backup.make_backup(store.connection, profile.database, reason="manual",
                                      keep=int(args.config["backup_keep"]))
            print(f"backed up the chats to {made}")
            return 0
    raise AssertionError(command)
