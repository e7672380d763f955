"""Layer rule import-linter cannot express: workers/ may use Qt's QtCore only (no widgets, no GUI).

    python scripts/check_layers.py      # exit 1 and one line per breach
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "app" / "specchat"
ALLOWED_QT = {"PySide6", "PySide6.QtCore"}


def breaches(package: Path) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names]
                                         if node.module == "PySide6" else [])
            for name in names:
                if name.startswith("PySide6") and name not in ALLOWED_QT:
                    out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: imports {name} (workers: QtCore only)")
    return out


def main() -> int:
    found = breaches(ROOT / "workers")
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
