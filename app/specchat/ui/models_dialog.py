"""Models: the catalog with a fit verdict for this machine, downloads, installed models,
and for a chosen target the drafts that can serve it, with the reason for those that cannot."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import get_token
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
from specchat.models.fit import FitVerdict, fit_sizes, free_memory
from specchat.models.gguf_header import GGUFError
from specchat.models.hub import HubFile, human_bytes
from specchat.models.hub_search import GGUFEntry
from specchat.models.registry import InstalledModel, Registry, RegistryError
from specchat.services.download import DownloadService
from specchat.services.download_flow import DownloadFlow, DownloadJob
from specchat.services.hub import HubCalls, HubTasks
from specchat.workers.tasks import TaskContext, TaskHandle, TaskRunner

from .draft_finder_tab import DraftFinderTab, target_name
from .hub_tab import HubSearchTab
from .theme import current

ROLE = Qt.ItemDataRole.UserRole
READING = "reading the models' headers…"


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


def installed_models(registry: Registry) -> list[InstalledModel]:
    """What the registry lists; [] when it cannot be read (the Installed tab says why)."""
    try:
        return registry.models()
    except RegistryError:
        return []


class ModelsDialog(QDialog):
    pairChosen = Signal(object, object)  # target Path, draft Path | None

    def __init__(self, registry: Registry, downloads: DownloadService, hub: HubTasks, parent=None, *,
                 tasks: TaskRunner, user_catalog: Path | None = None, cache_dir: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(980, 640)
        self.registry = registry
        self.tasks = tasks  # reads the installed models' headers (the drafts' verdicts) off the GUI thread
        self.drafts_read: TaskHandle | None = None
        self.importing: TaskHandle | None = None
        self.downloads = downloads
        self.hub = hub
        self.flow = DownloadFlow(registry, downloads, hub, self)
        # a damaged catalog.toml or a bad entry of it hides only itself; the problems are said below
        self.pairs, self.catalog_problems = load_catalog_lenient(user_catalog)
        self.free_vram, self.free_ram = free_memory()
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
            problems.setStyleSheet(f"color:{current().warning}")
            layout.addWidget(problems)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._catalog_tab(rec), "Catalog")
        self.tabs.addTab(self._installed_tab(), "Installed")
        self.search_tab = HubSearchTab(hub, free_vram=self.free_vram, free_ram=self.free_ram,
                                       has_token=get_token() is not None)
        self.search_tab.downloadRequested.connect(self.download_entry)
        self.tabs.addTab(self.search_tab, "Search the hub")
        self.finder = DraftFinderTab(hub, self.pairs, installed=lambda: installed_models(registry))
        self.finder.useRequested.connect(self.download_and_use)
        self.search_tab.findDraftsRequested.connect(self.find_drafts)
        self.tabs.addTab(self.finder, "Find a draft")
        layout.addWidget(self.tabs)
        layout.addLayout(self._download_bar())
        self.refresh_installed()
        self._fit_task: TaskHandle | None = None
        if cache_dir is not None:
            self.read_catalog_headers(cache_dir)
        self.finished.connect(self._cancel_tasks)

    def _download_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.flow.cancel)
        self.progress = QProgressBar()
        self.progress.setMaximum(1000)
        self.progress_label = QLabel("Downloads resume where they stopped and are checked against their hash.")
        self.progress_label.setWordWrap(True)
        bar.addWidget(self.cancel_button)
        bar.addWidget(self.progress)
        bar.addWidget(self.progress_label, 1)
        self.flow.message.connect(self.progress_label.setText)
        self.flow.progress.connect(self.progress.setValue)
        self.flow.busy.connect(self._busy)
        self.flow.completed.connect(lambda _paths: self.refresh_installed())
        return bar

    def _busy(self, busy: bool) -> None:
        self.cancel_button.setEnabled(busy)
        for button in (self.download_button, self.search_tab.download_button, self.finder.use_button):
            button.setEnabled(not busy)
        if not busy:
            self.search_tab._update_buttons()
            self.finder._update_button()

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
            self._set_fit(row, fit_verdict(p, self.free_vram, self.free_ram))  # until the headers are read
            lic = QTableWidgetItem(p.licence + (" (gated)" if p.gated else ""))
            lic.setToolTip(p.gated)
            self.catalog.setItem(row, 3, lic)
            if p is rec:
                self.catalog.selectRow(row)
        v.addWidget(self.catalog)
        buttons = QHBoxLayout()
        self.download_button = QPushButton("Download pair")
        self.download_button.clicked.connect(self.download_selected)
        buttons.addStretch(1)
        buttons.addWidget(self.download_button)
        v.addLayout(buttons)
        return tab

    def read_catalog_headers(self, cache_dir: Path) -> None:
        """Replace the size guesses of "On this machine" with the estimate from each pair's headers
        (installed files read locally; the others header-only on the hub, then cached in ``cache_dir``)."""
        pairs, free_vram, free_ram = self.pairs, self.free_vram, self.free_ram
        installed = {m.source: Path(m.path) for m in self._installed_models() if m.source and m.is_current()}
        self._fit_task = HubCalls(self.hub).catalog_fits(pairs, free_vram=free_vram, free_ram=free_ram,
                                                         cache_dir=cache_dir, installed=installed)
        self._fit_task.returned.connect(self._on_fits)
        self._fit_task.failed.connect(self._on_fits_failed)

    def _on_fits(self, result: object) -> None:
        self._fit_task = None
        if not isinstance(result, dict):
            return
        for row in range(self.catalog.rowCount()):
            name = self.catalog.item(row, 0)
            verdict = result.get(name.data(ROLE)) if name is not None else None
            if isinstance(verdict, FitVerdict):
                self._set_fit(row, verdict)

    def _on_fits_failed(self, message: str, _cancelled: bool) -> None:
        self._fit_task = None
        for row in range(self.catalog.rowCount()):
            cell = self.catalog.item(row, 2)
            if cell is not None:
                cell.setToolTip(f"{cell.toolTip()} (headers not read: {message})")

    def _set_fit(self, row: int, verdict: FitVerdict) -> None:
        cell = QTableWidgetItem(verdict.label + (" (from sizes)" if verdict.estimated else ""))
        cell.setToolTip(verdict.summary)
        self.catalog.setItem(row, 2, cell)

    def _cancel_tasks(self) -> None:
        """The dialog closed: nothing it asked the hub for, or is reading, is worth finishing."""
        if self.drafts_read is not None:
            self.drafts_read.cancel()
        if self._fit_task is not None:
            self._fit_task.cancel()
        self.search_tab.cancel_tasks()
        self.finder.cancel_tasks()

    def _installed_models(self) -> list[InstalledModel]:
        return installed_models(self.registry)

    def download_selected(self) -> None:
        rows = self.catalog.selectionModel().selectedRows()
        if not rows:
            return
        name = self.catalog.item(rows[0].row(), 0)
        if name is None:  # every catalog row has its name cell; nothing to download otherwise
            return
        pair = next(p for p in self.pairs if p.id == name.data(ROLE))
        models = [pair.target, *pair.drafts[:1]]
        files = tuple(m.hub_file() for m in models)
        self.flow.start(DownloadJob(pair.name, files, tuple((i, m.ref) for i, m in enumerate(models)),
                                    check=(files[0], files[1]) if len(files) == 2 else None))

    def download_entry(self, entry: GGUFEntry) -> None:
        """A file (or all parts of a split model) picked in Search the hub."""
        self.flow.start(DownloadJob(entry.name, entry.files, ((0, entry.ref),)))

    # -- the draft finder -------------------------------------------------------------

    def find_drafts(self, target: GGUFEntry | Path) -> None:
        self.tabs.setCurrentWidget(self.finder)
        self.finder.find_for(target)

    def download_and_use(self, target: GGUFEntry | Path, draft: GGUFEntry | Path) -> None:
        """Fetch what of the chosen pair is on the hub only (a Path is installed), then make them the
        chat's pair.  The finder has already checked the two headers, so the download starts at once."""
        pair = (target, draft)
        files: tuple[HubFile, ...] = ()
        register: list[tuple[int, str]] = []
        for model in pair:
            if isinstance(model, GGUFEntry):
                register.append((len(files), model.ref))
                files += model.files

        def use(paths: list[Path]) -> None:
            fetched = iter(paths)
            chosen = [model if isinstance(model, Path) else next(fetched) for model in pair]
            self.pairChosen.emit(chosen[0], chosen[1])
            self.accept()

        if not files:  # both installed
            use([])
            return
        self.flow.start(DownloadJob(f"{target_name(draft)} for {target_name(target)}", files, tuple(register),
                                    then=use))

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
        self.find_button = QPushButton("Find drafts on the hub…")
        self.find_button.setToolTip("Candidates of the target's family, checked header-only (about 1 MiB each)")
        self.find_button.clicked.connect(self._find_for_installed)
        self.message = QLabel()
        self.message.setWordWrap(True)
        right.addWidget(self.message)
        right.addWidget(self.find_button)
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
        """List the drafts for the chosen target with their verdicts.  The verdicts read GGUF headers
        (each installed model's, a few MB of metadata): a task, "reading…" meanwhile."""
        if self.drafts_read is not None:
            self.drafts_read.cancel()
            self.drafts_read = None
        self.drafts.clear()
        item = self.installed.currentItem()
        if item is None:
            return
        self.drafts.addItem(QListWidgetItem(READING))
        self.use_button.setEnabled(False)
        path, target = self.registry.path, item.data(ROLE)
        # its own Registry object: the task's thread shares no mutable object with this one
        self.drafts_read = self.tasks.run_task(lambda task: Registry(path).drafts_for(target), name="drafts-for")
        self.drafts_read.returned.connect(self._show_drafts)
        self.drafts_read.failed.connect(self._drafts_failed)

    def _drafts_failed(self, message: str, _cancelled: bool) -> None:
        self.message.setText(message)
        self._show_drafts([])

    def _show_drafts(self, drafts: object) -> None:
        self.drafts_read = None
        self.drafts.clear()
        self.use_button.setEnabled(True)
        none = QListWidgetItem("No draft (plain decoding, or prompt lookup)")
        none.setData(ROLE, None)
        self.drafts.addItem(none)
        for model, verdict in drafts if isinstance(drafts, list) else []:
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

    def import_paths(self, paths: list[Path]) -> TaskHandle | None:
        """Register ``paths``; adding one reads its GGUF header, so it runs as a task ("reading…"
        meanwhile); what could not be added is said in one line each when it is done."""
        if not paths:
            return None
        self.message.setText(f"reading the headers of {len(paths)} file(s)…")
        registry_path = self.registry.path

        def add_all(task: TaskContext) -> list[str]:
            registry, errors = Registry(registry_path), []  # its own object: nothing shared with this thread
            for p in paths:
                task.raise_if_cancelled()
                try:
                    registry.add(p)
                except (GGUFError, RegistryError) as exc:
                    errors.append(str(exc))
            return errors

        self.importing = self.tasks.run_task(add_all, name="import")
        self.importing.returned.connect(self._imported)
        self.importing.failed.connect(self._import_failed)
        return self.importing

    def _imported(self, errors: object) -> None:
        self.importing = None
        self.message.setText("\n".join(errors) if isinstance(errors, list) else "")
        self.refresh_installed()

    def _import_failed(self, message: str, _cancelled: bool) -> None:
        self.importing = None
        self.message.setText(message)
        self.refresh_installed()

    def _find_for_installed(self) -> None:
        item = self.installed.currentItem()
        if item is not None:
            self.find_drafts(Path(item.data(ROLE)))

    def _use(self) -> None:
        target = self.installed.currentItem()
        draft = self.drafts.currentItem()
        if target is None:
            return
        d = draft.data(ROLE) if draft is not None else None
        self.pairChosen.emit(Path(target.data(ROLE)), Path(d) if d else None)
        self.accept()
