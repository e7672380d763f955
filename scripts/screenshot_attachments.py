"""Render issue 36's files and presets in the app, light and dark, at 1280x720:
a question with two attached files (chips on the message), a file waiting in the composer with the line
that says how much of the context it takes, and the Presets dialog.

    python scripts/screenshot_attachments.py docs

writes docs/screenshot-attachments-{light,dark}.png and docs/screenshot-presets-{light,dark}.png.  The
chat runs on the fake pair of the tests (no model is loaded); its answer is stored text.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import specchat  # noqa: E402,F401  (llama.cpp's library before numpy)

ANSWER = """```python
def g(value, default=None):
    \"\"\"The value, or the default when it is None.\"\"\"
    return default if value is None else value


def _settings_of(flat):
    structured = StructuredOutput(str(g(flat.get("structured_kind"), "")), str(g(flat.get("structured_text"), "")))
    return ChatSettings(**flat, sampling=SamplingSettings(structured=structured))
```

Renamed `f` to `g` at its definition and at all 21 calls; nothing else changed."""


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs")
    from PySide6.QtWidgets import QApplication

    from helpers.fakes import FakePairFactory, FakeSpec
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.presets import PresetLibrary
    from specchat.profile import Profile
    from specchat.store import ChatSettings, NewAttachment, open_store
    from specchat.ui.presets_dialog import PresetsDialog
    from specchat.ui.session import AppSession

    app = QApplication([])
    tmp = Path(tempfile.mkdtemp())

    def wait(until, timeout_s: float) -> None:  # noqa: ANN001
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not until():
            app.processEvents()
            time.sleep(0.02)

    profile = Profile.at(tmp / "profile")
    target, draft = tmp / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", tmp / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    target.touch()
    draft.touch()
    store = open_store(profile.database)
    settings = ChatSettings(target=target, draft=draft, speculation="lookup", reasoning=False, task="edit",
                            system_prompt="You edit code.")
    chat = store.create_chat("Rename f to g in helpers.py", settings).id
    helpers = (HERE.parent / "app" / "specchat" / "store" / "records.py").read_bytes()
    question = store.add_message(chat, "user", "Rename the function f to g everywhere in this file.", attachments=[
        NewAttachment("helpers.py", "text/x-python", helpers),
        NewAttachment("style-guide.md", "text/markdown", b"# Style\n\nKeep names short.\n" * 40)])
    store.add_message(chat, "assistant", ANSWER)
    assert store.attachments(question.id)
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                         pair_factory=FakePairFactory(FakeSpec(answer_tokens=10, n_ctx=16384)), nice=0)
    window = session.window
    window.resize(1280, 720)
    window.show()
    window.open_chat(chat)
    wait(lambda: session.answers.pair_info is not None, 20)  # the fake pair: the context's size for the line
    (tmp / "schema_notes.txt").write_text("Field names follow the stored JSON keys.\n" * 30)
    window.pane.attach_files([tmp / "schema_notes.txt"])
    window.pane.composer.setPlainText("Now add a docstring to g that names its callers.")
    for theme in ("light", "dark"):
        window.set_theme(theme)
        wait(lambda: False, 0.6)
        window.grab().save(str(out / f"screenshot-attachments-{theme}.png"))

    for theme, row in (("light", 0), ("dark", 1)):  # code editing with lookup; JSON extraction with its schema
        window.set_theme(theme)
        dialog = PresetsDialog(PresetLibrary.of(profile.config_dir), window)
        dialog.resize(1280, 720)
        dialog.show()
        dialog.list.setCurrentRow(row)
        wait(lambda: False, 0.5)
        dialog.grab().save(str(out / f"screenshot-presets-{theme}.png"))
        dialog.close()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
