"""The entry point: --profile and --config, unknown commands, and a machine without a display.

The subprocess tests run ``python -m specchat`` in a clean environment (no DISPLAY, no
WAYLAND_DISPLAY, no QT_QPA_PLATFORM, throw-away XDG dirs), as a user on a server would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.__main__ import (
    COMMANDS,
    XCB_LIBRARIES,
    _loadable,
    display_problem,
    split_global_flags,
    unknown_command,
    xcb_problem,
)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "QT_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env[var] = str(tmp_path / "xdg" / var.lower())
    env.update(extra)
    return env


def specchat(env: dict[str, str], *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- no display ------------------------------------------------------------------------------


@pytest.mark.parametrize("environ, platform, refused", [
    ({}, "linux", True),
    ({"DISPLAY": ":0"}, "linux", False),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
    ({"DISPLAY": ""}, "linux", True),
    ({"QT_QPA_PLATFORM": "xcb"}, "linux", True),
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", True),
    ({"QT_QPA_PLATFORM": "wayland-egl"}, "linux", True),
    ({"QT_QPA_PLATFORM": "xcb:nograb"}, "linux", True),
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({"QT_QPA_PLATFORM": "minimal"}, "linux", False),
    ({"QT_QPA_PLATFORM": "wayland;offscreen"}, "linux", False),  # Qt falls back to offscreen
    ({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":1"}, "linux", False),
    ({}, "freebsd14", True),
    ({}, "darwin", False),
    ({}, "win32", False),
])
def test_display_problem(environ, platform, refused):
    problem = display_problem(environ, platform)
    assert (problem is not None) == refused
    if problem:
        assert "DISPLAY" in problem and "QT_QPA_PLATFORM=offscreen" in problem and "\n" not in problem


def test_the_app_without_a_display_is_one_line_and_no_qt_abort(tmp_path):
    proc = specchat(clean_env(tmp_path))
    line = one_line(proc, 2)
    assert line.startswith("specchat: no display") and ", ".join(COMMANDS) in line and "chats" in COMMANDS
    assert "qt.qpa" not in proc.stderr and proc.returncode != -6  # no "could not connect to display", no abort
    xcb = specchat(clean_env(tmp_path, QT_QPA_PLATFORM="xcb"), "--profile", tmp_path / "p")
    assert one_line(xcb, 2).startswith("specchat: no display")


def test_neither_an_unknown_command_nor_a_missing_display_imports_qt(tmp_path):
    code = ("import sys\nfrom specchat.__main__ import main\n"
            "codes = [main(['bnech']), main(['simulate', '--trace', 't']), main([])]\n"
            "print(codes, any(m.startswith('PySide6') for m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=clean_env(tmp_path))
    assert proc.stdout.strip() == "[2, 2, 2] False", proc.stderr


# -- unknown commands ------------------------------------------------------------------------


@pytest.mark.parametrize("word, hint", [("bnech", "did you mean 'bench'? "), ("simulat", "did you mean 'simulate'? "), ("hello", ""),
                                        ("chatz", "did you mean 'chat'? ")])
def test_an_unknown_command_lists_the_commands_and_never_opens_the_app(tmp_path, word, hint):
    proc = specchat(clean_env(tmp_path, QT_QPA_PLATFORM="offscreen"), word, "hi")
    assert one_line(proc, 2) == (f"specchat: unknown command '{word}' ({hint}commands: {', '.join(COMMANDS)}; "
                                 "'specchat' alone opens the app)")
    assert proc.stdout == ""
    assert unknown_command(word) in proc.stderr


def test_an_unknown_option_is_one_line(tmp_path):
    line = one_line(specchat(clean_env(tmp_path), "--verbose"), 2)
    assert "unrecognized arguments: --verbose" in line


# -- --profile and --config ------------------------------------------------------------------


@pytest.mark.parametrize("argv, config, profile, rest", [
    (["chat", "hi"], None, None, ["chat", "hi"]),
    (["--profile", "P", "chat", "hi"], None, "P", ["chat", "hi"]),
    (["chat", "--profile=P", "--config", "c.toml", "hi"], "c.toml", "P", ["chat", "hi"]),
    (["--config=c.toml", "models", "list"], "c.toml", None, ["models", "list"]),
    (["chat", "--", "--profile", "P"], None, None, ["chat", "--", "--profile", "P"]),
    # 'simulate --profile FILE' is its cost profile (docs/ARCHITECTURE.md), not the profile dir
    (["--profile", "P", "simulate", "--profile", "cost.json"], None, "P", ["simulate", "--profile", "cost.json"]),
])
def test_split_global_flags(argv, config, profile, rest):
    c, p, r = split_global_flags(argv)
    assert (c, p, r) == (Path(config) if config else None, Path(profile) if profile else None, rest)


@pytest.mark.parametrize("argv, needle", [(["--profile"], "--profile needs a directory"),
                                          (["--profile", "--config", "x"], "--profile needs a directory"),
                                          (["--config="], "--config needs a file")])
def test_a_global_flag_without_its_value(argv, needle):
    with pytest.raises(ValueError, match=needle):
        split_global_flags(argv)


def test_profiles_are_separate_and_config_overrides_the_file(tmp_path):
    env = clean_env(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (a / "config.toml").write_text("n_ctx = 2048\n")
    shown = specchat(env, "--profile", a, "config")
    assert shown.returncode == 0, shown.stderr
    assert f"from {a / 'config.toml'}" in shown.stdout and "n_ctx = 2048" in shown.stdout
    assert f"data: {a / 'data'}" in shown.stdout and f"cache: {a / 'cache'}" in shown.stdout
    other = specchat(env, "config", "--profile", b)
    assert "n_ctx = 4096" in other.stdout and f"data: {b / 'data'}" in other.stdout
    deploy = tmp_path / "deploy.toml"
    deploy.write_text("n_ctx = 1024\n")
    both = specchat(env, "--profile", a, "--config", deploy, "config")
    assert "n_ctx = 1024" in both.stdout and f"data: {a / 'data'}" in both.stdout


def test_a_profile_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert one_line(specchat(clean_env(tmp_path), "--profile", f, "config"), 2) == \
        f"specchat: --profile {f}: not a directory"


# -- Qt's xcb plugin without its system libraries (issue 25 item 10) ------------------------------


@pytest.mark.parametrize("environ, platform, checked", [
    ({"DISPLAY": ":0"}, "linux", True),  # Qt's default on an X11 session
    ({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}, "linux", True),
    ({"QT_QPA_PLATFORM": "xcb:nograb"}, "linux", True),
    ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),  # Qt tries wayland first
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", False),
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({"DISPLAY": ":0"}, "darwin", False),
    ({"DISPLAY": ":0"}, "win32", False),
])
def test_xcb_problem_names_the_missing_libraries_and_their_packages_in_one_line(environ, platform, checked):
    asked: list[str] = []

    def no_cursor(name: str) -> bool:
        asked.append(name)
        return name not in ("libxcb-cursor.so.0", "libxcb-keysyms.so.1")

    problem = xcb_problem(environ, platform, no_cursor)
    assert (problem is not None) == checked and bool(asked) == checked
    if problem:
        assert "libxcb-cursor.so.0, libxcb-keysyms.so.1" in problem and "\n" not in problem
        assert "sudo apt install libxcb-cursor0 libxcb-keysyms1'" in problem
    assert xcb_problem(environ, platform, lambda _name: True) is None  # all there: Qt may start


def test_the_readme_set_up_line_installs_every_library_the_check_asks_for():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    setup = next(line for line in readme.splitlines() if "sudo apt install build-essential" in line)
    assert all(package in setup for package in XCB_LIBRARIES.values()), setup


def test_the_app_without_xcb_libraries_is_one_line_and_no_qt_abort(tmp_path):
    missing = [name for name in XCB_LIBRARIES if not _loadable(name)]
    if not missing:
        pytest.skip("this machine has every library Qt's xcb plugin needs")
    proc = specchat(clean_env(tmp_path, DISPLAY=":77"), "--profile", tmp_path / "p")
    line = one_line(proc, 2)
    assert line.startswith("specchat: Qt's X11 platform plugin (xcb) needs") and missing[0] in line
    assert "could not" not in proc.stderr and proc.returncode != -6


def test_help_names_the_options_of_the_app_and_every_command(tmp_path):
    proc = specchat(clean_env(tmp_path), "--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--profile DIR", "--config FILE", "--self-test"):
        assert option in proc.stdout
