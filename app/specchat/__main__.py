"""Entry point: ``specchat`` opens the desktop app; ``specchat CMD ...`` runs a command.

Two options for the app and the commands alike, taken out of the command line wherever
they stand (before ``--``):

- ``--profile DIR``: every file of the profile under DIR (DIR/config.toml, DIR/data,
  DIR/cache; see :class:`specchat.profile.Profile`), so profiles can run side by side;
- ``--config FILE``: the settings from FILE instead of the profile's config.toml.

An unknown command is an error that lists the commands, never the app; the app is
refused with one line, before Qt is imported, where there is no display to open it on, or
where Qt's X11 platform plugin (xcb) would abort for want of a system library.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

COMMANDS = ("chat", "bench", "serve", "simulate", "models", "servers", "chats", "cuda-build", "config")
PARSER_OPTIONS = ("-h", "--help", "--version")  # answered by the command-line parser
# Commands whose own options include --profile (the cost profile of 'specchat simulate',
# docs/ARCHITECTURE.md): after such a command word, --profile is theirs, not the profile dir.
OWN_PROFILE_OPTION = ("simulate",)


def split_global_flags(argv: list[str]) -> tuple[Path | None, Path | None, list[str]]:
    """Take ``--config FILE`` and ``--profile DIR`` (or ``--opt=VALUE``) out of argv.

    Returns (config file, profile dir, the rest).  ValueError (one line) for an option
    without its value.
    """
    found: dict[str, Path | None] = {"--config": None, "--profile": None}
    what = {"--config": "a file", "--profile": "a directory"}
    rest: list[str] = []
    it = iter(argv)
    command_seen = False
    for arg in it:
        if arg == "--":
            rest += [arg, *it]
            break
        name, eq, value = arg.partition("=")
        if name in found and not (name == "--profile" and command_seen and rest[0] in OWN_PROFILE_OPTION):
            if not eq:
                following = next(it, None)
                if following is None or following.startswith("-"):
                    raise ValueError(f"{name} needs {what[name]}")
                value = following
            if not value:
                raise ValueError(f"{name} needs {what[name]}")
            found[name] = Path(value).expanduser()
            continue
        rest.append(arg)
        command_seen = command_seen or not arg.startswith("-")
    return found["--config"], found["--profile"], rest


def display_problem(environ: Mapping[str, str], platform: str) -> str | None:
    """Why the desktop app cannot open a window here, or None.

    Only on Linux and the other X11/Wayland systems (not macOS, not Windows), only when
    Qt would use xcb or wayland (QT_QPA_PLATFORM unset, or naming only those): then
    DISPLAY or WAYLAND_DISPLAY must be set, or Qt aborts the process.
    """
    if platform.startswith(("win", "darwin")):
        return None
    wanted = [p.split(":", 1)[0].strip().lower() for p in environ.get("QT_QPA_PLATFORM", "").split(";")]
    wanted = [p for p in wanted if p]
    if any(not p.startswith(("xcb", "wayland")) for p in wanted):
        return None  # offscreen, minimal, eglfs, vnc, ...: no display server needed
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    return ("no display to open the app on (neither DISPLAY nor WAYLAND_DISPLAY is set): use the terminal "
            f"commands ({', '.join(COMMANDS)}; 'specchat --help'), or set QT_QPA_PLATFORM=offscreen")


# What Qt's xcb platform plugin (PySide6 6.5+, libQt6XcbQpa) loads from the system, by soname, with the
# Debian/Ubuntu package that has it; the README's set-up line installs the same packages.
XCB_LIBRARIES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0", "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0", "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0", "libxcb-shm.so.0": "libxcb-shm0", "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-util.so.1": "libxcb-util1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0", "libX11-xcb.so.1": "libx11-xcb1", "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1",
}


def _loadable(soname: str) -> bool:
    """Whether the dynamic loader finds a library (what Qt's plugin loader will ask it)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def xcb_problem(environ: Mapping[str, str], platform: str,
                loadable: Callable[[str], bool] = _loadable) -> str | None:
    """The system libraries Qt's xcb plugin needs and cannot find, in one line; None when it can
    load (or Qt will not use xcb: not Linux, another platform asked for, or a Wayland session).

    Without them Qt prints "could not load the Qt platform plugin xcb" and aborts the process.
    """
    if not platform.startswith("linux"):
        return None
    wanted = [p.split(":", 1)[0].strip().lower() for p in environ.get("QT_QPA_PLATFORM", "").split(";")]
    wanted = [p for p in wanted if p]
    if wanted and not wanted[0].startswith("xcb"):
        return None
    if not wanted and environ.get("WAYLAND_DISPLAY"):
        return None  # Qt tries its wayland plugin first
    missing = [name for name in XCB_LIBRARIES if not loadable(name)]
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(XCB_LIBRARIES[name] for name in missing))
    return (f"Qt's X11 platform plugin (xcb) needs {', '.join(missing)}, not installed: on Debian/Ubuntu "
            f"'sudo apt install {packages}' (QT_QPA_PLATFORM=offscreen specchat --self-test checks the rest)")


def unknown_command(word: str) -> str:
    close = difflib.get_close_matches(word, COMMANDS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return (f"unknown command '{word}' ({hint}commands: {', '.join(COMMANDS)}; "
            "'specchat' alone opens the app)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--probe-cpu-kernels"]:  # internal: the child of engine/cpu_kernels.py's probe
        from specchat.engine.cpu_kernels_probe import main as probe_main

        return probe_main(argv[1:])
    if argv[:1] == ["--pdf-text"]:  # internal: the child that reads a PDF's text (attachments.pdf_text)
        from specchat.attachments import pdf_text_main

        return pdf_text_main(argv[1:])
    try:
        config_path, profile_dir, argv = split_global_flags(argv)
    except ValueError as exc:
        print(f"specchat: {exc}", file=sys.stderr)
        return 2
    if argv[:1] == ["--self-test"]:
        from specchat.ui.self_test import run_self_test

        return run_self_test(argv[1:])
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        print(f"specchat: {unknown_command(argv[0])}", file=sys.stderr)
        return 2

    from specchat.profile import Profile

    if profile_dir is not None and profile_dir.exists() and not profile_dir.is_dir():
        print(f"specchat: --profile {profile_dir}: not a directory", file=sys.stderr)
        return 2
    profile = Profile.at(profile_dir) if profile_dir is not None else Profile.default()
    if not argv:
        problem = display_problem(os.environ, sys.platform) or xcb_problem(os.environ, sys.platform)
        if problem:
            print(f"specchat: {problem}", file=sys.stderr)
            return 2
        from specchat.ui.app import run_app

        return run_app([], config_path=config_path, profile=profile)
    from specchat.cli import main as cli_main

    return cli_main(argv, config_path=config_path, profile=profile)


if __name__ == "__main__":
    sys.exit(main())
