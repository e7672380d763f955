"""What is installed, and which pairs were proven compatible.

A small JSON file under the platformdirs data dir.  Every record keeps the
file's size and mtime, so a result goes stale by itself when the file changes
(re-downloaded, replaced, truncated) and is checked again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .compatibility import PairCompatibility, check_pair
from .gguf_header import validate_file

REGISTRY_VERSION = 1


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


def default_registry_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("specchat")) / "registry.json"


class Registry:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_registry_path()
        self._models: dict[str, dict] = {}
        self._pairs: dict[str, dict] = {}
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                self._models = doc.get("models", {})
                self._pairs = doc.get("pairs", {})
            except (OSError, ValueError):
                # a damaged registry is rebuilt from the files themselves; never block the app on it
                self._models, self._pairs = {}, {}

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": REGISTRY_VERSION, "models": self._models, "pairs": self._pairs},
                                  indent=1), encoding="utf-8")
        os.replace(tmp, self.path)

    # -- models -----------------------------------------------------------------

    def add(self, path: str | Path, *, source: str = "") -> InstalledModel:
        """Validate a GGUF file (magic, version, metadata, complete tensor data) and record it."""
        path = Path(path).resolve()
        header = validate_file(path)
        st = path.stat()
        tokens = header.get("tokenizer.ggml.tokens")
        model = InstalledModel(
            path=str(path), size=st.st_size, mtime_ns=st.st_mtime_ns,
            name=str(header.get("general.name", path.stem)), architecture=header.architecture,
            n_vocab=len(tokens) if isinstance(tokens, list) else 0, source=source, added=time.time(),
        )
        self._models[str(path)] = asdict(model)
        self._save()
        return model

    def models(self) -> list[InstalledModel]:
        return [InstalledModel(**m) for m in self._models.values()]

    def remove(self, path: str | Path) -> None:
        key = str(Path(path).resolve())
        self._models.pop(key, None)
        self._pairs = {k: v for k, v in self._pairs.items() if key not in (v["target"], v["draft"])}
        self._save()

    # -- pairs ------------------------------------------------------------------

    @staticmethod
    def _stamp(path: str) -> list[int]:
        st = os.stat(path)
        return [st.st_size, st.st_mtime_ns]

    def compatibility(self, target: str | Path, draft: str | Path) -> PairCompatibility:
        """The cached verdict while both files are unchanged; otherwise checked again (and cached)."""
        t, d = str(Path(target).resolve()), str(Path(draft).resolve())
        key = f"{t}\n{d}"
        cached = self._pairs.get(key)
        try:
            stamps = [self._stamp(t), self._stamp(d)]
        except OSError:
            stamps = None
        if cached and stamps and cached["stamps"] == stamps:
            return PairCompatibility(cached["compatible"], cached["reason"])
        verdict = check_pair(t, d)
        if stamps:
            self._pairs[key] = {"target": t, "draft": d, "compatible": verdict.compatible,
                                "reason": verdict.reason, "stamps": stamps}
            self._save()
        return verdict

    def drafts_for(self, target: str | Path) -> list[tuple[InstalledModel, PairCompatibility]]:
        """Every other installed model with its verdict as a draft for ``target`` (the UI lists both kinds)."""
        t = str(Path(target).resolve())
        out = []
        for m in self.models():
            if m.path != t and m.is_current():
                out.append((m, self.compatibility(t, m.path)))
        return out
