"""A CUDA build without the CUDA toolkit: NVIDIA's wheels laid out as a toolkit, the card and driver
through NVML, and one line for every way it can fail.  pip, nvcc and NVML are replaced by fakes, so
nothing here downloads or compiles; the real run is in docs/benchmarks.md (issue 32)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from specchat.cli.commands import main
from specchat.remote import cuda_toolchain as cuda
from specchat.remote.errors import ServerError


class FakePip:
    """pip install --target lays out what NVIDIA's six 13.0 wheels do; pip wheel makes a wheel."""

    def __init__(self, fail: str = "") -> None:
        self.calls: list[tuple[list[str], dict | None]] = []
        self.fail = fail

    def __call__(self, cmd: Sequence[str], cwd: Path, log_path: Path, env: dict | None = None) -> int:
        cmd = list(cmd)
        self.calls.append((cmd, env))
        step = "nvcc" if cmd[0].endswith("nvcc") else cmd[3] if len(cmd) > 3 else "?"
        if step == self.fail:
            with log_path.open("a") as f:
                f.write("ERROR: Could not find a version that satisfies the requirement nvidia-cuda-nvcc==13.0.*\n")
            return 1
        if step == "install" and "--target" in cmd:
            site = Path(cmd[cmd.index("--target") + 1])
            cu = site / "nvidia" / "cu13"
            for rel in ("bin/nvcc", "lib/libcudart.so.13", "lib/libcublas.so.13", "lib/libcublasLt.so.13",
                        "include/cuda_runtime.h", "nvvm/bin/cicc"):
                (cu / rel).parent.mkdir(parents=True, exist_ok=True)
                (cu / rel).write_text("x")
            for dist in ("nvidia_cuda_nvcc-13.0.88", "nvidia_cublas-13.0.2.14"):
                (site / f"{dist}.dist-info").mkdir()
        if step == "wheel":
            out = Path(cmd[cmd.index("-w") + 1])
            (out / f"llama_cpp_python-{cmd[-1].split('==')[1]}-cp311-cp311-linux_x86_64.whl").write_text("whl")
        return 0


def fake_nvml(*, arch=(8, 6), driver=13000, count=1, init_error: Exception | None = None):
    def init():
        if init_error is not None:
            raise init_error
    return SimpleNamespace(
        nvmlInit=init, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: "h", nvmlDeviceGetName=lambda h: b"NVIDIA GeForce RTX 3090",
        nvmlDeviceGetCudaComputeCapability=lambda h: arch, nvmlSystemGetCudaDriverVersion=lambda: driver)


@pytest.mark.parametrize("text,arch", [("sm_86", 86), ("86", 86), ("8.6", 86), ("compute_90", 90), (" SM_120 ", 120),
                                       ("6.1", 61)])
def test_an_architecture_is_read_as_users_write_it(text, arch):
    assert cuda.parse_arch(text) == arch


@pytest.mark.parametrize("text", ["banana", "", "sm_", "8.6.1", "sm_99"])
def test_a_bad_architecture_is_one_line(text):
    with pytest.raises(ServerError) as info:
        cuda.parse_arch(text)
    assert "\n" not in str(info.value) and "86" in str(info.value)


def test_the_card_and_its_driver_come_from_nvml():
    gpu = cuda.detect_gpu(fake_nvml())
    assert gpu == cuda.Gpu("NVIDIA GeForce RTX 3090", 86, 13000) and gpu.driver_text == "13.0"
    cuda.check_gpu(gpu)  # a 3090 on driver 580: fine


@pytest.mark.parametrize("nvml,words", [
    (fake_nvml(init_error=RuntimeError("NVML Shared Library Not Found")), "no NVIDIA GPU found: NVML cannot start"),
    (fake_nvml(count=0), "the driver sees none"),
])
def test_no_gpu_is_one_line_that_says_what_to_do(nvml, words):
    with pytest.raises(ServerError) as info:
        cuda.detect_gpu(nvml)
    assert words in str(info.value) and "--arch" in str(info.value) and "\n" not in str(info.value)


def test_an_old_driver_or_an_old_card_is_one_line():
    with pytest.raises(ServerError, match=r"driver runs CUDA 12\.4 and this build needs 13\.0: update the driver to 580"):
        cuda.check_gpu(cuda.detect_gpu(fake_nvml(driver=12040)))
    with pytest.raises(ServerError, match=r"compute capability 6\.1; CUDA 13\.0 builds for 7\.5 \(Turing\) and newer"):
        cuda.check_gpu(cuda.detect_gpu(fake_nvml(arch=(6, 1))))


def test_the_wheels_become_a_toolkit_once_and_are_reused(tmp_path, monkeypatch):
    plenty_of_disk(monkeypatch)
    pip = FakePip()
    tc = cuda.ensure(tmp_path, run=pip, log=lambda _: None)
    assert tc.nvcc == tmp_path / "13.0" / "nvidia" / "cu13" / "bin" / "nvcc" and tc.nvcc.is_file()
    install = pip.calls[0][0]
    assert [a for a in install if a.startswith("nvidia-")] == [f"{p}==13.0.*" for p in cuda.PACKAGES]
    nvcc_check = pip.calls[1][0]  # nvcc answered before the folder was put in place
    assert nvcc_check[1:] == ["--version"] and "/.13.0-" in nvcc_check[0] and nvcc_check[0].endswith("cu13/bin/nvcc")
    for name in ("libcudart.so", "libcublas.so", "libcublasLt.so"):  # what FindCUDAToolkit looks for
        assert (tc.lib / name).resolve() == (tc.lib / f"{name}.13").resolve()
    assert (tc.root / "lib64").resolve() == tc.lib.resolve()
    assert tc.versions == {"nvidia-cublas": "13.0.2.14", "nvidia-cuda-nvcc": "13.0.88"}
    args = tc.cmake_args(86)
    assert f"-DCMAKE_CUDA_COMPILER={tc.nvcc}" in args and "-DCMAKE_CUDA_ARCHITECTURES=86" in args
    assert "-DGGML_CUDA_NO_VMM=ON" in args  # no libcuda needed to link: a machine without a GPU can build
    again = FakePip()
    assert cuda.ensure(tmp_path, run=again, log=lambda _: None) == tc and again.calls == []


def test_a_failed_install_is_one_line_and_leaves_nothing_that_looks_installed(tmp_path, monkeypatch):
    plenty_of_disk(monkeypatch)
    with pytest.raises(ServerError) as info:
        cuda.ensure(tmp_path, run=FakePip(fail="install"), log=lambda _: None)
    text = str(info.value)
    assert "installing the CUDA 13.0 wheels failed (pip exit 1): ERROR: Could not find a version" in text
    assert "13.0.log" in text and "\n" not in text
    assert cuda.installed(tmp_path) is None and not (tmp_path / "13.0").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["13.0.log"]  # the temporary folder went too


def test_not_enough_disk_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda.shutil, "disk_usage", lambda p: SimpleNamespace(free=300_000_000))
    with pytest.raises(ServerError, match=r"not enough disk for the CUDA build: 0\.3 GB free .* 1\.4 GB needed"):
        cuda.ensure(tmp_path, run=FakePip(), log=lambda _: None)


def test_the_bindings_are_built_with_the_toolchain_and_installed(tmp_path, monkeypatch):
    plenty_of_disk(monkeypatch)
    tc = cuda.ensure(tmp_path / "cuda", run=FakePip(), log=lambda _: None)
    pip = FakePip()
    wheel = cuda.build_bindings(tc, 86, tmp_path / "wheels", version="0.3.36", jobs=3, run=pip, log=lambda _: None)
    assert wheel.name.startswith("llama_cpp_python-0.3.36-") and wheel.is_file()
    (build_cmd, env), (install_cmd, _) = pip.calls
    assert build_cmd[3:6] == ["wheel", "-v", "--no-deps"] and build_cmd[-1] == "llama_cpp_python==0.3.36"
    assert env is not None and env["CMAKE_ARGS"].startswith("-DGGML_CUDA=ON ")
    assert "-DCMAKE_CUDA_ARCHITECTURES=86" in env["CMAKE_ARGS"] and env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3"
    assert env["PATH"].startswith(str(tc.root / "bin"))
    assert install_cmd[3:] == ["install", "--no-deps", "--force-reinstall", "--disable-pip-version-check", str(wheel)]


def test_a_failed_build_names_the_log(tmp_path, monkeypatch):
    plenty_of_disk(monkeypatch)
    tc = cuda.ensure(tmp_path / "cuda", run=FakePip(), log=lambda _: None)
    with pytest.raises(ServerError, match=r"building llama_cpp_python for CUDA failed \(pip exit 1\): .*\.log"):
        cuda.build_bindings(tc, 86, tmp_path / "w", version="0.3.36", run=FakePip(fail="wheel"), log=lambda _: None)


def plenty_of_disk(monkeypatch) -> None:
    """The checks ask for 5.4 GB free; a test machine's disk is not what is tested."""
    monkeypatch.setattr(cuda.shutil, "disk_usage", lambda p: SimpleNamespace(free=100_000_000_000))


def test_the_command_checks_before_it_builds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    plenty_of_disk(monkeypatch)
    monkeypatch.setattr(cuda, "detect_gpu", lambda nvml=None: (_ for _ in ()).throw(
        ServerError("no NVIDIA GPU found: NVML cannot start (x); install the NVIDIA driver, or give the card's "
                    "architecture with --arch")))
    assert main(["cuda-build", "--check"]) == 2
    assert "no NVIDIA GPU found" in capsys.readouterr().err
    assert main(["cuda-build", "--arch", "sm_90", "--check"]) == 0  # a build for another machine needs no GPU
    out = capsys.readouterr()
    assert out.out == "ready\n" and "compute capability 9.0" in out.err and "to install, about 0.5 GB" in out.err
    assert main(["cuda-build", "--arch", "7.0", "--check"]) == 2
    assert "7.5 (Turing) and newer" in capsys.readouterr().err
    assert not any(tmp_path.rglob("nvcc"))  # --check installs nothing


def test_the_command_builds_the_bindings_then_llama_server_with_the_same_toolchain(tmp_path, monkeypatch, capsys):
    from specchat.remote import build

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    plenty_of_disk(monkeypatch)
    monkeypatch.setattr(cuda, "detect_gpu", lambda nvml=None: cuda.Gpu("NVIDIA GeForce RTX 4090", 89, 13000))
    real_ensure = cuda.ensure
    monkeypatch.setattr(cuda, "ensure", lambda root, log: real_ensure(root, run=FakePip(), log=log))
    built: dict[str, object] = {}

    def bindings(tc, arch, wheel_dir, **kw):
        built["bindings"] = (arch, kw["install"], wheel_dir)
        return wheel_dir / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"

    def server(root, **kw):
        built["server"] = (kw["accel"], kw["extra_args"])
        return root / "bin" / "llama-server"

    monkeypatch.setattr(cuda, "build_bindings", bindings)
    monkeypatch.setattr(build, "build_llama_server", server)
    assert main(["cuda-build", "--jobs", "3"]) == 0
    arch, install, wheel_dir = built["bindings"]
    assert arch == 89 and install is True and wheel_dir == tmp_path / "specchat" / "cuda" / "wheels"
    accel, extra = built["server"]
    assert accel == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=89" in extra  # the card the driver named
    out = capsys.readouterr()
    assert out.out.splitlines()[-1].endswith("llama-server") and "RTX 4090, compute capability 8.9" in out.err


def test_a_long_build_says_how_far_it_is(tmp_path):
    import time

    log = tmp_path / "build.log"
    log.write_text("-- Configuring done\n[  3%] Building CUDA object acc.cu.o\n")
    said: list[str] = []

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 10  # generous: a loaded machine may be slow to wake the watcher
        while len(said) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    with cuda.build_progress(log, said.append, every_s=0.05):
        wait_for(1)
        with log.open("a") as f:
            f.write("[ 41%] Building CUDA object fattn.cu.o\n")
        wait_for(2)
        with log.open("a") as f:  # Ninja's way, as pip's build of llama-cpp-python prints it (pip -v)
            f.write("  [97/339] /cache/cuda/13.0/nvidia/cu13/bin/nvcc -forward-unknown-to-host-compiler\n")
        wait_for(3)
        time.sleep(0.2)  # no new figure: nothing more is said
    assert [s.split("%")[0].strip() for s in said] == ["3", "41", "28"]  # each new figure once
    assert all("compiled" in s and "min so far" in s for s in said)
