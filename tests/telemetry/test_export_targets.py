"""An export writes only regular files, and says why when it cannot (issue 37, class 4).

The atomic replace used to put a regular file over whatever had the chosen name: a FIFO, a
device (as root, ``/dev/null`` itself), a symbolic link (the link replaced, not its file).  Now a
folder, a device, a FIFO or a link to one of them is refused in one :class:`ExportError` line
and left as it was; a link to a regular file is written through and stays a link; a folder that
cannot be written is one line too.  The property test puts every kind of thing at the chosen
name, behind chains of links, for both formats.
"""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.event_streams import R, answer_events, feed_all
from specchat import files
from specchat.telemetry import ExportError, TelemetryRecorder, export_rounds


@pytest.fixture(scope="module")
def recorder() -> TelemetryRecorder:
    rec = TelemetryRecorder()
    feed_all(rec, 1, 11, answer_events([R(4, 4, 3)] * 5))
    return rec


def make(kind: str, path: Path) -> None:
    """Put a ``kind`` of thing at ``path``."""
    if kind == "regular":
        path.write_text("the user's own file\n")
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":  # a character device of our own (1, 3: what /dev/null is), never the system's
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind != "nothing":
        raise ValueError(kind)


def can_make_devices(tmp: Path) -> bool:
    try:
        make("device", tmp / "probe")
    except OSError:  # not root (CAP_MKNOD)
        return False
    (tmp / "probe").unlink()
    return True


def fingerprint(path: Path) -> tuple:
    """What is at ``path`` (not following a link): its kind, and a link's target or a file's text."""
    st_ = os.lstat(path)
    if stat.S_ISLNK(st_.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(st_.st_mode):
        return ("regular", path.read_bytes())
    return (stat.S_IFMT(st_.st_mode), st_.st_ino)


REFUSED = {"folder": "a folder", "fifo": "a FIFO", "device": "a character device"}


@pytest.mark.parametrize("via_link", [False, True])
@pytest.mark.parametrize("kind", list(REFUSED))
@pytest.mark.parametrize("name", ["rounds.csv", "rounds.json"])
def test_an_export_over_what_is_not_a_regular_file_is_refused_in_one_line_and_leaves_it(
        recorder, tmp_path, kind, via_link, name):
    if kind == "device" and not can_make_devices(tmp_path):
        pytest.skip("making a character device needs root")
    thing = tmp_path / ("target" if via_link else name)
    make(kind, thing)
    dest = tmp_path / name
    if via_link:
        dest.symlink_to(thing)
    before = {p.name: fingerprint(p) for p in tmp_path.iterdir()}
    with pytest.raises(ExportError) as caught:  # before: replaced by a regular file (or IsADirectoryError)
        export_rounds(recorder, dest)
    line = str(caught.value)
    assert str(dest) in line and REFUSED[kind] in line and "\n" not in line
    assert {p.name: fingerprint(p) for p in tmp_path.iterdir()} == before  # untouched, no temp file left


def test_a_link_to_a_regular_file_is_written_through_and_stays_a_link(recorder, tmp_path):
    real = tmp_path / "data" / "rounds.csv"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "rounds.csv"
    link.symlink_to(real)
    assert export_rounds(recorder, link) == f"exported 5 rounds to {link}"
    assert link.is_symlink() and os.readlink(link) == str(real)  # before: the link replaced by a file
    assert len(list(csv.DictReader(real.open()))) == 5


def test_a_link_to_nothing_is_refused(recorder, tmp_path):
    link = tmp_path / "rounds.csv"
    link.symlink_to(tmp_path / "gone" / "x.csv")
    with pytest.raises(ExportError, match="a symbolic link to nothing"):
        export_rounds(recorder, link)
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_a_folder_that_cannot_be_written_is_one_line(recorder, tmp_path, monkeypatch):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if os.access(folder, os.W_OK):  # root writes anyway: the folder refuses as a read-only mount would
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
    try:
        with pytest.raises(ExportError, match="Permission denied") as caught:  # before: a PermissionError
            export_rounds(recorder, folder / "rounds.csv")
        assert str(folder / "rounds.csv") in str(caught.value)
    finally:
        folder.chmod(0o700)
    assert list(folder.iterdir()) == []


KINDS = ["nothing", "regular", "folder", "fifo"]


@settings(derandomize=True, database=None, deadline=None, max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), links=st.integers(0, 3), name=st.sampled_from(["r.csv", "r.json", "r.CSV"]))
def test_an_export_writes_a_regular_file_that_reads_back_or_refuses_and_touches_nothing(
        recorder, tmp_path_factory, kind, links, name):
    folder = tmp_path_factory.mktemp("export")
    thing = folder / "thing"
    make(kind, thing)
    dest = thing
    for i in range(links):  # a chain of links to the thing
        link = folder / f"link{i}"
        link.symlink_to(dest)
        dest = link
    dest = dest.rename(folder / name) if links else thing.rename(folder / name) if kind != "nothing" else folder / name
    before = {p.name: fingerprint(p) for p in folder.iterdir()}
    try:
        line = export_rounds(recorder, dest)
    except ExportError as exc:
        assert kind in ("folder", "fifo") or (kind == "nothing" and links)  # only what is not a regular file
        assert "\n" not in str(exc) and str(dest) in str(exc)
        assert {p.name: fingerprint(p) for p in folder.iterdir()} == before
        return
    assert kind in ("nothing", "regular") and not (kind == "nothing" and links)
    assert line == f"exported 5 rounds to {dest}"
    written = Path(os.path.realpath(dest))
    assert stat.S_ISREG(os.lstat(written).st_mode)
    text = written.read_text()
    rows = json.loads(text)["rounds"] if name.endswith(".json") else list(csv.DictReader(text.splitlines()))
    assert len(rows) == 5
    # every link is still the link it was
    assert {n: f for n, f in before.items() if f[0] == "link"} == \
        {p.name: fingerprint(p) for p in folder.iterdir() if p.is_symlink()}
