"""The packaged desktop app: the PyInstaller build starts headless and runs a model; menu entry and icons."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packaging"))

import build_app  # noqa: E402  (packaging/build_app.py)
import install_desktop  # noqa: E402  (packaging/install_desktop.py)
import render_icons  # noqa: E402  (packaging/render_icons.py)


@pytest.mark.slow
@pytest.mark.real_models
def test_the_built_app_starts_headless_streams_an_answer_and_exits_cleanly(tmp_path, smollm):
    exe = build_app.build(tmp_path / "dist", tmp_path / "work")
    proc = build_app.self_test(exe, smollm)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "ok   llama.cpp loaded" in out and "ok   window and telemetry panel shown" in out
    assert "ok   streamed an answer" in out and "self-test passed" in out
    assert_cpu_kernels_checked(out)  # the probe's child is the bundle's own executable
    assert "Traceback" not in proc.stderr
    # the same binary runs the commands, from the bundle's own libraries
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("specchat ")


def test_icons_are_rendered_from_the_one_svg():
    from PySide6.QtGui import QImage

    assert render_icons.WINDOW_ICON.read_bytes() == render_icons.SVG.read_bytes(), \
        "run: python packaging/render_icons.py"
    for size in render_icons.SIZES:
        image = QImage(str(render_icons.png_path(size)))
        assert (image.width(), image.height()) == (size, size), "run: python packaging/render_icons.py"
        assert image.hasAlphaChannel()


def test_desktop_entry_goes_into_the_menu_with_an_absolute_exec(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    exe = tmp_path / "My Apps" / "specchat"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "argv", ["install_desktop.py", str(exe)])
    assert install_desktop.main() == 0
    files = install_desktop.installed_files(tmp_path / "share")
    assert all(f.is_file() for f in files) and len(files) == 2 + len(render_icons.SIZES)
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(tmp_path / "share" / "applications" / "specchat.desktop")
    d = entry["Desktop Entry"]
    assert d["Type"] == "Application" and d["Name"] == "SpecChat" and d["Icon"] == "specchat"
    assert d["Exec"] == f'"{exe}"' and d["TryExec"] == str(exe)  # quoted: the path has a space
    assert d["Categories"].endswith(";") and d["Terminal"] == "false"
    monkeypatch.setattr(sys, "argv", ["install_desktop.py", "--uninstall"])
    assert install_desktop.main() == 0
    assert not any(f.exists() for f in files)


def test_desktop_install_refuses_a_missing_program(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.setattr(sys, "argv", ["install_desktop.py", str(tmp_path / "nothing")])
    assert install_desktop.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an executable program" in err[0]
    assert not (tmp_path / "share").exists()


def test_self_test_in_this_environment_passes():
    """The check the build runs, here: window, panel and llama.cpp load (no model)."""
    proc = subprocess.run([sys.executable, "-m", "specchat", "--self-test"], capture_output=True, text=True,
                                timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    assert "ok   window and telemetry panel shown" in proc.stdout
    assert_cpu_kernels_checked(proc.stdout)


def assert_cpu_kernels_checked(out: str) -> None:
    """--self-test says what the CPU probe found: the kernels run here, or which fault (issue 31); never
    that the probe could not run."""
    line = next((x for x in out.splitlines() if x.startswith("ok   llama.cpp's") and "kernels" in x), "")
    assert re.search(r"kernels (run here|fault on this machine)", line), out
