"""What is installed, which pairs were proven compatible, and the last pair used.

A small JSON file in the profile's data dir (``Profile.registry``).  Every record
keeps the file's size and mtime, so a result goes stale by itself when the file
changes (re-downloaded, replaced, truncated) and is checked again.

Several processes share the file (the app, ``specchat models pull`` in a terminal,
a second window of another profile does not): every change re-reads the file,
applies itself and writes the result atomically, all under a file lock, so a
``Registry`` opened long ago never overwrites another process's import.  Reads pick
up the file again when it changed on disk.

A damaged file (not JSON, not UTF-8, the wrong shape, a newer version) raises
:class:`RegistryError` and is never rewritten: the user moves it aside and the next
import starts a new one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from specchat.errors import UserError
from specchat.profile import Profile, write_text_atomically

from .compatibility import PairCompatibility, check_pair
from .gguf_header import validate_file

REGISTRY_VERSION = 1
LOCK_TIMEOUT_S = 10.0


class RegistryError(UserError):
    """The registry file cannot be used; one line naming the file and what to do."""


@dataclass(frozen=True, slots=True)
class InstalledModel:
    path: str
    size: int
    mtime_ns: int
    name: str
    architecture: str
    n_vocab: int
    source: str = ""  # "owner/repo/file" when it came from the hub, "" when imported from disk
    added: float = 0.0

    def is_current(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_size == self.size and st.st_mtime_ns == self.mtime_ns


_MODEL_TYPES: dict[str, type | tuple[type, ...]] = {"path": str, "size": int, "mtime_ns": int, "name": str, "architecture": str, "n_vocab": int,
                "source": str, "added": (int, float)}
_REQUIRED = {f.name for f in fields(InstalledModel)} - {"source", "added"}
_PAIR_TYPES = {"target": str, "draft": str, "compatible": bool, "reason": str, "stamps": list}


def default_registry_path() -> Path:
    return Profile.default().registry


def _shape_error(doc: object) -> str | None:
    """What is wrong with a parsed registry, or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    version = doc.get("version", REGISTRY_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        return "'version' is not a number"
    if version > REGISTRY_VERSION:
        return f"written by a newer SpecChat (version {version})"
    models, pairs = doc.get("models", {}), doc.get("pairs", {})
    if not isinstance(models, dict) or not isinstance(pairs, dict):
        return "'models' and 'pairs' must be objects"
    for key, m in models.items():
        if not isinstance(m, dict) or not m.keys() >= _REQUIRED:
            return f"model {key!r} lacks fields"
        for name, kind in _MODEL_TYPES.items():
            if name in m and (not isinstance(m[name], kind) or isinstance(m[name], bool)):
                return f"model {key!r}: bad '{name}'"
    for key, p in pairs.items():
        if not isinstance(p, dict) or any(not isinstance(p.get(n), t) for n, t in _PAIR_TYPES.items()):
            return f"pair {key!r} is malformed"
    last = doc.get("last_pair")
    if last is not None and not (isinstance(last, dict) and isinstance(last.get("target"), str)
                                 and isinstance(last.get("draft"), str | None)):
        return "'last_pair' is malformed"
    return None


class Registry:
    """The registry file of one profile.  Every method may raise :class:`RegistryError`."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_registry_path()
        self._doc: dict = {}
        self._stamp: tuple[int, int, int] | None = None
        self._refresh()

    # -- the file ---------------------------------------------------------------

    def _damaged(self, why: str) -> RegistryError:
        return RegistryError(f"{self.path}: damaged registry ({why}); move it aside and SpecChat starts a new one "
                             "(re-import your models with 'specchat models import')")

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read(self) -> tuple[dict, tuple[int, int, int] | None]:
        """The file as a dict (empty when there is none) and its stamp; RegistryError when damaged."""
        stamp = self._file_stamp()
        if stamp is None:
            return {}, None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise self._damaged(f"not UTF-8 at byte {exc.start}") from None
        except ValueError as exc:
            raise self._damaged(f"not JSON: {exc}") from None
        why = _shape_error(doc)
        if why:
            raise self._damaged(why)
        return doc, stamp

    def _refresh(self) -> None:
        """Read the file again if it changed on disk since we last saw it."""
        if self._stamp is None or self._file_stamp() != self._stamp:
            self._doc, self._stamp = self._read()

    def _update(self, change: Callable[[dict], object]) -> object:
        """Re-read, apply ``change`` to the document, write it atomically: all under the lock."""
        from filelock import FileLock, Timeout

        lock = FileLock(f"{self.path}.lock", timeout=LOCK_TIMEOUT_S)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with lock:
                doc, _ = self._read()
                doc.setdefault("models", {})
                doc.setdefault("pairs", {})
                result = change(doc)
                doc["version"] = REGISTRY_VERSION
                write_text_atomically(self.path, json.dumps(doc, indent=1))
                self._doc, self._stamp = doc, self._file_stamp()
        except Timeout:
            raise RegistryError(f"{self.path}: busy: another process holds {lock.lock_file}") from None
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot write ({exc.strerror or exc})") from None
        return result

    # -- models -----------------------------------------------------------------

    def add(self, path: str | Path, *, source: str = "") -> InstalledModel:
        """Validate a GGUF file (magic, version, metadata, complete tensor data) and record it.

        GGUFError for a bad file (nothing recorded), RegistryError for a damaged registry.
        """
        path = Path(path).resolve()
        header = validate_file(path)
        st = path.stat()
        tokens = header.get("tokenizer.ggml.tokens")
        model = InstalledModel(
            path=str(path), size=st.st_size, mtime_ns=st.st_mtime_ns,
            name=str(header.get("general.name", path.stem)), architecture=header.architecture,
            n_vocab=len(tokens) if isinstance(tokens, list) else 0, source=source, added=time.time(),
        )

        def change(doc: dict) -> None:
            old = doc["models"].get(str(path), {})
            record = asdict(model)
            if not source and old.get("source"):  # re-importing a pulled file keeps where it came from
                record["source"] = old["source"]
            doc["models"][str(path)] = record

        self._update(change)
        return InstalledModel(**{k: v for k, v in self._doc["models"][str(path)].items() if k in _MODEL_TYPES})

    def models(self) -> list[InstalledModel]:
        self._refresh()
        return [InstalledModel(**{k: v for k, v in m.items() if k in _MODEL_TYPES})
                for m in self._doc.get("models", {}).values()]

    def remove(self, path: str | Path) -> None:
        key = str(Path(path).resolve())

        def change(doc: dict) -> None:
            doc["models"].pop(key, None)
            doc["pairs"] = {k: v for k, v in doc["pairs"].items() if key not in (v["target"], v["draft"])}

        self._update(change)

    def find(self, name: str) -> list[InstalledModel]:
        """Installed models called ``name``: their registry name or their file name without '.gguf'."""
        return [m for m in self.models() if name in (m.name, Path(m.path).stem)]

    def by_source(self, source: str) -> list[InstalledModel]:
        """Installed copies of a hub file ('owner/repo/file.gguf'), unchanged on disk ones first."""
        found = [m for m in self.models() if m.source == source]
        return sorted(found, key=lambda m: not m.is_current())

    # -- the last pair used -------------------------------------------------------

    def last_pair(self) -> tuple[Path, Path | None] | None:
        """(target, draft or None) of the pair loaded last (by the app, 'chat' or 'bench'), or None."""
        self._refresh()
        last = self._doc.get("last_pair")
        if not last:
            return None
        return Path(last["target"]), (Path(last["draft"]) if last.get("draft") else None)

    def set_last_pair(self, target: str | Path, draft: str | Path | None) -> None:
        record = {"target": str(Path(target).resolve()), "draft": str(Path(draft).resolve()) if draft else None}
        self._refresh()
        if self._doc.get("last_pair") == record:
            return

        def change(doc: dict) -> None:
            doc["last_pair"] = record

        self._update(change)

    # -- pairs ------------------------------------------------------------------

    @staticmethod
    def _stamp_of(path: str) -> list[int]:
        st = os.stat(path)
        return [st.st_size, st.st_mtime_ns]

    def compatibility(self, target: str | Path, draft: str | Path) -> PairCompatibility:
        """The cached verdict while both files are unchanged; otherwise checked again (and cached)."""
        t, d = str(Path(target).resolve()), str(Path(draft).resolve())
        key = f"{t}\n{d}"
        self._refresh()
        cached = self._doc.get("pairs", {}).get(key)
        try:
            stamps = [self._stamp_of(t), self._stamp_of(d)]
        except OSError:
            stamps = None
        if cached and stamps and cached["stamps"] == stamps:
            return PairCompatibility(cached["compatible"], cached["reason"])
        verdict = check_pair(t, d)
        if stamps:
            entry = {"target": t, "draft": d, "compatible": verdict.compatible, "reason": verdict.reason,
                     "stamps": stamps}

            def change(doc: dict) -> None:
                doc["pairs"][key] = entry

            self._update(change)
        return verdict

    def drafts_for(self, target: str | Path) -> list[tuple[InstalledModel, PairCompatibility]]:
        """Every other installed model with its verdict as a draft for ``target`` (the UI lists both kinds)."""
        t = str(Path(target).resolve())
        out = []
        for m in self.models():
            if m.path != t and m.is_current():
                out.append((m, self.compatibility(t, m.path)))
        return out
