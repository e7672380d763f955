"""Render the window in the light and the dark theme, with answers and a populated telemetry panel,
and an answer's highlighted Python block.

    python scripts/screenshot_themes.py docs/screenshot-theme-light.png docs/screenshot-theme-dark.png
                                        [--code docs/screenshot-code-highlight.png]

No model: the answers stream from the fake pair of the tests (tests/helpers/fakes.py) through the real
generation thread, controller and window, so the telemetry panel plots real rounds; one earlier
answer, with a longer Python block, is in the chat's history as the store keeps it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

QUESTION = "Write a small Python bank account with deposit, withdraw and a history."
ANSWER = '''Here is a compact version. The balance is the **sum of the entries**, so it never drifts:

```python
from dataclasses import dataclass, field


@dataclass
class Account:
    """A bank account whose balance is the sum of its entries."""

    owner: str
    entries: list[int] = field(default_factory=list)

    def deposit(self, amount: int) -> int:
        if amount <= 0:
            raise ValueError(f"not a positive amount: {amount}")
        self.entries.append(amount)
        return self.balance

    def withdraw(self, amount: int) -> int:
        if amount > self.balance:
            raise ValueError("not enough money")  # refused, not clamped
        self.entries.append(-amount)
        return self.balance

    @property
    def balance(self) -> int:
        return sum(self.entries)
```

- `deposit()` and `withdraw()` return the new balance
- the history is `entries`, oldest first
'''


def _wait(app, until, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout_s
    while not until() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("light", type=Path)
    ap.add_argument("dark", type=Path)
    ap.add_argument("--code", type=Path, default=None, help="the highlighted Python answer alone (light)")
    args = ap.parse_args()

    from PySide6.QtWidgets import QApplication

    from helpers.fakes import FakePairFactory, FakeSpec
    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.profile import Profile
    from specchat.store import ChatSettings, open_store
    from specchat.ui.session import AppSession
    from specchat.ui.theme import apply_theme

    app = QApplication([])
    apply_theme("light")
    root = Path(tempfile.mkdtemp())
    target, draft = root / "qwen2.5-coder-1.5b-fake.gguf", root / "qwen2.5-coder-0.5b-fake.gguf"
    for p in (target, draft):
        p.touch()
    profile = Profile.at(root)
    store = open_store(profile.database)
    chat = store.create_chat("Python bank account", ChatSettings(target=target, draft=draft, speculation="draft",
                                                                  max_tokens=400))
    store.add_message(chat.id, "user", QUESTION)
    store.add_message(chat.id, "assistant", ANSWER)
    store.create_chat("Speculative decoding, explained for someone who has never heard of it",
                      ChatSettings(target=target, draft=draft))
    session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                         pair_factory=FakePairFactory(FakeSpec(answer_tokens=180, decode_s=0.004)), nice=0)
    window = session.window
    window.resize(1500, 950)
    window.show()
    window.open_chat(chat.id)
    pane = window.pane
    for prompt in ("And a function that adds two numbers?", "How does the draft help?"):
        pane.composer.setPlainText(prompt)
        pane.send()
        _wait(app, lambda: not session.answers.busy_chats())
    window.telemetry.repaint_now()
    _wait(app, lambda: False, 0.5)
    if args.code:
        code_answer = pane.conversation.messages[1]
        pane.conversation.ensureWidgetVisible(code_answer)
        _wait(app, lambda: False, 0.3)
        code_answer.grab().save(str(args.code))
    pane.conversation.verticalScrollBar().setValue(pane.conversation.verticalScrollBar().maximum())
    _wait(app, lambda: False, 0.3)
    window.grab().save(str(args.light))
    window.set_theme("dark")
    window.telemetry.repaint_now()
    _wait(app, lambda: False, 0.5)
    window.grab().save(str(args.dark))
    window.close()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
