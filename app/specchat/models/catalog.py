"""The catalog: curated target/draft pairs shipped with the app, plus the user's own.

The shipped list lives in ``catalog.toml`` beside this module; users add pairs
and single models to ``catalog.toml`` in their config dir (same schema, written
by ``specchat models add``).  Entries only name files on the hub; whether a
draft really serves a target is proven from the GGUF headers before download.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


class CatalogError(ValueError):
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


def _model(raw: dict, where: str) -> CatalogModel:
    try:
        return CatalogModel(str(raw["repo"]), str(raw["file"]), raw.get("size"), raw.get("sha256"))
    except (KeyError, TypeError):
        raise CatalogError(f"{where}: a model needs 'repo' and 'file'") from None


def _parse(doc: dict, where: str, user: bool) -> list[CatalogPair]:
    pairs = []
    for i, raw in enumerate(doc.get("pair", [])):
        at = f"{where} pair #{i + 1}"
        try:
            pairs.append(CatalogPair(
                id=str(raw["id"]), name=str(raw.get("name", raw["id"])), target=_model(raw["target"], at),
                drafts=tuple(_model(d, at) for d in raw.get("drafts", [])), licence=str(raw.get("licence", "")),
                gated=str(raw.get("gated", "")), task=str(raw.get("task", "chat")),
                draft_max=int(raw.get("draft_max", 8)), user=user,
            ))
        except KeyError as exc:
            raise CatalogError(f"{at}: missing {exc}") from None
    for i, raw in enumerate(doc.get("model", [])):  # a single model: a "pair" without drafts
        m = _model(raw, f"{where} model #{i + 1}")
        pairs.append(CatalogPair(id=str(raw.get("id", Path(m.file).stem)), name=str(raw.get("name", m.file)),
                                 target=m, drafts=(), task=str(raw.get("task", "chat")), user=user))
    return pairs


def user_catalog_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("specchat")) / "catalog.toml"


def load_catalog(user_file: Path | None = None) -> list[CatalogPair]:
    shipped = tomllib.loads(resources.files(__package__).joinpath("catalog.toml").read_text(encoding="utf-8"))
    pairs = _parse(shipped, "shipped catalog", user=False)
    user_file = user_file or user_catalog_path()
    if user_file.exists():
        try:
            doc = tomllib.loads(user_file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise CatalogError(f"{user_file}: {exc}") from None
        mine = _parse(doc, str(user_file), user=True)
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
    user_file.parent.mkdir(parents=True, exist_ok=True)
    with user_file.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    load_catalog(user_file)  # what we wrote must read back
    return user_file
