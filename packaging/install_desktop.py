"""Put SpecChat in the desktop menu: the .desktop file and the icons, for this user.

    python packaging/install_desktop.py                       # the 'specchat' on PATH (pip install)
    python packaging/install_desktop.py dist/specchat/specchat  # the one-folder build
    python packaging/install_desktop.py --uninstall

Installs into $XDG_DATA_HOME (default ~/.local/share): applications/specchat.desktop and
icons/hicolor/*/apps/specchat.{png,svg}, the freedesktop.org locations every Linux desktop
reads.  Exec is written as an absolute path, so the menu entry works without a PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def installed_files(share: Path) -> list[Path]:
    icons = ROOT / "assets" / "icons" / "hicolor"
    out = [share / "applications" / "specchat.desktop", share / "icons/hicolor/scalable/apps/specchat.svg"]
    out += [share / "icons" / "hicolor" / p.relative_to(icons) for p in sorted(icons.glob("*/apps/specchat.png"))]
    return out


def desktop_entry(executable: Path) -> str:
    text = (ROOT / "packaging" / "specchat.desktop").read_text(encoding="utf-8")
    exe = str(executable)
    quoted = f'"{exe}"' if " " in exe else exe
    lines = []
    for line in text.splitlines():
        if line.startswith("Exec="):
            line = f"Exec={quoted}"
        elif line.startswith("TryExec="):
            line = f"TryExec={exe}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def install(executable: Path, share: Path) -> list[Path]:
    app_dir = share / "applications"
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "specchat.desktop").write_text(desktop_entry(executable), encoding="utf-8")
    svg = share / "icons/hicolor/scalable/apps/specchat.svg"
    svg.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "assets" / "specchat.svg", svg)
    icons = ROOT / "assets" / "icons" / "hicolor"
    for png in sorted(icons.glob("*/apps/specchat.png")):
        dest = share / "icons" / "hicolor" / png.relative_to(icons)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, dest)
    for tool in (["update-desktop-database", str(app_dir)], ["gtk-update-icon-cache", "-q", str(share / "icons/hicolor")]):
        if shutil.which(tool[0]):  # optional: menus also notice new files by themselves
            subprocess.run(tool, check=False, capture_output=True)
    return installed_files(share)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("executable", nargs="?", help="the specchat program (default: the one on PATH)")
    ap.add_argument("--uninstall", action="store_true")
    args = ap.parse_args()
    share = data_home()
    if args.uninstall:
        for f in installed_files(share):
            f.unlink(missing_ok=True)
        print(f"removed SpecChat's menu entry and icons from {share}")
        return 0
    exe = Path(args.executable).resolve() if args.executable else (
        Path(shutil.which("specchat")) if shutil.which("specchat") else None)
    if exe is None or not exe.is_file() or not os.access(exe, os.X_OK):
        print(f"install_desktop: {args.executable or 'specchat'}: not an executable program "
              "(pip install -e . first, or give the built dist/specchat/specchat)", file=sys.stderr)
        return 2
    files = install(exe, share)
    print(f"installed {len(files)} files under {share}: SpecChat is in the desktop menu, running {exe}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
