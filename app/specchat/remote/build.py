"""Build ``llama-server`` (and ``ggml-rpc-server``) from the llama.cpp that llama-cpp-python vendors.

The installed llama-cpp-python's sdist carries the very llama.cpp its bindings were built
from (``vendor/llama.cpp``, server tools included), so the server SpecChat manages speaks
the same model formats and speculative types as the local engine.  One build per machine,
per llama-cpp-python version and per accelerator::

    <root>/<version>-<accel>/src/            vendor/llama.cpp, extracted once
    <root>/<version>-<accel>/build/          cmake's build tree (incremental)
    <root>/<version>-<accel>/bin/llama-server, bin/ggml-rpc-server
    <root>/<version>-<accel>/build.json      the stamp: version, accel, cmake args, sha256s
    <root>/<version>-<accel>/build.log       the last build's full output

A build with a matching stamp is reused without running anything; one without (killed,
failed, or started by hand) is configured and built again in place, which cmake makes
incremental.  Two processes never build the same directory at once (a file lock).

Qt-free; its one error type is :class:`~specchat.remote.errors.ServerError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from specchat.errors import exit_description, one_line
from specchat.files import FileBusyError, locked, write_text_atomically
from specchat.remote.errors import ServerError

DIST = "llama_cpp_python"
ACCELS = ("cpu", "cuda", "metal", "vulkan")
# The server, and the worker that lends a box's devices to a llama-server elsewhere
# (llama-server --rpc HOST:PORT; tools/rpc/CMakeLists.txt names the target ggml-rpc-server).
TARGETS = ("llama-server", "ggml-rpc-server")
# The hand-started CPU build used exactly these (the web UI off and never downloaded,
# no OpenSSL: the server only listens on 127.0.0.1 or behind the user's own proxy; static,
# so bin/llama-server runs from wherever it is copied), plus the RPC backend for all.
BASE_CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_RPC=ON",
)
_ACCEL_ARGS = {
    "cpu": (),
    "cuda": ("-DGGML_CUDA=ON",),
    "metal": ("-DGGML_METAL=ON",),
    "vulkan": ("-DGGML_VULKAN=ON",),
}
STAMP = "build.json"
LOG = "build.log"
VENDOR = PurePosixPath("vendor/llama.cpp")
# The vendored tree of 0.3.36 is 176 MB in 2,900 files; anything far past that is not it.
MAX_EXTRACT_BYTES = 2 << 30
MAX_EXTRACT_MEMBERS = 100_000
# A CUDA build on a small machine takes well over an hour; a second process waits that long.
BUILD_WAIT_S = 4 * 3600.0
_VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}")
_EXE = ".exe" if os.name == "nt" else ""

Runner = Callable[[Sequence[str], Path, Path], int]
"""Runs a command in a directory with its output appended to a log file; returns its exit code."""


def run_logged(cmd: Sequence[str], cwd: Path, log_path: Path, env: Mapping[str, str] | None = None) -> int:
    """The real :data:`Runner`: stdout and stderr appended to ``log_path``, no stdin (``env``: the
    whole environment, else this process's).

    An interrupt (Ctrl-C) kills the command before it propagates (subprocess.run does).
    """
    with log_path.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        return subprocess.run(list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False,
                              env=dict(env) if env is not None else None).returncode


def default_build_root() -> Path:
    """Where builds are cached: the user cache dir (Linux ``~/.cache/specchat``) / ``llama-server``,
    the same base as scripts/test_models.py's models."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specchat")) / "llama-server"


def installed_version() -> str:
    """The installed llama-cpp-python's version, checked to be safe in a directory name."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version(DIST)
    except PackageNotFoundError:
        raise ServerError("llama-server build: llama-cpp-python is not installed; "
                          "install SpecChat's dependencies first") from None
    if not _VERSION_RE.fullmatch(v):
        raise ServerError(f"llama-server build: llama-cpp-python reports an odd version {v!r}; reinstall it")
    return v


def check_accel(accel: str) -> str:
    if accel not in _ACCEL_ARGS:
        raise ServerError(f"llama-server build: unknown accelerator {accel!r}; use one of {', '.join(ACCELS)}")
    return accel


def cmake_args(accel: str) -> list[str]:
    """The cmake configure arguments for ``accel`` (one of :data:`ACCELS`)."""
    return [*BASE_CMAKE_ARGS, *_ACCEL_ARGS[check_accel(accel)]]


def build_dir(dest_root: Path, version: str, accel: str) -> Path:
    return dest_root / f"{version}-{check_accel(accel)}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _read_stamp(directory: Path) -> dict[str, object] | None:
    try:
        raw = (directory / STAMP).read_bytes()[:65536]
        stamp = json.loads(raw)
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def cached_build(dest_root: Path, accel: str, *, version: str | None = None,
                 verify: bool = False, extra_args: Sequence[str] | None = None) -> Path | None:
    """The finished build's ``bin/llama-server`` for ``accel``, or None.

    Finished means: a stamp for this version, accelerator and cmake arguments, and every
    binary it names present with its size (``verify``: and its sha256, about 30 ms a binary).
    ``extra_args`` (a toolchain's and architecture's, :mod:`specchat.remote.cuda_toolchain`) must
    match too where given; None takes the build whatever they were.
    """
    version = version or installed_version()
    directory = build_dir(dest_root, version, accel)
    stamp = _read_stamp(directory)
    if stamp is None or stamp.get("version") != version or stamp.get("accel") != accel \
            or stamp.get("cmake_args") != cmake_args(accel) \
            or (extra_args is not None and stamp.get("extra_args", []) != list(extra_args)):
        return None
    binaries = stamp.get("binaries")
    if not isinstance(binaries, dict) or set(binaries) != set(TARGETS):
        return None
    for name, facts in binaries.items():
        path = directory / "bin" / (name + _EXE)
        if not isinstance(facts, dict):
            return None
        try:
            if not path.is_file() or path.stat().st_size != facts.get("size"):
                return None
            if verify and sha256_of(path) != facts.get("sha256"):
                return None
        except OSError:
            return None
    return directory / "bin" / ("llama-server" + _EXE)


def build_llama_server(dest_root: Path, *, accel: str = "cpu", sdist: Path | None = None,
                       jobs: int | None = None, log: Callable[[str], None] = print,
                       run: Runner = run_logged, extra_args: Sequence[str] = ()) -> Path:
    """Build (or reuse) llama-server for ``accel`` under ``dest_root``; returns its path.

    ``sdist``: the llama-cpp-python source archive of the installed version (downloaded
    with pip when None and the source is not extracted yet).  ``run`` runs cmake and pip
    (tests pass a fake).  ``extra_args``: more configure arguments (a CUDA toolchain from the
    package index and the card's architecture), kept in the stamp.  Raises ServerError, one
    line (the full output is in build.log).
    """
    version = installed_version()
    directory = build_dir(dest_root, version, accel)
    extra = list(extra_args)
    done = cached_build(dest_root, accel, version=version, verify=True, extra_args=extra)
    if done is not None:
        return done
    cmake = _tools()
    try:
        with _build_lock(directory, log):
            done = cached_build(dest_root, accel, version=version, verify=True, extra_args=extra)
            if done is not None:  # another process finished it while we waited
                return done
            return _build(directory, version, accel, cmake, sdist, jobs, log, run, extra)
    except OSError as e:
        raise ServerError(f"llama-server build in {directory}: {e.strerror or e}; "
                          "check the disk and its permissions") from None


def _tools() -> str:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise ServerError("cmake not found: install cmake (e.g. apt install cmake) "
                          "or put a llama-server on PATH")
    if os.name != "nt":  # on Windows cmake finds Visual Studio's compiler itself
        compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
        if not any(c and shutil.which(c) for c in compilers):
            raise ServerError("C++ compiler not found: install one (e.g. apt install build-essential) "
                              "or put a llama-server on PATH")
    return cmake


@contextlib.contextmanager
def _build_lock(directory: Path, log: Callable[[str], None]) -> Iterator[None]:
    stamp = directory / STAMP
    try:
        with locked(stamp, timeout=0):
            yield
        return
    except FileBusyError:
        pass
    log(f"another process is building llama-server in {directory}; waiting for it")
    try:
        with locked(stamp, timeout=BUILD_WAIT_S):
            yield
    except FileBusyError:
        raise ServerError(f"llama-server build in {directory}: another process has held its lock for "
                          f"{BUILD_WAIT_S / 3600:.0f} h; end it or remove {stamp}.lock") from None


def _build(directory: Path, version: str, accel: str, cmake: str, sdist: Path | None,
           jobs: int | None, log: Callable[[str], None], run: Runner, extra: list[str]) -> Path:
    log_path = directory / LOG
    log_path.write_text(f"llama-server {version}-{accel} build, {time.strftime('%Y-%m-%d %H:%M:%S')}\n",
                        encoding="utf-8")
    src = directory / "src"
    if not (src / "CMakeLists.txt").is_file():
        _remove_leftovers(directory)
        with tempfile.TemporaryDirectory(dir=directory, prefix=".sdist-") as tmp:
            archive = sdist if sdist is not None else _download_sdist(Path(tmp), version, log, run, log_path)
            log(f"extracting vendor/llama.cpp from {archive.name}")
            extract_llama_cpp(archive, src, version=version)
    args = cmake_args(accel)
    log(f"configuring llama.cpp ({accel}) in {directory / 'build'}")
    _step("cmake configure", run([cmake, "-S", "src", "-B", "build", *args, *extra], directory, log_path), log_path)
    n = jobs if jobs and jobs > 0 else os.cpu_count() or 1
    log(f"building {' and '.join(TARGETS)} with {n} job(s); the log is {log_path}")
    _step("cmake build", run([cmake, "--build", "build", "--config", "Release", "--target", *TARGETS,
                              "-j", str(n)], directory, log_path), log_path)
    binaries = {name: _install(directory, name) for name in TARGETS}
    stamp = {"version": version, "accel": accel, "cmake_args": args, "extra_args": extra, "targets": list(TARGETS),
             "binaries": binaries, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_text_atomically(directory / STAMP, json.dumps(stamp, indent=2) + "\n")
    log(f"llama-server ready at {directory / 'bin' / ('llama-server' + _EXE)}")
    return directory / "bin" / ("llama-server" + _EXE)


def _remove_leftovers(directory: Path) -> None:
    """Before extracting: a ``src`` without its CMakeLists.txt and the temp dirs of an extraction
    or download that was killed (every path here is the build cache's own)."""
    for leftover in [directory / "src", *directory.glob(".src-*"), *directory.glob(".sdist-*")]:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        elif leftover.exists() or leftover.is_symlink():
            leftover.unlink()


def _download_sdist(dest: Path, version: str, log: Callable[[str], None], run: Runner,
                    log_path: Path) -> Path:
    """pip downloads the installed version's sdist into ``dest`` (a temp dir: once extracted, the
    source stays in ``src`` and the 77 MB archive is not needed again)."""
    log(f"downloading the {DIST} {version} source from the package index")
    rc = run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
              "--disable-pip-version-check", f"{DIST}=={version}", "-d", str(dest)], dest, log_path)
    _step("pip download", rc, log_path)
    found = sorted(p for p in dest.iterdir() if p.name.endswith(".tar.gz"))
    if len(found) != 1:
        raise ServerError(f"llama-server build: pip download left {len(found)} source archives instead of "
                          f"one {DIST}-{version}.tar.gz; see {log_path}")
    return found[0]


def _step(name: str, rc: int, log_path: Path) -> None:
    if rc != 0:
        raise ServerError(f"llama-server build: {name} failed (it {exit_description(rc)}): {last_error_line(log_path)}; "
                          f"full log: {log_path}")


def last_error_line(log_path: Path, tail_bytes: int = 256 * 1024) -> str:
    """The line of a build log that says what went wrong: the first compiler ``error:`` or
    ``CMake Error`` (with its message line) in the log's tail, else its last non-empty line."""
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return "no log"
    lines = [ln for ln in lines if ln]
    for i, line in enumerate(lines):
        if "CMake Error" in line:
            following = lines[i + 1] if i + 1 < len(lines) else ""
            return one_line(f"{line} {following}", 300)
        if re.search(r"\berror\b:|fatal error", line, re.IGNORECASE):
            return one_line(line, 300)
    return one_line(lines[-1], 300) if lines else "no output"


def _install(directory: Path, name: str) -> dict[str, object]:
    """Copy the built ``name`` into ``directory/bin`` atomically; returns its size and sha256."""
    built = directory / "build" / "bin"
    for candidate in (built / (name + _EXE), built / "Release" / (name + _EXE)):
        if candidate.is_file():
            break
    else:
        raise ServerError(f"llama-server build: cmake finished but made no {name}; see {directory / LOG}")
    dest = directory / "bin" / (name + _EXE)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(candidate, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {"size": dest.stat().st_size, "sha256": sha256_of(dest)}


def extract_llama_cpp(sdist: Path, dest: Path, *, version: str | None = None) -> None:
    """Extract only ``<top>/vendor/llama.cpp/`` of ``sdist`` into ``dest`` (which must not exist).

    Every member is checked first: a path that is absolute, climbs out (``..``), is a
    device, or a link pointing out of the tree is refused (ServerError, naming it), and so
    is an archive far larger than llama.cpp or (``version`` given) of another version.  The tree appears at ``dest`` in one rename,
    so a killed extraction never looks finished.
    """
    try:
        with tarfile.open(sdist, "r:*") as tar:
            members = _vendored_members(tar, sdist)
            top = PurePosixPath(members[0].name).parts[0]
            if version is not None and top.lower().replace("-", "_") != f"{DIST}_{version}".lower().replace("-", "_"):
                raise ServerError(f"llama-server build: {sdist} holds {top}, not the installed "
                                  f"{DIST} {version}; pass that version's source archive")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".src-") as tmp:
                tar.extractall(tmp, members=members, filter="data")
                os.replace(Path(tmp, top, *VENDOR.parts), dest)
    except (tarfile.TarError, OSError) as e:
        raise ServerError(f"llama-server build: cannot extract {sdist}: {one_line(str(e), 200)}; "
                          "is it a llama-cpp-python source archive?") from None


def _vendored_members(tar: tarfile.TarFile, sdist: Path) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    total = 0
    for count, m in enumerate(tar):
        if count >= MAX_EXTRACT_MEMBERS:
            raise ServerError(f"llama-server build: {sdist} has more than {MAX_EXTRACT_MEMBERS} members; "
                              "it is not a llama-cpp-python source archive")
        path = PurePosixPath(m.name)
        if m.name.startswith(("/", "\\")) or ".." in path.parts or ":" in path.parts[0]:
            raise ServerError(f"llama-server build: {sdist} has an unsafe member {m.name!r}; refusing it")
        if len(path.parts) < 3 or PurePosixPath(*path.parts[1:3]) != VENDOR:
            continue
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise ServerError(f"llama-server build: {sdist} has a special file {m.name!r}; refusing it")
        if m.issym() or m.islnk():
            target = PurePosixPath(m.linkname)
            resolved = target if m.islnk() else path.parent / target
            if target.is_absolute() or not _inside(resolved, PurePosixPath(*path.parts[:3])):
                raise ServerError(f"llama-server build: {sdist} has a link {m.name!r} -> {m.linkname!r} "
                                  "pointing out of llama.cpp; refusing it")
        total += max(m.size, 0)
        if total > MAX_EXTRACT_BYTES:
            raise ServerError(f"llama-server build: {sdist} unpacks to more than "
                              f"{MAX_EXTRACT_BYTES >> 30} GiB; it is not a llama-cpp-python source archive")
        members.append(m)
    if not members or len({PurePosixPath(m.name).parts[0] for m in members}) != 1:
        raise ServerError(f"llama-server build: {sdist} holds no single <name>/vendor/llama.cpp/ tree; "
                          "it is not a llama-cpp-python source archive")
    return members


def _inside(path: PurePosixPath, root: PurePosixPath) -> bool:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if not parts:
                return False
            parts.pop()
        elif part != ".":
            parts.append(part)
    return tuple(parts[: len(root.parts)]) == root.parts
