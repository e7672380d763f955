"""The layer script really catches a worker that reaches for widgets."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import check_layers  # noqa: E402


def test_the_real_workers_use_qtcore_only():
    assert check_layers.breaches(check_layers.ROOT / "workers") == []


def test_a_widget_import_in_a_worker_is_reported(tmp_path, monkeypatch):
    pkg = tmp_path / "specchat" / "workers"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("from PySide6.QtCore import QObject\nfrom PySide6 import QtWidgets\n"
                                "import PySide6.QtGui\n")
    monkeypatch.setattr(check_layers, "ROOT", tmp_path / "specchat")
    found = check_layers.breaches(pkg)
    assert len(found) == 2
    assert "PySide6.QtWidgets" in found[0] and "PySide6.QtGui" in found[1]
