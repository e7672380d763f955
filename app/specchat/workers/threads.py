"""Ending a worker thread safely."""

from __future__ import annotations

import sys

from PySide6.QtCore import QThread


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
