"""Starting and ending worker threads safely, and knowing which still run."""

from __future__ import annotations

import sys
import weakref

from PySide6.QtCore import QThread

_started: weakref.WeakSet[QThread] = weakref.WeakSet()


def start_thread(thread: QThread, priority: QThread.Priority = QThread.Priority.InheritPriority) -> None:
    """Start ``thread`` and remember it, so a test (or a shutdown check) can ask what still runs."""
    _started.add(thread)
    thread.start(priority)


def running_threads() -> list[str]:
    """Names of the worker threads started here that have not ended."""
    out = []
    for thread in list(_started):
        try:
            if thread.isRunning():
                out.append(thread.objectName() or "a worker thread")
        except RuntimeError:  # its C++ object is gone, so it is not running
            continue
    return out


def end_thread(thread: QThread, patience_ms: int) -> None:
    """Quit ``thread``'s event loop and return once the thread has ended.

    Never returns early: Qt aborts the whole process when a QThread object is destroyed
    while its thread still runs.  Callers cancel the work first, so the wait is one step
    (a decode round, a tensor, a network read); ``patience_ms`` only decides when to tell
    the terminal why the app has not exited yet.
    """
    thread.quit()
    if not thread.wait(patience_ms):
        print(f"specchat: waiting for {thread.objectName() or 'a worker thread'} to finish its current step",
              file=sys.stderr)
        thread.wait()
