"""Layer rules import-linter cannot express, checked on every import statement (those inside
functions too):

- workers/ and services/ may use Qt's QtCore only (no widgets, no GUI);
- ui/ may import only what :data:`UI_ALLOWED` names: the workers, the services, the store, metrics,
  telemetry, config, the profile, the pair loader and the public types of engine and
  models.  Never ``engine.runtime`` (which loads llama.cpp), the generation loop or its
  parts, and never ``llama_cpp`` itself: llama.cpp runs in the generation thread;
- no import circle between specchat's modules (an import inside a function or under
  ``TYPE_CHECKING`` counts: it is a dependency all the same), but any :data:`KNOWN_CIRCLES`
  names while it is being taken apart (none now).

    python scripts/check_layers.py      # exit 1 and one line per breach
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "app" / "specchat"
ALLOWED_QT = {"PySide6", "PySide6.QtCore"}
UI_ALLOWED = (
    "specchat",  # the package itself: __version__
    "specchat.ui",
    "specchat.workers",
    "specchat.services",
    "specchat.store",
    "specchat.chat_commands",  # the chat's commands: every write the window makes to the store
    "specchat.stats_line",  # the stats line under an answer, in words (the CLI prints the same)
    "specchat.metrics",
    "specchat.telemetry",
    "specchat.config",
    "specchat.profile",
    "specchat.errors",
    "specchat.modes",
    "specchat.context_policy",  # the policies a chat picks for a conversation past the context
    "specchat.files",
    "specchat.native_work",  # the record of native work under way, read at the next start
    "specchat.pair_loading",
    "specchat.engine",  # the package's public events and settings (its __init__)
    "specchat.engine.events",
    "specchat.engine.settings",
    "specchat.engine.pair",  # PairConfig, CancelToken: the types a pair factory takes
    "specchat.engine.progress",  # LoadProgress: a pair load's steps, shown in the chat pane
    "specchat.remote.servers",  # the user's servers and their keys (Settings → Servers)
    "specchat.remote.backend",  # RemoteConfig: what a chat's server backend names
    "specchat.remote.client",  # Capabilities: what a server said it can report
    "specchat.remote.errors",
    "specchat.remote.llama_server",  # which llama-server and which --spec-type values it offers
    "specchat.models.catalog",
    "specchat.models.registry",
    "specchat.models.fit",
    "specchat.models.hub_search",  # GGUFEntry, RepoFiles, RepoHit, gated_message: what the hub search shows
    "specchat.models.draft_finder",  # DraftCandidate: what the draft finder shows
    "specchat.models.hub",
    "specchat.models.gguf_header",
    "specchat.models.compatibility",
)


# Circles still being taken apart, each with what breaks it (none: the last four went in issue 23).
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path`` (relative imports resolved)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.append((node.lineno, base))
            if base == "PySide6":
                out += [(node.lineno, f"PySide6.{a.name}") for a in node.names]
            for a in node.names:  # "from specchat.engine import generate" imports a module too
                sub = ROOT.parent.joinpath(*f"{base}.{a.name}".split("."))
                if sub.with_suffix(".py").exists() or sub.is_dir():
                    out.append((node.lineno, f"{base}.{a.name}"))
    return sorted(out)


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] != "__init__" else parts[:-1])


def breaches() -> list[str]:
    out = []
    for path in sorted([*(ROOT / "workers").rglob("*.py"), *(ROOT / "services").rglob("*.py")]):
        for line, name in imports(path, _package(path)):
            if name.startswith("PySide6") and name not in ALLOWED_QT:
                out.append(f"{path.relative_to(ROOT.parent)}:{line}: imports {name} ({path.parent.name}: QtCore only)")
    for path in sorted((ROOT / "ui").rglob("*.py")):
        for line, name in imports(path, _package(path)):
            if name == "llama_cpp" or name.startswith("llama_cpp."):
                out.append(f"{path.relative_to(ROOT.parent)}:{line}: imports {name} (ui never calls llama.cpp)")
            elif (name == "specchat" or name.startswith("specchat.")) and name not in UI_ALLOWED and not any(
                    name.startswith(a + ".") for a in UI_ALLOWED if a not in ("specchat", "specchat.engine")):
                out.append(f"{path.relative_to(ROOT.parent)}:{line}: imports {name} (not on the ui allowlist)")
    return out


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of the tree and the modules of the tree it imports (anywhere in it)."""
    paths = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps = set()
        for _line, imported in imports(path, _package(path)):
            while imported and imported not in paths:  # "specchat.x.Name": the module it is in
                imported = imported.rpartition(".")[0]
            # a module's own packages are imported before it whatever it says ("from . import x"
            # names the package too): not a dependency of its own
            if imported and not (name == imported or name.startswith(imported + ".")):
                deps.add(imported)
        graph[name] = deps
    return graph


def import_circles() -> list[list[str]]:
    """The groups of modules that import each other, round (Tarjan's strongly connected components)."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def circle_breaches() -> list[str]:
    return [f"import circle: {' <-> '.join(group)}" for group in import_circles()
            if frozenset(group) not in KNOWN_CIRCLES]


def main() -> int:
    found = breaches() + circle_breaches()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
