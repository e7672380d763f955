"""Drive the app as ``run_app`` builds it, over the fake pair (no model file): seconds per flow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt

from helpers.fakes import FakePairFactory
from specchat.config import AppConfig
from specchat.models.registry import Registry
from specchat.profile import Profile
from specchat.store import ChatSettings, open_store
from specchat.ui.session import AppSession


@dataclass
class FakeApp:
    """One running app over the fake pair, and what it needs to start again on the same files."""

    root: Path
    factory: FakePairFactory
    session: AppSession | None = None

    @property
    def window(self):
        return self.session.window

    @property
    def pane(self):
        return self.session.window.pane

    @property
    def store(self):
        return self.session.store

    def start(self, qtbot, *, window_state=None, pair_factory=None, **session_options) -> AppSession:
        """``session_options``: more of AppSession's keywords (``last_crash``, ``work``)."""
        profile = Profile.at(self.root)
        store = open_store(profile.database)
        self.session = AppSession(store, AppConfig(profile.config_file), Registry(profile.registry), profile=profile,
                                  pair_factory=pair_factory or self.factory, nice=0, window_state=window_state,
                                  **session_options)
        qtbot.addWidget(self.session.window)
        self.session.window.show()
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.window.close()
            self.session.close()
            self.session = None

    def model_files(self) -> tuple[Path, Path]:
        """Two files the fake factory "loads" (the loader only checks that they exist)."""
        target, draft = self.root / "fake-target.gguf", self.root / "fake-draft.gguf"
        for p in (target, draft):
            p.touch()
        return target, draft

    def settings(self, **change) -> ChatSettings:
        target, draft = self.model_files()
        base = dict(target=target, draft=draft, speculation="draft", max_tokens=400)
        return ChatSettings().replaced(**(base | change))  # sampling fields by name too

    def add_chat(self, title: str = "New chat", **change) -> int:
        """A chat in the database before the app starts (or while it runs)."""
        store = self.session.store if self.session else open_store(Profile.at(self.root).database)
        try:
            return store.create_chat(title, self.settings(**change)).id
        finally:
            if self.session is None:
                store.close()


def send(qtbot, pane, text: str) -> None:
    pane.composer.setPlainText(text)
    qtbot.keyClick(pane.composer, Qt.Key.Key_Return)


def wait_idle(qtbot, session, timeout: int = 20_000) -> None:
    qtbot.waitUntil(lambda: not session.answers.busy_chats(), timeout=timeout)
