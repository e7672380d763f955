"""The catalog: curated target/draft pairs shipped with the app, plus the user's own.

The shipped list lives in ``catalog.toml`` beside this module; users add pairs
and single models to ``catalog.toml`` in their profile's config dir
(``Profile.user_catalog``; same schema, written by ``specchat models add``).  Entries only name files on the hub; whether a
draft really serves a target is proven from the GGUF headers before download.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specchat.errors import UserError


class CatalogError(UserError, ValueError):
    pass


@dataclass(frozen=True, slots=True)
class CatalogModel:
    repo: str
    file: str
    size: int | None = None
    sha256: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.repo}/{self.file}"

    def hub_file(self):
        from .hub import HubFile

        return HubFile(self.repo, self.file, sha256=self.sha256, size=self.size)

    @classmethod
    def parse(cls, ref: str) -> CatalogModel:
        """'owner/repo/file.gguf' or 'owner/repo:file.gguf'."""
        if ":" in ref:
            repo, file = ref.split(":", 1)
        else:
            parts = ref.split("/")
            if len(parts) < 3:
                raise CatalogError(f"'{ref}': expected owner/repo/file.gguf")
            repo, file = "/".join(parts[:2]), "/".join(parts[2:])
        if not file.endswith(".gguf") or repo.count("/") != 1:
            raise CatalogError(f"'{ref}': expected owner/repo/file.gguf")
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

    @property
    def size(self) -> int:
        return sum(m.size or 0 for m in (self.target, *self.drafts[:1]))

    def files(self, draft_index: int = 0) -> tuple[CatalogModel, ...]:
        """The target and one of the drafts (none for a single model): what 'pull' downloads."""
        return (self.target, *self.drafts[draft_index:draft_index + 1])


def _model(raw: object, where: str) -> CatalogModel:
    if not isinstance(raw, dict) or not isinstance(raw.get("repo"), str) or not isinstance(raw.get("file"), str):
        raise CatalogError(f"{where}: a model needs 'repo' and 'file'")
    size, sha = raw.get("size"), raw.get("sha256")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise CatalogError(f"{where}: 'size' must be a number of bytes")
    if sha is not None and not isinstance(sha, str):
        raise CatalogError(f"{where}: 'sha256' must be text")
    return CatalogModel(raw["repo"], raw["file"], size, sha)


def _tables(doc: dict, key: str, where: str) -> list[dict]:
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise CatalogError(f"{where}: '{key}' must be a list of tables ([[{key}]])")
    return items


def _parse(doc: dict, where: str, user: bool) -> list[CatalogPair]:
    pairs = []
    for i, raw in enumerate(_tables(doc, "pair", where)):
        at = f"{where} pair #{i + 1}"
        try:
            drafts = raw.get("drafts", [])
            if not isinstance(drafts, list):
                raise CatalogError(f"{at}: 'drafts' must be a list")
            pairs.append(CatalogPair(
                id=str(raw["id"]), name=str(raw.get("name", raw["id"])), target=_model(raw.get("target"), at),
                drafts=tuple(_model(d, at) for d in drafts), licence=str(raw.get("licence", "")),
                gated=str(raw.get("gated", "")), task=str(raw.get("task", "chat")),
                draft_max=int(raw.get("draft_max", 8)), user=user,
            ))
        except KeyError as exc:
            raise CatalogError(f"{at}: missing {exc}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CatalogError):
                raise
            raise CatalogError(f"{at}: 'draft_max' must be a whole number") from None
    for i, raw in enumerate(_tables(doc, "model", where)):  # a single model: a "pair" without drafts
        m = _model(raw, f"{where} model #{i + 1}")
        pairs.append(CatalogPair(id=str(raw.get("id", Path(m.file).stem)), name=str(raw.get("name", m.file)),
                                 target=m, drafts=(), task=str(raw.get("task", "chat")), user=user))
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
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: not valid TOML ({' '.join(str(exc).split())})") from None


def load_catalog(user_file: Path | None = None) -> list[CatalogPair]:
    """The shipped pairs and the user's (``user_file``, default the default profile's); a user pair
    with a shipped id replaces it.  CatalogError (one line naming the file) for a damaged file."""
    shipped = tomllib.loads(resources.files(__package__).joinpath("catalog.toml").read_text(encoding="utf-8"))
    pairs = _parse(shipped, "shipped catalog", user=False)
    user_file = user_file or user_catalog_path()
    if user_file.exists():
        mine = _parse(_read_toml(user_file), str(user_file), user=True)
        ids = {p.id for p in mine}
        pairs = [p for p in pairs if p.id not in ids] + mine
    return pairs


def find_pair(pair_id: str, pairs: list[CatalogPair]) -> CatalogPair:
    for p in pairs:
        if p.id == pair_id:
            return p
    raise CatalogError(f"no pair '{pair_id}' in the catalog (see 'specchat models list')")


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def add_user_pair(pair_id: str, target: CatalogModel, drafts: list[CatalogModel], *, name: str = "",
                  task: str = "chat", user_file: Path | None = None) -> Path:
    """Append a pair (or, without drafts, a single model) to the user's catalog file."""
    user_file = user_file or user_catalog_path()
    if any(p.id == pair_id for p in load_catalog(user_file) if p.user):
        raise CatalogError(f"'{pair_id}' is already in {user_file}")

    def model(m: CatalogModel) -> str:
        return f"{{ repo = {_toml_str(m.repo)}, file = {_toml_str(m.file)} }}"

    lines = ["", "[[pair]]" if drafts else "[[model]]", f"id = {_toml_str(pair_id)}",
             f"name = {_toml_str(name or pair_id)}", f"task = {_toml_str(task)}"]
    if drafts:
        lines.append(f"target = {model(target)}")
        lines.append("drafts = [" + ", ".join(model(d) for d in drafts) + "]")
    else:
        lines += [f"repo = {_toml_str(target.repo)}", f"file = {_toml_str(target.file)}"]
    from specchat.profile import write_text_atomically

    old = user_file.read_bytes().decode("utf-8-sig") if user_file.exists() else ""  # parsed above: it reads
    text = old + ("" if not old or old.endswith("\n") else "\n") + "\n".join(lines) + "\n"
    _parse(tomllib.loads(text), str(user_file), user=True)  # what we write must read back
    try:
        write_text_atomically(user_file, text)
    except OSError as exc:
        raise CatalogError(f"{user_file}: cannot write ({exc.strerror or exc})") from None
    return user_file
