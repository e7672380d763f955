"""The load under way, under the chat's header: a slim bar and one line.

"Loading Qwen2.5-7B-Instruct-Q4_K_M.gguf… 43%", "Calibrating the draft: 5 of 12 timed decodes",
"Connecting to box (http://…)…".  It follows the :class:`~specchat.services.answers.AnswerService`'s
load signals (one load at a time, whichever chat asked for it) and is gone when the pair is
ready or the load fails: the failure is the pane's notice, never a bar left standing.
"""

from __future__ import annotations

from PySide6.QtWidgets import QProgressBar, QVBoxLayout, QWidget

from specchat.engine.progress import LoadProgress
from specchat.services.answers import AnswerService

from .fitting import ElidedLabel
from .theme import Theme, controller, current

BAR_HEIGHT = 4
STEPS = 1000  # the bar's resolution


class LoadProgressLine(QWidget):
    def __init__(self, answers: AnswerService, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        v = QVBoxLayout(self)
        v.setContentsMargins(8, 0, 8, 2)
        v.setSpacing(2)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(BAR_HEIGHT)
        self.label = ElidedLabel()
        v.addWidget(self.bar)
        v.addWidget(self.label)
        answers.pairLoading.connect(self.start)
        answers.pairProgress.connect(self.step)
        answers.pairLoaded.connect(self.finish)
        answers.pairFailed.connect(self.finish)
        controller().changed.connect(self._style)
        self._style(current())
        self.hide()
        if answers.loading is not None:  # a load began before this view was made
            self.start(answers.loading)
            if answers.load_progress is not None:
                self.step(answers.load_progress)

    @property
    def text(self) -> str:
        """The line as shown ("" when no load is under way)."""
        return "" if self.isHidden() else self.label.text()

    def start(self, label: str) -> None:
        """A load began: a busy bar until its first step says how far it is."""
        self.bar.setRange(0, 0)
        self.label.setText(f"Loading {label}…")
        self.show()

    def step(self, progress: LoadProgress) -> None:
        self.bar.setRange(0, STEPS)
        self.bar.setValue(round(progress.fraction * STEPS))
        self.label.setText(progress.text)
        self.show()

    def finish(self, *_: object) -> None:
        """Loaded or failed: nothing is loading any more."""
        self.hide()
        self.label.setText("")

    def _style(self, theme: Theme) -> None:
        self.label.setStyleSheet(f"color:{theme.muted};")
        self.bar.setStyleSheet(
            f"QProgressBar {{ border:none; background:{theme.bubble_border}; border-radius:2px; }}"
            f"QProgressBar::chunk {{ background:{theme.highlight}; border-radius:2px; }}")
