"""The catalog: curated target/draft pairs shipped with the app, plus the user's own.

The shipped list lives in ``catalog.toml`` beside this module; users add pairs
and single models to ``catalog.toml`` in their profile's config dir
(``Profile.user_catalog``; same schema, written by ``specchat models add``).  Entries only
name files on the hub; whether a draft really serves a target is proven from the GGUF
headers before download.

The user's file comes from outside, so every value read from it is checked for type and
form, with one line naming the file and the entry: hub references by
:mod:`specchat.models.hub_names` (no absolute path, ``..``, backslash or empty part can
reach the hub cache), ids as ``[A-Za-z0-9._-]{1,64}``, names and notes as one line of
printable text.  ``models list`` shows the shipped pairs even when the user's file is
damaged (:func:`load_catalog_lenient`, one warning line per problem); ``models add``
writes under the file's lock (read-modify-write, so two concurrent adds both land),
atomically, and moves a damaged file aside (``catalog.toml.corrupt-<time>``) instead of
overwriting it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specchat import toml_doc
from specchat.errors import UserError

from .hub_names import HubNameError, check_filename, check_repo_id

if TYPE_CHECKING:
    from .hub import HubFile

_PAIR_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_TASK = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
NAME_MAX = 200  # characters of a pair's name
NOTE_MAX = 500  # of a licence or gated note
DRAFT_MAX_RANGE = (1, 64)
MAX_FILE_BYTES = 1 << 50  # a model file's size: 1 PiB, far past any GGUF
# llama-server's --spec-type values a catalog pair may name: its drafter is a trained head that only the
# llama-server SpecChat starts can draft with (models/drafter_heads.py says which from the header)
SPEC_TYPES = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")


class CatalogError(UserError, ValueError):
    pass


def _shown(text: str) -> str:
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


def check_pair_id(pair_id: str) -> str:
    if not _PAIR_ID.fullmatch(pair_id):
        raise CatalogError(f"{_shown(pair_id)} is not a pair id (1 to 64 letters, digits, '.', '_' or '-')")
    return pair_id


def check_line(text: str, what: str, limit: int = NAME_MAX) -> str:
    """One line of printable text (no newline or other control character), at most ``limit`` long."""
    if not text.isprintable() or len(text) > limit:
        raise CatalogError(f"{what} must be one line of printable text, at most {limit} characters "
                           f"(got {_shown(text)})")
    return text


def check_task(task: str) -> str:
    if not _TASK.fullmatch(task):
        raise CatalogError(f"{_shown(task)} is not a task tag (a word such as chat or code, at most 32 characters)")
    return task


@dataclass(frozen=True, slots=True)
class CatalogModel:
    repo: str
    file: str
    size: int | None = None
    sha256: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.repo}/{self.file}"

    def hub_file(self) -> HubFile:
        from .hub import HubFile

        return HubFile(self.repo, self.file, sha256=self.sha256, size=self.size)

    @classmethod
    def parse(cls, ref: str) -> CatalogModel:
        """'owner/repo/file.gguf' or 'owner/repo:file.gguf', checked as the hub's names.

        A local path (absolute, ``~``, ``..``, a backslash) or an empty part is refused with
        one line: it must never reach the hub cache as if it were a file in a repo.
        """
        expected = f"{_shown(ref)}: expected owner/repo/file.gguf (a file on the hub)"
        if not ref or "\\" in ref or ref.startswith(("/", "~")) or not ref.isprintable():
            raise CatalogError(expected)
        if ":" in ref:
            repo, file = ref.split(":", 1)
        else:
            parts = ref.split("/")
            if len(parts) < 3:
                raise CatalogError(expected)
            repo, file = "/".join(parts[:2]), "/".join(parts[2:])
        if not file.endswith(".gguf"):
            raise CatalogError(expected)
        try:
            check_repo_id(repo)
            check_filename(file)
        except HubNameError as exc:
            raise CatalogError(f"{expected}: {exc}") from None
        return cls(repo, file)


@dataclass(frozen=True, slots=True)
class CatalogPair:
    id: str
    name: str
    target: CatalogModel
    drafts: tuple[CatalogModel, ...]
    licence: str = ""
    gated: str = ""
    task: str = "chat"
    draft_max: int = 8
    user: bool = False
    spec_type: str = ""  # "": SpecChat's own loop drafts; else the trained head's --spec-type (llama-server)
    hardware: str = ""  # what the pair needs, as its model cards say
    published: str = ""  # the speed-up others measured, and on what

    @property
    def trained_head(self) -> bool:
        """Its drafter is a trained head (MTP, EAGLE-3, DFlash, DSpark): it runs in SpecChat's llama-server."""
        return bool(self.spec_type)

    @property
    def size(self) -> int:
        return sum(m.size or 0 for m in (self.target, *self.drafts[:1]))

    def files(self, draft_index: int = 0) -> tuple[CatalogModel, ...]:
        """The target and one of the drafts (none for a single model): what 'pull' downloads."""
        return (self.target, *self.drafts[draft_index:draft_index + 1])


# --- reading: every value type-checked, one line naming the file and the entry ----------------------


def _text(raw: dict, key: str, default: str, at: str, check=None) -> str:  # noqa: ANN001 (a checker)
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise CatalogError(f"{at}: '{key}' must be text (got {_shown(repr(value))})")
    try:
        return check(value) if check is not None else value
    except CatalogError as exc:
        raise CatalogError(f"{at}: '{key}': {exc}") from None


def _model(raw: object, at: str) -> CatalogModel:
    if not isinstance(raw, dict) or not isinstance(raw.get("repo"), str) or not isinstance(raw.get("file"), str):
        raise CatalogError(f"{at}: a model needs 'repo' and 'file' as text")
    repo, file = raw["repo"], raw["file"]
    try:
        check_repo_id(repo)
        check_filename(file)
    except HubNameError as exc:
        raise CatalogError(f"{at}: {exc}") from None
    size, sha = raw.get("size"), raw.get("sha256")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES):
        raise CatalogError(f"{at}: 'size' of {file} must be a number of bytes up to 1 PiB (got {_shown(repr(size))})")
    if sha is not None and (not isinstance(sha, str) or not _SHA256.fullmatch(sha)):
        raise CatalogError(f"{at}: 'sha256' of {file} must be 64 hex digits (got {_shown(repr(sha))})")
    return CatalogModel(repo, file, size, sha)


def _draft_max(raw: dict, at: str) -> int:
    value = raw.get("draft_max", 8)
    lo, hi = DRAFT_MAX_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CatalogError(f"{at}: 'draft_max' must be a whole number from {lo} to {hi} (got {_shown(repr(value))})")
    return value


def _pair(raw: dict, at: str, user: bool) -> CatalogPair:
    if "id" not in raw:
        raise CatalogError(f"{at}: missing 'id'")
    pair_id = _text(raw, "id", "", at, check_pair_id)
    at = f"{at} ('{pair_id}')"
    drafts = raw.get("drafts", [])
    if not isinstance(drafts, list):
        raise CatalogError(f"{at}: 'drafts' must be a list of models")
    return CatalogPair(
        id=pair_id,
        name=_text(raw, "name", pair_id, at, lambda s: check_line(s, "the name")),
        target=_model(raw.get("target"), f"{at} target"),
        drafts=tuple(_model(d, f"{at} draft #{j + 1}") for j, d in enumerate(drafts)),
        licence=_text(raw, "licence", "", at, lambda s: check_line(s, "the licence", NOTE_MAX)),
        gated=_text(raw, "gated", "", at, lambda s: check_line(s, "the note", NOTE_MAX)),
        task=_text(raw, "task", "chat", at, check_task),
        draft_max=_draft_max(raw, at),
        user=user,
        spec_type=_text(raw, "spec_type", "", at, _check_spec_type),
        hardware=_text(raw, "hardware", "", at, lambda s: check_line(s, "the hardware note", NOTE_MAX)),
        published=_text(raw, "published", "", at, lambda s: check_line(s, "the published speed-up", NOTE_MAX)),
    )


def _check_spec_type(value: str) -> str:
    if value and value not in SPEC_TYPES:
        raise CatalogError(f"{_shown(value)} is not one of {', '.join(SPEC_TYPES)}")
    return value


def _single(raw: dict, at: str, user: bool) -> CatalogPair:
    """A single model: a "pair" without drafts."""
    m = _model(raw, at)
    pair_id = _text(raw, "id", Path(m.file).stem[:64], at, check_pair_id)
    at = f"{at} ('{pair_id}')"
    return CatalogPair(id=pair_id, name=_text(raw, "name", m.file[:NAME_MAX], at, lambda s: check_line(s, "the name")),
                       target=m, drafts=(), task=_text(raw, "task", "chat", at, check_task), user=user)


def _entries(doc: dict, where: str, user: bool) -> tuple[list[CatalogPair], list[str]]:
    """Every entry that reads, and one line for each that does not."""
    pairs: list[CatalogPair] = []
    problems: list[str] = []
    for key, make in (("pair", _pair), ("model", _single)):
        items = doc.get(key, [])
        if not isinstance(items, list):
            problems.append(f"{where}: '{key}' must be a list of tables ([[{key}]])")
            continue
        for i, raw in enumerate(items):
            at = f"{where} {key} #{i + 1}"
            try:
                if not isinstance(raw, dict):
                    raise CatalogError(f"{at}: must be a table ([[{key}]])")
                pairs.append(make(raw, at, user))
            except CatalogError as exc:
                problems.append(str(exc))
    return pairs, problems


def _parse(doc: dict, where: str, user: bool) -> list[CatalogPair]:
    pairs, problems = _entries(doc, where, user)
    if problems:
        raise CatalogError(problems[0])
    return pairs


def user_catalog_path() -> Path:
    from specchat.profile import Profile

    return Profile.default().user_catalog


def _read_toml(path: Path) -> dict:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from None
    try:
        return toml_doc.loads(text)  # nesting bounded; every failure of the parser is a ValueError
    except ValueError as exc:
        raise CatalogError(f"{path}: not valid TOML ({' '.join(str(exc).split())})") from None


def _shipped() -> list[CatalogPair]:
    text = resources.files(__package__).joinpath("catalog.toml").read_text(encoding="utf-8")
    return _parse(toml_doc.loads(text), "shipped catalog", user=False)


def _merge(shipped: list[CatalogPair], mine: list[CatalogPair]) -> list[CatalogPair]:
    ids = {p.id for p in mine}
    return [p for p in shipped if p.id not in ids] + mine


def load_catalog(user_file: Path | None = None) -> list[CatalogPair]:
    """The shipped pairs and the user's (``user_file``, default the default profile's); a user pair
    with a shipped id replaces it.  CatalogError (one line naming the file and the entry) for a
    damaged file or the first bad entry."""
    user_file = user_file or user_catalog_path()
    mine = _parse(_read_toml(user_file), str(user_file), user=True) if user_file.exists() else []
    return _merge(_shipped(), mine)


def load_catalog_lenient(user_file: Path | None = None) -> tuple[list[CatalogPair], list[str]]:
    """Like :func:`load_catalog`, but a damaged user file or a bad entry does not hide the rest:
    returns the pairs that read and one line per problem (for a listing that warns and goes on)."""
    user_file = user_file or user_catalog_path()
    if not user_file.exists():
        return _shipped(), []
    try:
        doc = _read_toml(user_file)
    except CatalogError as exc:
        return _shipped(), [str(exc)]
    mine, problems = _entries(doc, str(user_file), user=True)
    return _merge(_shipped(), mine), problems


def find_pair(pair_id: str, pairs: list[CatalogPair]) -> CatalogPair:
    for p in pairs:
        if p.id == pair_id:
            return p
    raise CatalogError(f"no pair {_shown(pair_id)} in the catalog (see 'specchat models list')")


# --- writing --------------------------------------------------------------------------------------


def toml_string(s: str) -> str:
    """``s`` as a TOML basic string: quote, backslash and every character that is not printable escaped
    (:func:`specchat.toml_doc.string`)."""
    return toml_doc.string(s)


def _entry_toml(pair_id: str, target: CatalogModel, drafts: list[CatalogModel], name: str, task: str) -> str:
    def model(m: CatalogModel) -> str:
        return f"{{ repo = {toml_string(m.repo)}, file = {toml_string(m.file)} }}"

    lines = ["[[pair]]" if drafts else "[[model]]", f"id = {toml_string(pair_id)}",
             f"name = {toml_string(name)}", f"task = {toml_string(task)}"]
    if drafts:
        lines.append(f"target = {model(target)}")
        lines.append("drafts = [" + ", ".join(model(d) for d in drafts) + "]")
    else:
        lines += [f"repo = {toml_string(target.repo)}", f"file = {toml_string(target.file)}"]
    return "\n".join(lines) + "\n"


def _current_text(user_file: Path) -> tuple[str, Path | None]:
    """The user file's text to append to, and where a damaged one was moved (then the text is "")."""
    from specchat.files import move_aside

    if not user_file.exists():
        return "", None
    try:
        text = user_file.read_bytes().decode("utf-8-sig")
        toml_doc.loads(text)
    except ValueError:  # not UTF-8, not TOML, nested too deep
        try:
            return "", move_aside(user_file)
        except OSError as exc:
            raise CatalogError(f"{user_file} is damaged and cannot be moved aside ({exc.strerror or exc})") from None
    except OSError as exc:
        raise CatalogError(f"{user_file}: cannot read ({exc.strerror or exc})") from None
    return text, None


def add_user_pair(pair_id: str, target: CatalogModel, drafts: list[CatalogModel], *, name: str = "",
                  task: str = "chat", user_file: Path | None = None) -> tuple[Path, Path | None]:
    """Append a pair (or, without drafts, a single model) to the user's catalog file.

    Under the file's lock (two concurrent adds both land), written atomically.  A file
    that is not valid UTF-8 or TOML is moved aside first, never overwritten.  Returns the
    file and where a damaged one went (None when it was fine).  CatalogError (one line)
    for a bad id, name or task, an id already in the file, or a write that fails.
    """
    from specchat.files import locked, write_text_atomically

    check_pair_id(pair_id)
    check_line(name, "the name")
    check_task(task)
    user_file = user_file or user_catalog_path()
    entry = _entry_toml(pair_id, target, drafts, name or pair_id, task)
    with locked(user_file):
        old, moved = _current_text(user_file)
        mine, _problems = _entries(toml_doc.loads(old), str(user_file), user=True)
        if any(p.id == pair_id for p in mine):
            raise CatalogError(f"'{pair_id}' is already in {user_file}")
        text = old + ("" if not old or old.endswith("\n") else "\n") + ("\n" if old else "") + entry
        _check_reads_back(text, user_file, pair_id, name or pair_id)
        try:
            write_text_atomically(user_file, text)
        except OSError as exc:
            raise CatalogError(f"{user_file}: cannot write ({exc.strerror or exc})") from None
    return user_file, moved


def _check_reads_back(text: str, user_file: Path, pair_id: str, name: str) -> None:
    """What is about to be written must parse, with the new entry in it exactly as given."""
    try:
        mine, _problems = _entries(toml_doc.loads(text), str(user_file), user=True)
    except ValueError as exc:
        raise CatalogError(f"{user_file}: cannot add to it without breaking it ({' '.join(str(exc).split())}); "
                           "fix it or move it aside") from None
    if [(p.id, p.name) for p in mine if p.id == pair_id] != [(pair_id, name)]:
        raise CatalogError(f"{user_file}: cannot add '{pair_id}' to it so that it reads back; fix it or move it aside")
