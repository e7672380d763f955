"""Models: the catalog with a fit verdict for this machine (and which of its files are installed
already: an installed pair is used, never downloaded again), downloads, the library of installed
models (each named by its file, with its quantisation, size, context length, architecture and
folder; removed from the library, or deleted when SpecChat downloaded it), and for a chosen target
the drafts that can serve it, with the reason for those that cannot."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants, get_token
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
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
from specchat.models.hub import HubFile, human_bytes
from specchat.models.hub_search import GGUFEntry
from specchat.models.registry import (
    ImportReport,
    InstalledModel,
    Registry,
    RegistryError,
    downloaded_files,
    installed_copy,
)
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


def catalog_notes(pair: CatalogPair) -> list[str]:
    """What a pair's tooltip adds to its files: how it drafts, what it needs, what others measured."""
    out = []
    if pair.trained_head:
        out.append(f"A trained head drafts: SpecChat runs this pair in llama-server (--spec-type {pair.spec_type}; "
                   "build one with 'specchat servers build', or 'specchat cuda-build' for an NVIDIA GPU)")
    if pair.hardware:
        out.append(f"Needs: {pair.hardware}")
    if pair.published:
        out.append(f"Published: {pair.published}")
    return out


def recommended(pairs: list[CatalogPair], free_vram: int | None, free_ram: int) -> CatalogPair | None:
    """The largest pair SpecChat's own loop drafts for that fits on the GPU; on a CPU-only machine the
    smallest.  A pair with a trained head is never the first pick: it needs a llama-server build."""
    own = [p for p in pairs if p.drafts and not p.trained_head]
    on_gpu = [p for p in own if fit_verdict(p, free_vram, free_ram).where == "gpu"]
    if on_gpu:
        return max(on_gpu, key=lambda p: p.size)
    with_draft = own
    return min(with_draft, key=lambda p: p.size) if with_draft else None


def installed_models(registry: Registry) -> list[InstalledModel]:
    """What the registry lists; [] when it cannot be read (the Installed tab says why)."""
    try:
        return registry.models()
    except RegistryError:
        return []


def library_text(m: InstalledModel) -> str:
    """Two lines: the file's stem (never the header's general.name, which may name another build),
    then quantisation, size, context length, architecture and folder."""
    context = f"{m.context_length:,} ctx" if m.context_length else "context ?"
    kind = [f"trained head: drafts with llama-server --spec-type {m.drafter}"] if m.drafter else []
    details = " · ".join([m.quant or "quant ?", human_bytes(m.bytes), context, m.architecture, *kind, m.folder])
    return f"{m.display_name}{'' if m.is_current() else '  — missing'}\n{details}"


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
        self.import_box: QMessageBox | None = None  # what the last import added and skipped, while shown
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
        self._details_asked = False
        self.details_read: TaskHandle | None = None
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
        header = self.catalog.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # sizes, fit and licence whole
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)  # the pair's name takes what is left
        self.catalog.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        # one pair at a time: with extended selection, selectRow (the recommended pair, below) reads the
        # live modifiers, and a Ctrl still held from the shortcut that opened the dialog made it a toggle
        self.catalog.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.catalog.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, p in enumerate(self.pairs):
            name = QTableWidgetItem(p.name + ("  ★ recommended" if p is rec else ""))
            name.setData(ROLE, p.id)
            name.setToolTip("\n".join([p.target.ref, *(d.ref for d in p.drafts), *catalog_notes(p)]))
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
        self.catalog.itemSelectionChanged.connect(self._update_download_button)
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
        if self.details_read is not None:
            self.details_read.cancel()
        self.search_tab.cancel_tasks()
        self.finder.cancel_tasks()

    def _installed_models(self) -> list[InstalledModel]:
        return installed_models(self.registry)

    def _installed_copies(self, pair: CatalogPair) -> list[InstalledModel | None]:
        """The installed copy of each file of ``pair`` (target, first draft), None where there is none."""
        installed = self._installed_models()
        return [installed_copy(m, installed) for m in pair.files()]

    def refresh_catalog_installed(self) -> None:
        """The Download column says what is installed already (matched by source, sha256, or name and size)."""
        for row in range(self.catalog.rowCount()):
            name = self.catalog.item(row, 0)
            pair = next((p for p in self.pairs if name is not None and p.id == name.data(ROLE)), None)
            if pair is None:
                continue
            copies = self._installed_copies(pair)
            missing = sum(m.size or 0 for m, copy in zip(pair.files(), copies, strict=True) if copy is None)
            if all(copies):
                text = "✓ installed"
            elif any(copies):
                text = f"{human_bytes(missing)} ({'target' if copies[0] else 'draft'} installed)"
            else:
                text = human_bytes(pair.size)
            cell = QTableWidgetItem(text)
            cell.setToolTip("\n".join(f"{m.ref}: installed at {copy.path}" if copy else f"{m.ref}: not installed"
                                      for m, copy in zip(pair.files(), copies, strict=True)))
            self.catalog.setItem(row, 1, cell)
        self._update_download_button()

    def _selected_pair(self) -> CatalogPair | None:
        rows = self.catalog.selectionModel().selectedRows()
        name = self.catalog.item(rows[0].row(), 0) if rows else None
        if name is None:  # every catalog row has its name cell; nothing to download otherwise
            return None
        return next(p for p in self.pairs if p.id == name.data(ROLE))

    def _update_download_button(self) -> None:
        pair = self._selected_pair()
        copies = self._installed_copies(pair) if pair is not None else []
        self.download_button.setText("Use pair" if copies and all(copies) else
                                     "Download the missing file" if any(copies) else "Download pair")

    def download_selected(self) -> None:
        """Download the selected pair; what of it is installed already is used, not fetched again."""
        pair = self._selected_pair()
        if pair is None:
            return
        models = list(pair.files())
        copies = self._installed_copies(pair)
        if all(copies):
            paths = [Path(c.path) for c in copies if c is not None]
            self.pairChosen.emit(paths[0], paths[1] if len(paths) > 1 else None)
            self.accept()
            return
        wanted = [m for m, copy in zip(models, copies, strict=True) if copy is None]
        files = tuple(m.hub_file() for m in wanted)
        self.flow.start(DownloadJob(pair.name, files, tuple((i, m.ref) for i, m in enumerate(wanted)),
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
        self.installed.setWordWrap(True)
        self.installed.setAlternatingRowColors(True)
        self.installed.setSpacing(2)
        buttons = QHBoxLayout()
        self.import_button = QPushButton("Import GGUF files…")
        self.import_button.clicked.connect(self.import_files)
        self.remove_button = QPushButton("Remove…")
        self.remove_button.setToolTip("Remove from the library; a file SpecChat downloaded can be deleted too")
        self.remove_button.clicked.connect(self.remove_selected)
        buttons.addWidget(self.import_button)
        buttons.addWidget(self.remove_button)
        left.addLayout(buttons)
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
        for m in sorted(installed, key=lambda m: -m.bytes):
            item = QListWidgetItem(library_text(m))
            item.setData(ROLE, m.path)
            item.setToolTip(f"{m.name} (the name in its header)\n{m.path}"
                            + (f"\nfrom {m.source}" if m.source else "\nimported from disk"))
            self.installed.addItem(item)
        if self.installed.count():
            self.installed.setCurrentRow(0)
        self.remove_button.setEnabled(self.installed.count() > 0)
        self.refresh_catalog_installed()
        if any(not m.details_known for m in installed) and not self._details_asked:
            self._fill_details()

    def _fill_details(self) -> None:
        """Records written before the library kept quantisation and context: read their headers, as a task."""
        self._details_asked = True
        path = self.registry.path
        self.details_read = self.tasks.run_task(lambda task: Registry(path).fill_details(), name="library-details")
        self.details_read.returned.connect(self._details_filled)

    def _details_filled(self, filled: object) -> None:
        self.details_read = None
        if filled:
            self.refresh_installed()

    def _current_model(self) -> InstalledModel | None:
        item = self.installed.currentItem()
        if item is None:
            return None
        return next((m for m in self._installed_models() if m.path == item.data(ROLE)), None)

    def remove_selected(self) -> TaskHandle | None:
        """Remove the chosen model from the library, after asking; delete its files too when SpecChat
        downloaded them into the hub cache and the user says so.  A task (deleting GBs can take a while)."""
        model = self._current_model()
        if model is None:
            return None
        cache = Path(constants.HF_HUB_CACHE)
        choice = self.confirm_removal(model, downloaded_files(model, cache))
        if choice is None:
            return None
        registry_path, delete = self.registry.path, choice == "delete"

        def remove(task: TaskContext) -> int:
            registry = Registry(registry_path)  # its own object: nothing shared with this thread
            if delete:
                return registry.delete(model, cache)
            registry.remove(model.path)
            return 0

        self._removing = (model, delete)
        handle = self.tasks.run_task(remove, name="remove-model")
        handle.returned.connect(self._removed)
        handle.failed.connect(self._remove_failed)
        return handle

    def _removed(self, freed: object) -> None:
        model, delete = self._removing
        self.message.setText(f"Deleted {model.display_name}: {human_bytes(int(freed))} freed." if delete else  # type: ignore[call-overload]
                             f"Removed {model.display_name} from the library; the file stays in {model.folder}.")
        self.refresh_installed()

    def _remove_failed(self, message: str, _cancelled: bool) -> None:
        self.message.setText(message)
        self.refresh_installed()

    def confirm_removal(self, model: InstalledModel, files: list[Path]) -> str | None:
        """Ask: "delete" (files and record), "remove" (the record only) or None (cancelled).  Only a
        file SpecChat downloaded (``files`` not empty) can be deleted; a user's own file never is."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Remove model")
        if files:
            box.setText(f"Remove {model.display_name} from the library?")
            box.setInformativeText(f"SpecChat downloaded it into its cache ({model.folder}). Deleting frees "
                                   f"{human_bytes(model.bytes)}; a later download fetches it again.")
            delete = box.addButton("Delete the file", QMessageBox.ButtonRole.DestructiveRole)
        else:
            box.setText(f"Remove {model.display_name} from the library?")
            box.setInformativeText(f"The file stays in {model.folder}: it is yours, SpecChat never deletes it. "
                                   "Import it again to list it again.")
            delete = None
        keep = box.addButton("Remove from the library only" if files else "Remove", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        clicked = box.clickedButton()
        return "delete" if delete is not None and clicked is delete else "remove" if clicked is keep else None

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
            name = model.display_name  # the file's stem, as in the library
            entry = QListWidgetItem(f"✓ {name}" if verdict else f"✗ {name}: {verdict.reason}")
            entry.setData(ROLE, model.path if verdict else None)
            entry.setToolTip(f"{model.name} (the name in its header)\n{model.path}"
                             + (f"\n{verdict.reason}" if verdict.reason else ""))
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

        def add_all(task: TaskContext) -> ImportReport:
            # its own registry object: nothing shared with this thread; a registry it cannot use fails the task
            report = Registry(registry_path).import_files(paths, lambda: task.cancelled)
            task.raise_if_cancelled()
            return report

        self.importing = self.tasks.run_task(add_all, name="import")
        self.importing.returned.connect(self._imported)
        self.importing.failed.connect(self._import_failed)
        return self.importing

    def _imported(self, report: object) -> None:
        """Say what the import added (each file and its kind) and what it skipped and why: a box, and
        the same lines under the drafts."""
        self.importing = None
        self.refresh_installed()
        if not isinstance(report, ImportReport):
            return
        self.message.setText("\n".join([report.summary() + ":", *report.lines()]))
        icon = QMessageBox.Icon.Information if not report.skipped else QMessageBox.Icon.Warning
        box = QMessageBox(icon, "Import GGUF files", report.summary(), QMessageBox.StandardButton.Ok, self)
        box.setInformativeText("\n".join(report.lines()))
        lines = box.findChild(QLabel, "qt_msgbox_informativelabel")  # Qt's own name for it
        if lines is not None:
            lines.setMinimumWidth(min(560, self.width() * 2 // 3))  # a line a file, not a column of words
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.destroyed.connect(lambda: setattr(self, "import_box", None))
        box.open()
        self.import_box = box

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
