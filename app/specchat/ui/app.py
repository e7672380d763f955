"""Start the desktop app in an order that cannot abort.

1. The instance lock: one app per profile (a second one says so and touches nothing).
2. The config, the chat database and the model registry are opened and checked.  A
   problem is one dialog (and one stderr line) that names the file and what to do; the
   file is never overwritten; exit 2.  A damaged database can be moved aside (renamed
   with a timestamp) to start fresh.
3. What the last run left if it crashed (:mod:`specchat.native_work`: its pair is not preloaded),
   this run's crash log; only then the worker threads start (an :class:`AppSession`), and the
   window shows.

Nothing before step 3 starts a thread, and a session that fails to build ends the threads it
started before the error travels on, so no error path can end in Qt's "QThread: Destroyed while
thread is still running" abort.  One handler around it all: a :class:`~specchat.errors.UserError`
that no step named is one line (exit 2); anything else is SpecChat's bug, said in one line with
where its traceback was written (``DATA/errors.log``, exit 1), never a traceback on the screen.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.errors import UserError, collect_warnings, one_line
from specchat.files import move_aside
from specchat.native_work import NativeWork, enable_crash_log, read_last_crash
from specchat.profile import Profile

from .slot_errors import log_traceback

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

    from specchat.config import AppConfig
    from specchat.models.registry import Registry
    from specchat.store import Store

EXIT_BAD_INPUT = 2
EXIT_ALREADY_RUNNING = 1
EXIT_BUG = 1
DAMAGED_LINE_MS = 60_000  # what reading the chats repaired, in the status bar
ERRORS_LOG = "errors.log"  # DATA/errors.log: the tracebacks of SpecChat's bugs (slot_errors.py)
QUIT = "Quit"
MOVE_ASIDE = "Move it aside and start fresh"
CONTINUE = "Continue"

# shows a message with buttons and returns the button chosen (None: closed)
Prompt = Callable[[str, tuple[str, ...]], str | None]


def dialog_prompt(text: str, buttons: tuple[str, ...]) -> str | None:
    """A modal message box; without a screen (offscreen) nobody can answer, so it answers Quit."""
    from PySide6.QtWidgets import QAbstractButton, QApplication, QMessageBox

    app = QApplication.instance()  # typed QCoreApplication; a message box needs a QApplication
    if not isinstance(app, QApplication) or app.platformName() in ("offscreen", "minimal"):
        return QUIT if QUIT in buttons else buttons[0] if buttons else None
    icon = QMessageBox.Icon.Critical if QUIT in buttons else QMessageBox.Icon.Warning
    box = QMessageBox(icon, "SpecChat", text)
    made: dict[QAbstractButton, str] = {box.addButton(b, QMessageBox.ButtonRole.AcceptRole if b != QUIT else QMessageBox.ButtonRole.RejectRole): b
            for b in buttons}
    box.exec()
    return made.get(box.clickedButton())


def acquire_instance_lock(profile: Profile):
    """The profile's instance lock (a held ``QLockFile``), or one line saying why not.

    QLockFile writes its process id into the file and treats a lock whose process is gone
    (a crash, kill -9) as stale and takes it over, however old it is.
    """
    from PySide6.QtCore import QLockFile

    try:
        profile.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the data folder {profile.data_dir}: {exc.strerror}"
    lock = QLockFile(str(profile.instance_lock))
    lock.setStaleLockTime(0)  # stale only when its process is gone
    if lock.tryLock(500):
        return lock
    held, (pid, _host, _app) = lock.error() == QLockFile.LockError.LockFailedError, lock.getLockInfo()
    if not (held and pid):  # not another app: the folder cannot take the lock file (read-only, full, denied)
        return _unwritable(profile.data_dir) or (
            f"cannot take the instance lock {profile.instance_lock} (Qt's lock error {lock.error().name}): "
            "start another profile with --profile DIR")
    return (f"SpecChat is already running on this profile (process {pid}, {profile.data_dir}): "
            "switch to its window, or start another profile with --profile DIR")


def _unwritable(folder: Path) -> str | None:
    """Why a small file cannot be written in ``folder`` (read-only, full, no permission), in one line; None
    when it can.  Written, synced and removed: a full disk often takes the name and refuses the bytes."""
    import errno
    import os
    import tempfile

    other = "or start another profile with --profile DIR"
    try:
        fd, name = tempfile.mkstemp(prefix=".specchat-probe-", dir=folder)
    except OSError as exc:
        err = exc
    else:
        try:
            try:
                os.write(fd, b"\0" * 4096)
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(name)
        except OSError as exc:
            err = exc
        else:
            return None
    if err.errno == errno.EROFS:
        return f"the data folder {folder} is on a read-only file system: make it writable, {other}"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk holding the data folder {folder} is full: free some space, {other}"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write in the data folder {folder}: fix its owner or permissions, {other}"
    return f"cannot write in the data folder {folder} ({err.strerror or err}): {other}"


def _say(prompt: Prompt, text: str, buttons: tuple[str, ...] = (QUIT,)) -> str | None:
    print(f"specchat: {text}", file=sys.stderr)
    return prompt(text, buttons)


def run_app(argv: list[str] | None = None, *, config_path: Path | None = None, profile: Profile | None = None,
            prompt: Prompt = dialog_prompt) -> int:
    """The app, from the instance lock to the window's close; the exit code.  Nothing reaches the user as
    a traceback: a problem with the files is one line naming the file (exit 2), a bug of SpecChat one line
    saying so and where its traceback is (``DATA/errors.log``, exit 1)."""
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    profile = (profile or Profile.default()).with_config_file(config_path)
    existing = QApplication.instance()  # typed QCoreApplication: the window needs a QApplication
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0], *(argv or [])])
    app.setApplicationName("SpecChat")
    app.setOrganizationName("SpecChat")
    app.setDesktopFileName("specchat")  # matches packaging/specchat.desktop (Wayland, task bars)
    app.setWindowIcon(QIcon(str(Path(__file__).with_name("specchat.svg"))))

    # 1. one instance per profile
    lock = acquire_instance_lock(profile)
    if isinstance(lock, str):
        _say(prompt, lock)
        return EXIT_ALREADY_RUNNING
    try:
        return _start(app, profile, config_path, prompt)
    except UserError as exc:  # a problem the user can act on that no step named: one line, as the CLI says it
        _say(prompt, str(exc))
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the one top-level handler: anything else is SpecChat's bug
        where = log_traceback(profile.data_dir / ERRORS_LOG, traceback.format_exc())
        _say(prompt, f"SpecChat could not go on: a bug in SpecChat ({one_line(f'{type(exc).__name__}: {exc}', 160)})"
                     f"{where}; please report it")
        return EXIT_BUG
    finally:
        lock.unlock()


def _start(app: QApplication, profile: Profile, config_path: Path | None, prompt: Prompt) -> int:
    """Steps 2 and 3 under the instance lock: the files, then the threads and the window; the exit code."""
    from PySide6.QtCore import QSettings

    from .session import AppSession
    from .slot_errors import SlotErrors
    from .theme import apply_theme

    # 2. everything that can be wrong with the files, before any thread starts; what the
    # core repaired on the way (a damaged registry moved aside and rebuilt, damaged rows of the
    # database) is said after
    with collect_warnings() as repaired:
        opened = _open_files(profile, config_path, prompt)
    if isinstance(opened, int):
        return opened
    config, store, registry = opened
    try:
        if repaired:  # one dialog for them all
            more = f" (and {len(repaired) - 3} more)" if len(repaired) > 3 else ""
            _say(prompt, " ".join(repaired[:3]) + more, (CONTINUE,))

        # 3. how the last run ended (a crash in llama.cpp leaves its record), this run's crash log, the
        # threads, then the window
        last_crash = read_last_crash(profile.data_dir)
        if last_crash is not None:
            print(f"specchat: {last_crash.line()}", file=sys.stderr)
        enable_crash_log(profile.data_dir)
        apply_theme(str(config["theme"]))
        with collect_warnings() as read_damaged:  # rows the window's first reads repaired (store/records.py)
            session = AppSession(store, config, registry, profile=profile,
                                 window_state=QSettings(str(profile.config_dir / "window.ini"),
                                                        QSettings.Format.IniFormat),
                                 last_crash=last_crash, work=NativeWork(profile.data_dir))
    except BaseException:
        store.close()  # the session owns it once it stands
        raise
    session.window.show()
    for text in read_damaged:
        print(f"specchat: {text}", file=sys.stderr)
    if read_damaged:  # the window is up: one line in its status bar, not a dialog per row
        more = f" (and {len(read_damaged) - 1} more)" if len(read_damaged) > 1 else ""
        session.window.statusBar().showMessage(read_damaged[0] + more, DAMAGED_LINE_MS)
    slot_errors = SlotErrors(lambda line: session.window.statusBar().showMessage(line, 30_000),
                             profile.data_dir / ERRORS_LOG)
    try:
        with slot_errors.installed():
            return app.exec()
    finally:
        session.close()


def _open_files(profile: Profile, config_path: Path | None, prompt: Prompt) -> tuple[AppConfig, Store, Registry] | int:
    """(config, store, registry), each checked; or the exit code after saying what is wrong."""
    from specchat.config import AppConfig, ConfigError
    from specchat.models.registry import Registry, RegistryError
    from specchat.store import StoreError, open_store

    try:
        config = AppConfig(profile.config_file, must_exist=config_path is not None)
        config.controller()
    except ConfigError as exc:
        _say(prompt, f"{exc}. Fix the file or move it aside (SpecChat never overwrites it).")
        return EXIT_BAD_INPUT
    try:  # an older schema is backed up first (DATA/backups), and put back if its migration fails
        store = open_store(profile.database, backup_keep=int(config["backup_keep"]))  # type: ignore[call-overload]
    except StoreError as exc:
        choice = _say(prompt, f"{exc}. SpecChat can move the file aside (renamed, nothing deleted) and "
                              "start with no chats, or quit.", (MOVE_ASIDE, QUIT))
        if choice != MOVE_ASIDE:
            return EXIT_BAD_INPUT
        moved = move_aside(profile.database)
        print(f"specchat: moved the damaged database to {moved}", file=sys.stderr)
        try:
            store = open_store(profile.database)
        except StoreError as again:
            _say(prompt, str(again))
            return EXIT_BAD_INPUT
    try:
        registry = Registry(profile.registry)
    except RegistryError as exc:
        store.close()
        _say(prompt, f"{exc}")
        return EXIT_BAD_INPUT
    return config, store, registry
