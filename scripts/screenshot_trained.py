"""Render a trained drafter in the app: the Models dialog's catalog with the trained-head pairs, and a
chat answered through SpecChat's llama-server with an EAGLE-3 head (issue 34's screenshots).

    python scripts/screenshot_trained.py docs/screenshot-trained-catalog.png docs/screenshot-trained-chat.png

The chat's pair is tiny and synthetic (tests/helpers/tiny_drafters.py: a qwen3 target and an EAGLE-3 head
with random weights and Qwen2.5's tokenizer), so its text is noise and its acceptance near zero; what the
picture shows is the path: the header's "· llama-server", the server's per-round telemetry, the footer's
drafted and accepted counts.  It needs the CPU llama-server of scripts/test_server.py (put on PATH here).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy)


def main() -> int:
    catalog_png, chat_png = sys.argv[1], sys.argv[2]
    from PySide6.QtWidgets import QApplication

    import test_models
    import test_server
    from helpers.tiny_drafters import Tokenizer, write_eagle3, write_qwen3_target
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.services.download import DownloadService
    from specchat.services.hub import HubTasks
    from specchat.store import open_store
    from specchat.ui.models_dialog import ModelsDialog
    from specchat.ui.session import AppSession
    from specchat.workers.tasks import TaskRunner

    binary = test_server.cached_binary()
    if binary is None:
        print("no llama-server: run python scripts/test_server.py first", file=sys.stderr)
        return 2
    os.environ["PATH"] = f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    app = QApplication([])
    tmp = Path(tempfile.mkdtemp())

    def wait(until, timeout_s: float) -> None:  # noqa: ANN001
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not until():
            app.processEvents()
            time.sleep(0.02)

    downloads, hub, tasks = DownloadService(), HubTasks(), TaskRunner()
    dialog = ModelsDialog(Registry(tmp / "registry.json"), downloads, hub, tasks=tasks)
    dialog.resize(1280, 720)
    dialog.show()
    for row in range(dialog.catalog.rowCount()):
        if dialog.catalog.item(row, 0).data(256) == "qwen3.6-27b-mtp":
            dialog.catalog.selectRow(row)
    wait(lambda: False, 0.5)
    dialog.grab().save(catalog_png)
    dialog.close()
    for part in (hub, downloads, tasks):
        part.shutdown()

    tok = Tokenizer.from_gguf(test_models.ensure("qwen-0.5b"))
    target = write_qwen3_target(tmp / "tiny-qwen3-target.gguf", tok, seed=1)
    head = write_eagle3(tmp / "eagle3-tiny-qwen3.gguf", tok, seed=2)
    profile = Profile.at(tmp / "profile")
    profile.config_file.parent.mkdir(parents=True, exist_ok=True)
    profile.config_file.write_text("threads = 1\n")
    session = AppSession(open_store(profile.database), AppConfig(profile.config_file), Registry(profile.registry),
                         profile=profile, nice=0)
    window = session.window
    window.resize(1280, 720)
    window.show()
    wait(lambda: window.pane.chat_id is not None, 10)
    window._pair_chosen(target, head)  # what Models → Use pair does
    window.pane.composer.setPlainText("Count to ten.")
    window.pane.send()
    wait(lambda: session.answers.pair_info is not None, 120)
    wait(lambda: False, 8)  # the answer streams (2048 tokens at ~100 tok/s on 2 cores)
    window.grab().save(chat_png)
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
