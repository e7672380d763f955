"""Build the one-folder desktop app with PyInstaller, then start it headless to prove it runs.

    pip install -e ".[package]"
    python packaging/build_app.py [--dist dist] [--skip-check]

Result: dist/specchat/specchat (run it, or put it in the desktop menu with
python packaging/install_desktop.py dist/specchat/specchat).  The check runs
``dist/specchat/specchat --self-test`` offscreen: the window, the telemetry panel
and llama.cpp's libraries must all load from the bundle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(dist: Path, work: Path) -> Path:
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        raise SystemExit("build: PyInstaller is not installed; run: pip install -e \".[package]\"") from None
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work), str(ROOT / "packaging" / "specchat.spec")]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    exe = dist / "specchat" / ("specchat.exe" if os.name == "nt" else "specchat")
    size = sum(f.stat().st_size for f in (dist / "specchat").rglob("*") if f.is_file() and not f.is_symlink())
    print(f"build: {exe} in {time.perf_counter() - t0:.0f} s, {size / 2**20:.0f} MiB in the folder")
    return exe


def self_test(exe: Path, model: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Start the built app headless (a clean environment: nothing from this venv leaks in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["QT_QPA_PLATFORM"] = "offscreen"
    cmd = [str(exe), "--self-test"] + (["--target", str(model)] if model else [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=exe.parent.parent)


def main() -> int:
    ap = argparse.ArgumentParser(description="Build the SpecChat desktop app (one folder).")
    ap.add_argument("--dist", type=Path, default=ROOT / "dist")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller")
    ap.add_argument("--skip-check", action="store_true", help="do not start the built app")
    ap.add_argument("--model", type=Path, default=None, help="also load this GGUF and stream an answer in the check")
    args = ap.parse_args()
    exe = build(args.dist.resolve(), args.work.resolve())
    if args.skip_check:
        return 0
    proc = self_test(exe, args.model)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-4000:] if proc.returncode else "")
    if proc.returncode < 0:  # a native fault in the built app: say which, not a bare status
        from specchat.errors import exit_description

        print(f"build_app: the built app's --self-test {exit_description(proc.returncode)}", file=sys.stderr)
        return 1
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
