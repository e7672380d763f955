"""Building llama-server from the vendored llama.cpp: the arguments, the cache and its stamp, the
lock, the one-line failures and a safe extraction.  cmake and pip are replaced by a recorder
(``run=``), so nothing here compiles or downloads."""

from __future__ import annotations

import io
import json
import tarfile
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from specchat.remote import build
from specchat.remote.errors import ServerError

VERSION = build.installed_version()
TOP = f"llama_cpp_python-{VERSION}"
HAND_STARTED_CPU_ARGS = [  # the build started by hand in ~/.cache/specchat/llama-server/0.3.36-cpu
    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
]


class FakeRun:
    """Stands in for cmake and pip: records each command, makes what it would make."""

    def __init__(self, sdist: Path | None = None, fail: str = "", gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[list[str], Path]] = []
        self.sdist, self.fail, self.gate = sdist, fail, gate

    def __call__(self, cmd: Sequence[str], cwd: Path, log_path: Path) -> int:
        cmd = list(cmd)
        self.calls.append((cmd, cwd))
        step = "pip" if "pip" in cmd else "build" if "--build" in cmd else "configure"
        if self.gate is not None:
            self.gate.wait(10)
        if step == self.fail:
            with log_path.open("a") as f:
                f.write("[ 40%] Building CXX object src/llama.cpp.o\n"
                        "/src/llama.cpp:12:5: error: 'foo' was not declared in this scope\n"
                        "gmake: *** [Makefile:146: all] Error 2\n")
            return 2
        if step == "pip":
            dest = Path(cmd[cmd.index("-d") + 1])
            assert self.sdist is not None
            (dest / self.sdist.name).write_bytes(self.sdist.read_bytes())
        if step == "build":
            for name in build.TARGETS:
                out = cwd / "build" / "bin" / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(f"{name} built from {cwd.name}".encode())
        return 0

    def steps(self) -> list[str]:
        return ["pip" if "pip" in c else "build" if "--build" in c else "configure" for c, _ in self.calls]


def make_sdist(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                name, data = m
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def good_members() -> list[tarfile.TarInfo | tuple[str, bytes]]:
    link = tarfile.TarInfo(f"{TOP}/vendor/llama.cpp/tools/server/public-link")
    link.type, link.linkname = tarfile.SYMTYPE, "server.cpp"
    return [(f"{TOP}/vendor/llama.cpp/CMakeLists.txt", b"project(llama.cpp)\n"),
            (f"{TOP}/vendor/llama.cpp/tools/server/server.cpp", b"int main() {}\n"),
            (f"{TOP}/llama_cpp/__init__.py", b"# the bindings: not extracted\n"),
            (f"{TOP}/CMakeLists.txt", b"# the bindings' build: not extracted\n"),
            link]


@pytest.fixture
def tools(tmp_path, monkeypatch) -> Path:
    """cmake and a C++ compiler on PATH (never run: the runner is fake)."""
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    for name in ("cmake", "c++"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 99\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CXX", raising=False)
    return bin_dir


@pytest.fixture
def sdist(tmp_path) -> Path:
    return make_sdist(tmp_path / f"{TOP}.tar.gz", good_members())


# --- arguments ---------------------------------------------------------------------------------

def test_cmake_args_per_accelerator():
    # the CPU build finds the hand-started one's arguments, plus the RPC backend for all
    assert build.cmake_args("cpu") == [*HAND_STARTED_CPU_ARGS, "-DGGML_RPC=ON"]
    for accel, flag in (("cuda", "-DGGML_CUDA=ON"), ("metal", "-DGGML_METAL=ON"), ("vulkan", "-DGGML_VULKAN=ON")):
        assert build.cmake_args(accel) == [*build.cmake_args("cpu"), flag]
    with pytest.raises(ServerError, match="unknown accelerator 'rocm'; use one of cpu, cuda, metal, vulkan"):
        build.cmake_args("rocm")


# --- the cache -----------------------------------------------------------------------------------

def test_a_build_extracts_configures_builds_stamps_and_is_then_reused_without_running_anything(
        tmp_path, tools, sdist):
    root = tmp_path / "root"
    run = FakeRun()
    binary = build.build_llama_server(root, sdist=sdist, jobs=3, run=run, log=lambda _: None)
    directory = root / f"{VERSION}-cpu"
    assert binary == directory / "bin" / "llama-server" and binary.read_bytes() == b"llama-server built from " \
        + directory.name.encode()
    assert (directory / "bin" / "ggml-rpc-server").is_file()
    assert sorted(p.name for p in (directory / "src").rglob("*")) == [
        "CMakeLists.txt", "public-link", "server", "server.cpp", "tools"]
    (configure, cwd1), (compile_, cwd2) = run.calls
    assert cwd1 == cwd2 == directory
    assert configure == [str(tools / "cmake"), "-S", "src", "-B", "build", *build.cmake_args("cpu")]
    assert compile_ == [str(tools / "cmake"), "--build", "build", "--config", "Release",
                        "--target", "llama-server", "ggml-rpc-server", "-j", "3"]
    stamp = json.loads((directory / "build.json").read_text())
    assert stamp["version"] == VERSION and stamp["accel"] == "cpu" and stamp["cmake_args"] == build.cmake_args("cpu")
    assert stamp["binaries"]["llama-server"]["sha256"] == build.sha256_of(binary)

    again = FakeRun()
    assert build.build_llama_server(root, sdist=sdist, run=again, log=lambda _: None) == binary
    assert again.calls == []
    assert build.cached_build(root, "cpu") == binary and build.cached_build(root, "cuda") is None


def test_a_damaged_binary_or_a_stamp_for_other_arguments_is_rebuilt_in_place(tmp_path, tools, sdist):
    root = tmp_path / "root"
    binary = build.build_llama_server(root, sdist=sdist, run=FakeRun(), log=lambda _: None)
    binary.write_bytes(bytes(len(binary.read_bytes())))  # same size, other bytes
    run = FakeRun()
    build.build_llama_server(root, run=run, log=lambda _: None)  # no sdist needed: src is there
    assert run.steps() == ["configure", "build"]

    stamp_path = binary.parent.parent / "build.json"
    stamp = json.loads(stamp_path.read_text())
    stamp["cmake_args"] = HAND_STARTED_CPU_ARGS  # a stamp from before the RPC backend
    stamp_path.write_text(json.dumps(stamp))
    run = FakeRun()
    build.build_llama_server(root, run=run, log=lambda _: None)
    assert run.steps() == ["configure", "build"]


def test_a_hand_started_build_is_finished_in_place_not_started_over(tmp_path, tools):
    directory = tmp_path / "root" / f"{VERSION}-cpu"
    (directory / "src").mkdir(parents=True)
    (directory / "src" / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    (directory / "build" / "CMakeFiles").mkdir(parents=True)
    run = FakeRun()  # no sdist: it would fail if asked to download or extract
    binary = build.build_llama_server(tmp_path / "root", run=run, log=lambda _: None)
    assert run.steps() == ["configure", "build"] and run.calls[0][1] == directory
    assert (directory / "src" / "CMakeLists.txt").read_text() == "project(llama.cpp)\n"
    assert build.cached_build(tmp_path / "root", "cpu") == binary


def test_without_an_sdist_pip_downloads_the_installed_version_and_keeps_no_archive(tmp_path, tools, sdist):
    run = FakeRun(sdist=sdist)
    build.build_llama_server(tmp_path / "root", run=run, log=lambda _: None)
    assert run.steps() == ["pip", "configure", "build"]
    pip = run.calls[0][0]
    assert pip[1:4] == ["-m", "pip", "download"] and f"llama_cpp_python=={VERSION}" in pip
    assert pip[pip.index("--no-binary") + 1] == ":all:" and "--no-deps" in pip
    directory = tmp_path / "root" / f"{VERSION}-cpu"
    assert (directory / "src" / "tools" / "server" / "server.cpp").is_file()
    assert not list(directory.glob(".sdist-*")) and not list(directory.glob(".src-*"))


def test_a_failed_step_is_one_line_naming_the_step_the_error_and_the_log(tmp_path, tools, sdist):
    root = tmp_path / "root"
    with pytest.raises(ServerError) as info:
        build.build_llama_server(root, sdist=sdist, run=FakeRun(fail="build"), log=lambda _: None)
    log_path = root / f"{VERSION}-cpu" / "build.log"
    assert str(info.value) == (f"llama-server build: cmake build failed (it exited with status 2): /src/llama.cpp:12:5: error: "
                               f"'foo' was not declared in this scope; full log: {log_path}")
    assert build.cached_build(root, "cpu") is None
    run = FakeRun()  # fixed: the next call finishes it, from the extracted source
    build.build_llama_server(root, run=run, log=lambda _: None)
    assert run.steps() == ["configure", "build"] and build.cached_build(root, "cpu") is not None


def test_missing_cmake_or_compiler_is_one_line(tmp_path, monkeypatch, tools):
    (tools / "cmake").unlink()
    with pytest.raises(ServerError, match=r"^cmake not found: install cmake \(e.g. apt install cmake\) or put a "
                                          r"llama-server on PATH$"):
        build.build_llama_server(tmp_path / "root", run=FakeRun(), log=lambda _: None)
    (tools / "cmake").write_text("#!/bin/sh\n")
    (tools / "cmake").chmod(0o755)
    (tools / "c++").unlink()
    with pytest.raises(ServerError, match="C\\+\\+ compiler not found"):
        build.build_llama_server(tmp_path / "root", run=FakeRun(), log=lambda _: None)


def test_a_second_builder_waits_for_the_first_and_reuses_its_build(tmp_path, tools, sdist):
    root = tmp_path / "root"
    gate = threading.Event()
    first_run = FakeRun(gate=gate)
    results: list[Path] = []
    first = threading.Thread(target=lambda: results.append(
        build.build_llama_server(root, sdist=sdist, run=first_run, log=lambda _: None)))
    first.start()
    try:
        assert _wait(lambda: bool(first_run.calls))  # the first holds the lock, inside cmake
        said: list[str] = []
        second_run = FakeRun()
        second = threading.Thread(target=lambda: results.append(
            build.build_llama_server(root, sdist=sdist, run=second_run, log=said.append)))
        second.start()
        assert _wait(lambda: any("another process is building" in s for s in said))
        gate.set()
        second.join(10)
    finally:
        gate.set()
        first.join(10)
    assert second_run.calls == [] and len(results) == 2 and results[0] == results[1]


def _wait(condition, timeout: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


# --- extraction ----------------------------------------------------------------------------------

def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    return info


@pytest.mark.parametrize("bad", [
    (f"{TOP}/vendor/llama.cpp/../../../escaped.txt", b"x"),
    ("/tmp/absolute-escape.txt", b"x"),
    _link(f"{TOP}/vendor/llama.cpp/evil", "/etc/passwd"),
    _link(f"{TOP}/vendor/llama.cpp/evil", "../../../outside"),
    _link(f"{TOP}/vendor/llama.cpp/evil", f"{TOP}/setup.py", tarfile.LNKTYPE),
    _device(f"{TOP}/vendor/llama.cpp/dev-null"),
], ids=["dotdot", "absolute", "symlink-absolute", "symlink-up", "hardlink-out", "device"])
def test_an_unsafe_member_is_refused_and_nothing_is_written(tmp_path, bad):
    archive = make_sdist(tmp_path / f"{TOP}.tar.gz", [*good_members(), bad])
    dest = tmp_path / "out" / "src"
    with pytest.raises(ServerError, match="unsafe member|pointing out of llama.cpp|special file") as info:
        build.extract_llama_cpp(archive, dest, version=VERSION)
    assert "\n" not in str(info.value)
    assert not dest.exists() and not (tmp_path / "escaped.txt").exists()
    assert not list((tmp_path / "out").glob(".src-*")) if (tmp_path / "out").exists() else True


def test_an_sdist_of_another_version_or_without_llama_cpp_is_refused(tmp_path):
    other = make_sdist(tmp_path / "other.tar.gz", [("llama_cpp_python-0.0.1/vendor/llama.cpp/CMakeLists.txt", b"")])
    with pytest.raises(ServerError, match=f"holds llama_cpp_python-0.0.1, not the installed llama_cpp_python {VERSION}"):
        build.extract_llama_cpp(other, tmp_path / "a", version=VERSION)
    empty = make_sdist(tmp_path / "empty.tar.gz", [(f"{TOP}/README.md", b"")])
    with pytest.raises(ServerError, match="holds no single <name>/vendor/llama.cpp/ tree"):
        build.extract_llama_cpp(empty, tmp_path / "b", version=VERSION)
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not a tar at all")
    with pytest.raises(ServerError, match="cannot extract"):
        build.extract_llama_cpp(garbage, tmp_path / "c", version=VERSION)


def test_a_toolchains_arguments_are_kept_and_another_architecture_is_rebuilt(tmp_path, tools, sdist):
    root = tmp_path / "root"
    sm86 = ["-DCMAKE_CUDA_ARCHITECTURES=86", "-DCUDAToolkit_ROOT=/tc"]
    run = FakeRun()
    binary = build.build_llama_server(root, accel="cuda", sdist=sdist, run=run, log=lambda _: None, extra_args=sm86)
    assert run.calls[0][0][-2:] == sm86  # configured with them
    assert json.loads((binary.parent.parent / "build.json").read_text())["extra_args"] == sm86
    assert build.cached_build(root, "cuda") == binary  # the managed server takes it whatever the card
    again = FakeRun()
    build.build_llama_server(root, accel="cuda", run=again, log=lambda _: None, extra_args=sm86)
    assert again.calls == []
    other = FakeRun()
    build.build_llama_server(root, accel="cuda", run=other, log=lambda _: None,
                             extra_args=["-DCMAKE_CUDA_ARCHITECTURES=90", "-DCUDAToolkit_ROOT=/tc"])
    assert other.steps() == ["configure", "build"]
