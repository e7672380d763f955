"""Models: the catalog with a fit verdict for this machine, downloads, installed models,
and for a chosen target the drafts that can serve it, with the reason for those that cannot."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from specchat.errors import collect_warnings
from specchat.models.catalog import CatalogPair, load_catalog_lenient
from specchat.models.compatibility import PairCompatibility
from specchat.models.fit import FitVerdict, fit_sizes, free_memory
from specchat.models.gguf_header import GGUFError
from specchat.models.hub import DownloadProgress, HubFile, human_bytes
from specchat.models.registry import Registry, RegistryError
from specchat.models.remote import check_remote_pair
from specchat.workers.download import DownloadService
from specchat.workers.hub_tasks import HubTasks

ROLE = Qt.ItemDataRole.UserRole


def fit_verdict(pair: CatalogPair, free_vram: int | None, free_ram: int) -> FitVerdict:
    """The same estimate as ``specchat models fit``, from the catalog's file sizes (the headers
    are not here before the download): weights, both KV caches and buffers at 4096 tokens."""
    files = [(m.file, m.size or 0) for m in pair.files()]
    return fit_sizes(files, free_vram=free_vram, free_ram=free_ram)


def recommended(pairs: list[CatalogPair], free_vram: int | None, free_ram: int) -> CatalogPair | None:
    """The largest pair that fits on the GPU; on a CPU-only machine the smallest pair."""
    on_gpu = [p for p in pairs if p.drafts and fit_verdict(p, free_vram, free_ram).where == "gpu"]
    if on_gpu:
        return max(on_gpu, key=lambda p: p.size)
    with_draft = [p for p in pairs if p.drafts]
    return min(with_draft, key=lambda p: p.size) if with_draft else None


class ModelsDialog(QDialog):
    pairChosen = Signal(object, object)  # target Path, draft Path | None

    def __init__(self, registry: Registry, downloads: DownloadService, hub: HubTasks, parent=None, *,
                 user_catalog: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(900, 560)
        self.registry = registry
        self.downloads = downloads
        self.hub = hub
        self._check: int | None = None  # the header check that must pass before the download starts
        # a damaged catalog.toml or a bad entry of it hides only itself; the problems are said below
        self.pairs, self.catalog_problems = load_catalog_lenient(user_catalog)
        self.free_vram, self.free_ram = free_memory()
        self._job: int | None = None
        layout = QVBoxLayout(self)
        rec = recommended(self.pairs, self.free_vram, self.free_ram)
        machine = ("no NVIDIA GPU found; " if self.free_vram is None else
                   f"{human_bytes(self.free_vram)} VRAM free; ") + f"{human_bytes(self.free_ram)} RAM free"
        self.recommendation = QLabel(f"This machine: {machine}."
                                     + (f"  Recommended pair: <b>{rec.name}</b>" if rec else ""))
        self.recommendation.setWordWrap(True)
        layout.addWidget(self.recommendation)
        if self.catalog_problems:  # your own catalog.toml: what of it is not listed, and why
            problems = QLabel("\n".join(self.catalog_problems))
            problems.setWordWrap(True)
            problems.setStyleSheet("color:#8a5a00;")
            layout.addWidget(problems)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._catalog_tab(rec), "Catalog")
        self.tabs.addTab(self._installed_tab(), "Installed")
        layout.addWidget(self.tabs)
        downloads.progress.connect(self._on_progress)
        downloads.finished.connect(self._on_finished)
        downloads.failed.connect(self._on_failed)
        hub.done.connect(self._on_checked)
        hub.failed.connect(self._on_check_failed)
        self.check_text = ""
        self.refresh_installed()

    # -- catalog --------------------------------------------------------------------

    def _catalog_tab(self, rec: CatalogPair | None) -> QWidget:
        tab = QWidget()
        v = QVBoxLayout(tab)
        self.catalog = QTableWidget(len(self.pairs), 4)
        self.catalog.setHorizontalHeaderLabels(["Pair", "Download", "On this machine", "Licence"])
        self.catalog.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.catalog.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.catalog.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, p in enumerate(self.pairs):
            name = QTableWidgetItem(p.name + ("  ★ recommended" if p is rec else ""))
            name.setData(ROLE, p.id)
            name.setToolTip("\n".join([p.target.ref, *(d.ref for d in p.drafts)]))
            self.catalog.setItem(row, 0, name)
            self.catalog.setItem(row, 1, QTableWidgetItem(human_bytes(p.size)))
            verdict = fit_verdict(p, self.free_vram, self.free_ram)
            cell = QTableWidgetItem(verdict.label)
            cell.setToolTip(verdict.summary)
            self.catalog.setItem(row, 2, cell)
            lic = QTableWidgetItem(p.licence + (" (gated)" if p.gated else ""))
            lic.setToolTip(p.gated)
            self.catalog.setItem(row, 3, lic)
            if p is rec:
                self.catalog.selectRow(row)
        v.addWidget(self.catalog)
        buttons = QHBoxLayout()
        self.download_button = QPushButton("Download pair")
        self.download_button.clicked.connect(self.download_selected)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_download)
        self.progress = QProgressBar()
        self.progress_label = QLabel("Downloads resume where they stopped and are checked against their hash.")
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.progress, 1)
        v.addLayout(buttons)
        v.addWidget(self.progress_label)
        return tab

    def download_selected(self) -> None:
        rows = self.catalog.selectionModel().selectedRows()
        if not rows or self.downloads.active is not None:
            return
        name = self.catalog.item(rows[0].row(), 0)
        if name is None:  # every catalog row has its name cell; nothing to download otherwise
            return
        pair = next(p for p in self.pairs if p.id == name.data(ROLE))
        files = [pair.target.hub_file()] + ([pair.drafts[0].hub_file()] if pair.drafts else [])
        sources = [pair.target.ref] + ([pair.drafts[0].ref] if pair.drafts else [])
        self.download_checked(files, sources, pair.name)

    def download_checked(self, files: list[HubFile], sources: list[str], name: str) -> None:
        """Download ``files`` (a target, then its draft); a pair's two headers are checked first, as
        ``specchat models pull`` does, so an incompatible pair costs two headers, not gigabytes."""
        if self.downloads.active is not None or self._check is not None:
            return
        self._sources = sources
        self.download_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        if len(files) != 2:
            self._start_download(files, name)
            return
        self.progress_label.setText(f"Checking that {name}'s draft shares the target's tokenizer (headers only)…")

        def check(should_cancel) -> tuple[PairCompatibility, int]:  # noqa: ANN001 (the hub thread's cancel check)
            return check_remote_pair(files[0], files[1])

        self._check = self.hub.submit(check)
        self._pending = (files, name)

    def _on_checked(self, task: int, result: object) -> None:
        if task != self._check:
            return
        self._check = None
        assert isinstance(result, tuple)  # check_remote_pair's (verdict, bytes read)
        verdict: PairCompatibility = result[0]
        fetched: int = result[1]
        files, name = self._pending
        if not verdict:
            self._end(f"Not downloaded: {name} is not a usable pair ({verdict.reason}); "
                      f"found from the two headers, {human_bytes(fetched)} read.")
            return
        self.check_text = f"Headers checked ({human_bytes(fetched)} read): the draft shares the target's tokenizer."
        self._start_download(files, name)

    def _on_check_failed(self, task: int, message: str) -> None:
        if task == self._check:
            self._check = None
            self._end(f"Not downloaded: {message}")

    def _start_download(self, files: list[HubFile], name: str) -> None:
        self._job = self.downloads.start(files)
        self.progress_label.setText(f"Starting {name}…")

    def cancel_download(self) -> None:
        if self._check is not None:
            self.hub.cancel(self._check)
            self._check = None
            self._end("Cancelled before the download started.")
            return
        self.downloads.cancel()

    def _on_progress(self, job: int, p: DownloadProgress) -> None:
        if job != self._job:
            return
        self.progress.setMaximum(1000)
        self.progress.setValue(int(1000 * p.done_bytes / p.total_bytes) if p.total_bytes else 0)
        eta = "" if p.eta_s is None else f", {p.eta_s:.0f} s left"
        self.progress_label.setText(f"{p.filename} ({p.file_index + 1}/{p.file_count}): "
                                    f"{human_bytes(p.done_bytes)} of {human_bytes(p.total_bytes)} at "
                                    f"{human_bytes(p.rate_bytes_s)}/s{eta}")

    def _on_finished(self, job: int, paths: list[Path]) -> None:
        if job != self._job:
            return
        try:
            for source, path in zip(self._sources, paths, strict=False):
                self.registry.add(path, source=source)
        except (GGUFError, RegistryError) as exc:  # the files stay where they are; say why they are not listed
            self._end(f"Downloaded, but not registered: {exc}")
            return
        self._end(" ".join(filter(None, [self.check_text,
                                         f"Downloaded and verified: {', '.join(Path(p).name for p in paths)}"])))
        self.check_text = ""
        self.refresh_installed()
        self.tabs.setCurrentIndex(1)

    def _on_failed(self, job: int, message: str, cancelled: bool) -> None:
        if job == self._job:
            self._end(("Cancelled; the next download resumes. " if cancelled else "") + message)

    def _end(self, text: str) -> None:
        self._job = None
        self.download_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress_label.setText(text)

    # -- installed -------------------------------------------------------------------

    def _installed_tab(self) -> QWidget:
        tab = QWidget()
        h = QHBoxLayout(tab)
        left = QVBoxLayout()
        left.addWidget(QLabel("Installed models (pick the target):"))
        self.installed = QListWidget()
        self.installed.currentItemChanged.connect(lambda *_: self.refresh_drafts())
        left.addWidget(self.installed)
        self.import_button = QPushButton("Import GGUF files…")
        self.import_button.clicked.connect(self.import_files)
        left.addWidget(self.import_button)
        right = QVBoxLayout()
        right.addWidget(QLabel("Drafts for this target (same tokenizer required):"))
        self.drafts = QListWidget()
        self.drafts.setWordWrap(True)
        right.addWidget(self.drafts)
        self.use_button = QPushButton("Use for this chat")
        self.use_button.clicked.connect(self._use)
        self.message = QLabel()
        self.message.setWordWrap(True)
        right.addWidget(self.message)
        right.addWidget(self.use_button)
        h.addLayout(left, 1)
        h.addLayout(right, 1)
        return tab

    def refresh_installed(self) -> None:
        self.installed.clear()
        try:
            with collect_warnings() as repaired:  # damaged while the app runs: moved aside, rebuilt, said
                installed = self.registry.models()
            if repaired:
                self.message.setText("\n".join(repaired))
        except RegistryError as exc:  # one it must not touch (a newer SpecChat's): say so
            self.message.setText(str(exc))
            installed = []
        for m in sorted(installed, key=lambda m: -m.size):
            item = QListWidgetItem(f"{m.name}  ({human_bytes(m.size)})" + ("" if m.is_current() else "  — missing"))
            item.setData(ROLE, m.path)
            item.setToolTip(m.path)
            self.installed.addItem(item)
        if self.installed.count():
            self.installed.setCurrentRow(0)

    def refresh_drafts(self) -> None:
        self.drafts.clear()
        item = self.installed.currentItem()
        if item is None:
            return
        none = QListWidgetItem("No draft (plain decoding, or prompt lookup)")
        none.setData(ROLE, None)
        self.drafts.addItem(none)
        try:
            drafts = self.registry.drafts_for(item.data(ROLE))
        except (GGUFError, RegistryError) as exc:
            self.message.setText(str(exc))
            drafts = []
        for model, verdict in drafts:
            entry = QListWidgetItem(f"✓ {model.name}" if verdict else f"✗ {model.name}: {verdict.reason}")
            entry.setData(ROLE, model.path if verdict else None)
            entry.setToolTip(verdict.reason)
            if not verdict:  # listed, with the reason, but cannot be picked
                entry.setFlags(entry.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsSelectable)
            self.drafts.addItem(entry)
        self.drafts.setCurrentRow(1 if self.drafts.count() > 1 and self.drafts.item(1).data(ROLE) else 0)

    def import_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Import GGUF files", str(Path.home()), "GGUF models (*.gguf)")
        self.import_paths([Path(p) for p in paths])

    def import_paths(self, paths: list[Path]) -> list[str]:
        errors = []
        for p in paths:
            try:
                self.registry.add(p)
            except (GGUFError, RegistryError) as exc:
                errors.append(str(exc))
        self.message.setText("\n".join(errors))
        self.refresh_installed()
        return errors

    def _use(self) -> None:
        target = self.installed.currentItem()
        draft = self.drafts.currentItem()
        if target is None:
            return
        d = draft.data(ROLE) if draft is not None else None
        self.pairChosen.emit(Path(target.data(ROLE)), Path(d) if d else None)
        self.accept()
