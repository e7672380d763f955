"""The instance lock says why it cannot be taken: another app, or a data folder that cannot take a file.

A read-only, full or forbidden data folder used to read "already running (process 0)".  The folders
here are real: /sys (no one may create files there) and, where user namespaces allow it, a tmpfs of
16 KiB mounted in a child's own mount namespace, filled up or remounted read-only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specchat.profile import Profile
from specchat.ui.app import acquire_instance_lock


def profile_in(folder: Path) -> Profile:
    return Profile(folder, folder, folder, folder / "config.toml")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys, where no file can be created")
def test_a_folder_where_no_file_may_be_created_says_permission_not_already_running():
    said = acquire_instance_lock(profile_in(Path("/sys")))
    assert isinstance(said, str)
    assert "already running" not in said and "process 0" not in said
    assert said.startswith("no permission to write in the data folder /sys")


def test_a_lock_held_by_another_app_still_names_its_process(tmp_path):
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from specchat.profile import Profile
        from specchat.ui.app import acquire_instance_lock
        d = Path({str(tmp_path)!r})
        lock = acquire_instance_lock(Profile(d, d, d, d / "config.toml"))
        assert not isinstance(lock, str), lock
        print("held", flush=True)
        sys.stdin.read()
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said = acquire_instance_lock(profile_in(tmp_path))
        assert isinstance(said, str) and f"already running on this profile (process {holder.pid}," in said
    finally:
        holder.communicate("", timeout=60)


CHILD = """
import sys
from pathlib import Path
from specchat.profile import Profile
from specchat.ui.app import acquire_instance_lock
d = Path(sys.argv[1])
print(acquire_instance_lock(Profile(d, d, d, d / "config.toml")))
"""


def in_small_tmpfs(tmp_path: Path, then: str) -> str:
    """The lock's answer on a 16 KiB tmpfs at tmp_path/mnt after the shell command ``then`` ran on it."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=16k tmpfs {mnt} || exit 99; {then}; "
              f"exec {sys.executable} -c '{CHILD}' {mnt}")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                          env=env)
    if proc.returncode == 99 or "unshare failed" in proc.stderr or "Operation not permitted" in proc.stderr:
        pytest.skip(f"no user namespace with a tmpfs here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_full_data_folder_says_the_disk_is_full(tmp_path):
    said = in_small_tmpfs(tmp_path, f"dd if=/dev/zero of={tmp_path}/mnt/fill bs=1k count=64 2>/dev/null")
    assert said.startswith(f"the disk holding the data folder {tmp_path}/mnt is full"), said


def test_a_read_only_data_folder_says_read_only(tmp_path):
    said = in_small_tmpfs(tmp_path, f"mount -o remount,ro {tmp_path}/mnt")
    assert said.startswith(f"the data folder {tmp_path}/mnt is on a read-only file system"), said
