"""Layer rules import-linter cannot express, checked on every import statement (those inside
functions too):

- workers/ and services/ may use Qt's QtCore only (no widgets, no GUI);
- ui/ never imports ``llama_cpp`` itself, not even inside a function: llama.cpp runs in the
  generation thread (which floors ui may use, and through which modules, is import-linter's
  ``layers`` and ``forbidden`` contracts in pyproject.toml);
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
