"""Render the Models dialog with the pinned test models installed (a refused draft shown with its reason).

    python scripts/screenshot_models.py docs/screenshot-models.png
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(out: str) -> int:
    from PySide6.QtWidgets import QApplication

    import test_models
    from specchat.models.registry import Registry
    from specchat.ui.models_dialog import ModelsDialog
    from specchat.workers.download import DownloadService

    app = QApplication([])
    registry = Registry(Path(tempfile.mkdtemp()) / "registry.json")
    target = test_models.ensure("qwen-1.5b")
    for name in ("qwen-1.5b", "qwen-0.5b", "gemma-270m", "smollm2-135m"):
        registry.add(test_models.ensure(name))
    downloads = DownloadService()
    dialog = ModelsDialog(registry, downloads)
    dialog.tabs.setCurrentIndex(1)
    rows = [dialog.installed.item(i).data(256) for i in range(dialog.installed.count())]
    dialog.installed.setCurrentRow(rows.index(str(target.resolve())))
    dialog.resize(1000, 520)
    dialog.show()
    app.processEvents()
    dialog.grab().save(out)
    downloads.shutdown()
    dialog.close()
    del dialog, downloads
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
