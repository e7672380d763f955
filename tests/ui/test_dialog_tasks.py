"""No blocking call on the GUI thread: the Chat settings dialog's llama-server check and the Models
dialog's header reads run as tasks.  While one is held the dialog is open, says so and answers the
user; its result fills the dialog when it arrives; a dialog closed meanwhile takes no late result."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from helpers.gguf_samples import write_gguf
from specchat.models.registry import Registry
from specchat.remote.llama_server import MANAGED
from specchat.store import ChatSettings
from specchat.ui import models_dialog, settings_dialogs
from specchat.ui.settings_dialogs import ChatSettingsDialog

OFFERS = ({"none": "", "draft-simple": "", "draft-mtp": "the target has no multi-token layers"}, "")


class Held:
    """A slow call standing in for the real one: it blocks until released, then says it has returned."""

    def __init__(self, result: object) -> None:
        self.result = result
        self.started, self.release, self.returned = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, *args: object) -> object:
        self.started.set()
        self.release.wait(30)
        self.returned.set()
        return self.result


@pytest.fixture
def held_check(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    held = Held(OFFERS)
    monkeypatch.setattr(settings_dialogs, "managed_spec_types", held)
    yield held
    held.release.set()


def _managed(qtbot, tasks) -> ChatSettingsDialog:  # noqa: ANN001
    dialog = ChatSettingsDialog(ChatSettings(target=Path("t.gguf"), draft=Path("d.gguf")), tasks=tasks)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.backend.setCurrentIndex(dialog.backend.findData(MANAGED))
    return dialog


def test_chat_settings_answers_while_the_llama_server_check_is_held(qtbot, tasks, held_check) -> None:  # noqa: ANN001
    dialog = _managed(qtbot, tasks)
    assert held_check.started.wait(5)  # the check runs, and the dialog is already up
    assert dialog.spec_type.currentText() == settings_dialogs.CHECKING
    dialog.top_k.setValue(7)  # the user edits meanwhile
    dialog.backend.setCurrentIndex(dialog.backend.findData(""))
    assert not dialog.spec_type.isEnabled() and dialog.result_settings().sampling.top_k == 7
    dialog.backend.setCurrentIndex(dialog.backend.findData(MANAGED))
    held_check.release.set()
    qtbot.waitUntil(lambda: dialog.spec_type.findData("draft-simple") >= 0, timeout=5_000)
    assert dialog.spec_type.currentData() == "draft-simple" and dialog.spec_type.findText(settings_dialogs.CHECKING) < 0
    mtp = dialog.spec_type.model().item(dialog.spec_type.findData("draft-mtp"))
    assert not mtp.isEnabled() and "multi-token" in mtp.toolTip()


def test_a_closed_chat_settings_dialog_takes_no_late_check(qtbot, tasks, held_check) -> None:  # noqa: ANN001
    dialog = _managed(qtbot, tasks)
    assert held_check.started.wait(5)
    dialog.reject()
    held_check.release.set()
    assert held_check.returned.wait(5)
    with qtbot.waitSignal(tasks.run_task(lambda task: None).returned, timeout=5_000):
        pass  # the runner is past the check, and any signal it sent has had its turn
    qtbot.wait(50)
    assert [dialog.spec_type.itemText(i) for i in range(dialog.spec_type.count())] == [settings_dialogs.CHECKING]


@pytest.fixture
def two_models(tmp_path: Path) -> tuple[Path, Path]:
    # the draft smaller than the target: one as large is never offered as its draft
    return write_gguf(tmp_path / "target.gguf", n_tensors=3), write_gguf(tmp_path / "draft.gguf", n_tensors=1)


@pytest.fixture
def held_read(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    real = Registry.drafts_for
    gate = Held(None)

    def drafts_for(self: Registry, target: str | Path):  # noqa: ANN202
        gate()
        return real(self, target)

    monkeypatch.setattr(Registry, "drafts_for", drafts_for)
    yield gate
    gate.release.set()


def _models_dialog(qtbot, fake_app, models: tuple[Path, Path]):  # noqa: ANN001, ANN202
    app = fake_app()
    s = app.start(qtbot)
    for path in models:
        s.registry.add(path)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentIndex(1)
    return s, dialog


def test_the_models_dialog_answers_while_the_headers_are_read(qtbot, fake_app, two_models, held_read) -> None:  # noqa: ANN001
    _s, dialog = _models_dialog(qtbot, fake_app, two_models)
    assert held_read.started.wait(5)
    assert [dialog.drafts.item(i).text() for i in range(dialog.drafts.count())] == [models_dialog.READING]
    assert not dialog.use_button.isEnabled()  # nothing to use until the verdicts are in
    dialog.tabs.setCurrentIndex(0)  # the user looks around meanwhile
    assert dialog.tabs.currentIndex() == 0
    dialog.tabs.setCurrentIndex(1)
    held_read.release.set()
    qtbot.waitUntil(lambda: dialog.drafts_read is None, timeout=10_000)
    texts = [dialog.drafts.item(i).text() for i in range(dialog.drafts.count())]
    assert texts[0].startswith("No draft") and any(t.startswith("✓") for t in texts[1:])
    assert dialog.use_button.isEnabled()
    assert dialog.drafts.currentItem().data(Qt.ItemDataRole.UserRole) is not None  # the usable draft is chosen


def test_a_closed_models_dialog_takes_no_late_headers(qtbot, fake_app, two_models, held_read,
                                                      monkeypatch) -> None:  # noqa: ANN001
    shown: list[object] = []
    real = models_dialog.ModelsDialog._show_drafts
    monkeypatch.setattr(models_dialog.ModelsDialog, "_show_drafts",
                        lambda self, drafts: (shown.append(drafts), real(self, drafts)))
    s, dialog = _models_dialog(qtbot, fake_app, two_models)
    assert held_read.started.wait(5)
    dialog.reject()  # deleted on close: a late result would land on a dead widget
    held_read.release.set()
    assert held_read.returned.wait(5)
    with qtbot.waitSignal(s.tasks.run_task(lambda task: None).returned, timeout=5_000):
        pass  # the runner is past the read, and any signal it sent has had its turn
    qtbot.wait(50)
    assert shown == []


def test_importing_reads_the_headers_as_a_task_and_lists_what_it_added(qtbot, fake_app, two_models,
                                                                        tmp_path) -> None:  # noqa: ANN001
    s = fake_app().start(qtbot)
    dialog = s.window.models_dialog()
    qtbot.addWidget(dialog)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    handle = dialog.import_paths([*two_models, junk])
    assert handle is not None and "reading the headers" in dialog.message.text()
    with qtbot.waitSignal(handle.finished, timeout=10_000):
        pass
    assert dialog.installed.count() == 2
    # what was added and what was skipped, one line a file (the import box says the same)
    assert "skipped junk.gguf: " in dialog.message.text() and "added target.gguf" in dialog.message.text()
