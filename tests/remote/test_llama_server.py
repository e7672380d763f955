"""The managed llama-server: what a user relies on when SpecChat runs one for them.

The fast tier runs tests/helpers/fake_llama_server.py as the binary (its ``--help`` is the
real 0.3.36 text); the last test starts the real build on the Qwen pair.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from helpers.procs import alive
from specchat.remote import build, llama_server
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import ManagedServer, find_llama_server, parse_help, server_help

REAL_FAILED_LOAD = """\
0.00.003.440 W srv  llama_server: security: no API key is set and CORS allows all origins
0.00.005.283 I srv    load_model: loading model '/tmp/bad.gguf'
0.00.005.423 E gguf_init_from_reader: this GGUF file is version 2991469256 but this software only supports up to version 3
0.00.005.436 E gguf_init_from_reader: failed to read header
0.00.006.819 E llama_model_load: error loading model: llama_model_loader: failed to load model from /tmp/bad.gguf
0.00.006.840 E llama_model_load_from_file_impl: failed to load model
0.00.006.914 E srv    load_model: failed to load model, '/tmp/bad.gguf'
0.00.006.915 I srv    operator(): operator(): cleaning up before exit...
0.00.007.411 E srv  llama_server: exiting due to model loading error
"""


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    return target, draft


class States:
    """Records on_state calls (from the supervisor thread)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, state: str, detail: str) -> None:
        with self._lock:
            self.seen.append((state, detail))
            self.threads.add(threading.current_thread().name)

    @property
    def names(self) -> list[str]:
        with self._lock:
            return [s for s, _ in self.seen]


def runs(launcher: Path) -> list[dict]:
    path = launcher.parent / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def health(url: str) -> httpx2.Response:
    with httpx2.Client(trust_env=False, timeout=5) as client:
        return client.get(url + "/health")


def supervisor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("llama-server")]


# --- what a binary supports ------------------------------------------------------------------

def test_the_vendored_help_gives_its_spec_types_and_flags_and_leaves_removed_ones_out(fake_llama_server):
    h = server_help(fake_llama_server)
    assert h.spec_types == ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
                            "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
    assert h.spec_type_default == "none"
    for flag in ("--spec-draft-n-max", "-md", "--model-draft", "--spec-draft-model", "--metrics", "--api-key",
                 "--api-key-file", "-ngl", "--n-gpu-layers", "-h", "--usage", "--host", "--port"):
        assert h.supports(flag), flag
    # "--draft-max: the argument has been removed" is in the help, but passing it fails the server
    assert not h.supports("--draft-max") and not h.supports("--draft")
    assert not h.supports("--no-such-flag")


def test_a_binary_that_is_not_llama_server_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'usage: something else'\n")
    fake.chmod(0o755)
    with pytest.raises(ServerError, match="does not look like llama-server") as info:
        server_help(fake)
    assert "\n" not in str(info.value)


def test_a_binary_hanging_on_help_is_given_up_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(llama_server, "HELP_TIMEOUT_S", 1.0)
    hang = tmp_path / "llama-server"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(ServerError, match="--help did not finish in 1 s"):
        server_help(hang)
    assert time.monotonic() - started < 10


def test_help_without_spec_type_lists_no_types():
    h = parse_help("-m,    --model FNAME                    model path to load\n"
                   "--port PORT                             port to listen (default: 8080)\n", Path("x"))
    assert h.spec_types == () and h.supports("-m") and not h.supports("--spec-type")


def test_the_cause_of_a_failed_load_is_the_first_error_line_of_the_last_burst():
    assert llama_server._last_meaningful(REAL_FAILED_LOAD) == (
        "gguf_init_from_reader: this GGUF file is version 2991469256 but this software only supports up to version 3")


# --- starting ------------------------------------------------------------------------------------

def test_start_returns_the_url_of_a_healthy_server_with_the_checked_command_line(fake_llama_server, models,
                                                                                 tmp_path):
    target, draft = models
    states = States()
    server = ManagedServer(fake_llama_server, target, draft, n_max=6, n_ctx=2048, threads=2,
                           log_dir=tmp_path / "logs", on_state=states)
    try:
        url = server.start(timeout_s=30)
        assert url == server.url and url.startswith("http://127.0.0.1:")
        r = health(url)
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert server.state == "ready" and server.pid is not None and alive(server.pid)
        [run] = runs(fake_llama_server)
        argv = run["argv"]
        assert argv[:6] == ["--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1], "-m", str(target)]
        assert argv[argv.index("-md") + 1] == str(draft)
        assert argv[argv.index("--spec-type") + 1] == "draft-simple"  # a draft alone does not draft (2026 builds)
        assert argv[argv.index("--spec-draft-n-max") + 1] == "6"
        assert "--metrics" in argv and argv[argv.index("-c") + 1] == "2048" and argv[argv.index("-t") + 1] == "2"
        assert server.log_path.is_file() and "listening" in server.log_path.read_text()
    finally:
        server.stop()
    assert states.names == ["starting", "ready", "stopped"]
    assert states.threads == {f"llama-server {target.name}"}  # callbacks come from the supervisor only


def test_an_unsupported_spec_type_is_refused_with_the_supported_list_and_nothing_runs(fake_llama_server, models,
                                                                                     tmp_path):
    target, draft = models
    server = ManagedServer(fake_llama_server, target, draft, spec_type="draft-magic", log_dir=tmp_path)
    with pytest.raises(ServerError) as info:
        server.start(timeout_s=30)
    message = str(info.value)
    assert "'draft-magic'" in message and "none, draft-simple, draft-eagle3" in message and "\n" not in message
    assert runs(fake_llama_server) == [] and server.pid is None


def test_a_flag_the_binary_lacks_is_named(fake_llama_server, models, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_OMIT", "--spec-draft-n-max")
    target, draft = models
    with pytest.raises(ServerError, match="does not support --spec-draft-n-max"):
        ManagedServer(fake_llama_server, target, draft, n_max=4, log_dir=tmp_path).start(timeout_s=30)
    assert runs(fake_llama_server) == []


def test_extra_arguments_may_not_override_what_specchat_sets(fake_llama_server, models, tmp_path):
    target, _ = models
    for extra, said in ((["--port", "9"], "--port is set by SpecChat"),
                        (["--no-such-flag"], "does not support --no-such-flag")):
        with pytest.raises(ServerError, match=said):
            ManagedServer(fake_llama_server, target, extra_args=extra, log_dir=tmp_path).start(timeout_s=30)
    assert runs(fake_llama_server) == []


def test_a_missing_model_file_is_named_before_anything_runs(fake_llama_server, tmp_path):
    with pytest.raises(ServerError, match="the model .*nope.gguf does not exist"):
        ManagedServer(fake_llama_server, tmp_path / "nope.gguf", log_dir=tmp_path).start(timeout_s=30)


def test_a_server_dying_while_starting_reports_its_log_line_and_leaves_nothing(fake_llama_server, models,
                                                                               tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_FAIL", "llama_model_load: error loading model: unknown model architecture: 'x'")
    target, _ = models
    states = States()
    server = ManagedServer(fake_llama_server, target, log_dir=tmp_path, on_state=states)
    with pytest.raises(ServerError) as info:
        server.start(timeout_s=30)
    message = str(info.value)
    assert "exited while starting" in message and "unknown model architecture: 'x'" in message
    assert str(server.log_path) in message and "\n" not in message
    assert not alive(runs(fake_llama_server)[0]["pid"]) and server.pid is None
    assert states.names == ["starting", "failed"] and server.state == "failed"
    assert not supervisor_threads()
    server.stop()  # nothing left to stop: still fine


def test_a_server_not_ready_in_time_is_stopped_and_said_to_be_loading(fake_llama_server, models, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_LOAD_S", "60")
    target, _ = models
    server = ManagedServer(fake_llama_server, target, log_dir=tmp_path)
    with pytest.raises(ServerError, match=r"not ready in 1 s \(still loading the model\)"):
        server.start(timeout_s=1)
    assert not alive(runs(fake_llama_server)[0]["pid"]) and not supervisor_threads()


def test_stop_during_start_ends_the_start_at_once(fake_llama_server, models, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_LOAD_S", "60")
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path)
    errors: list[ServerError] = []

    def start() -> None:
        try:
            server.start(timeout_s=60)
        except ServerError as e:
            errors.append(e)

    starter = threading.Thread(target=start)
    starter.start()
    assert wait_for(lambda: bool(runs(fake_llama_server)))
    server.stop()
    starter.join(10)
    assert not starter.is_alive() and "stopped while starting" in str(errors[0])
    assert not alive(runs(fake_llama_server)[0]["pid"]) and not supervisor_threads()


def test_a_cancelled_wait_leaves_the_server_starting_and_a_second_wait_gets_it(fake_llama_server, models, tmp_path,
                                                                                monkeypatch):
    """A Stop while a managed server restarts ends the wait at once; the server is not killed mid-load (a large
    model would not stop at once anyway) and the next answer waits for it."""
    from specchat.engine.cancel import CancelToken
    from specchat.remote.llama_server import StartWaitCancelled

    ready = tmp_path / "ready"
    monkeypatch.setenv("FAKE_LLAMA_READY_FILE", str(ready))  # it loads until the test says
    monkeypatch.setenv("FAKE_LLAMA_START_DELAY_S", "1")  # and is slow to start, as on a loaded machine
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path)
    cancel = CancelToken()
    # Stop once the process runs (it says so in runs.jsonl): on a loaded machine it can take seconds to start
    threading.Thread(target=lambda: wait_for(lambda: bool(runs(fake_llama_server)), 60) and cancel.cancel(),
                     daemon=True).start()
    try:  # whatever fails, no server is left for the next tests
        with pytest.raises(StartWaitCancelled):
            server.start(timeout_s=60, cancel=cancel)
        pid = runs(fake_llama_server)[0]["pid"]
        assert alive(pid) and server.state == "starting"  # the wait ended while the model still loaded
        ready.touch()
        url = server.wait_started()
        assert httpx2.get(f"{url}/health", timeout=5).json() == {"status": "ok"}
        assert len(runs(fake_llama_server)) == 1  # the same process: nothing was started twice
    finally:
        server.stop()
    assert not alive(pid) and not supervisor_threads()


def test_a_port_taken_before_the_server_binds_it_is_retried_on_another(fake_llama_server, models, tmp_path,
                                                                       monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real_free_port = llama_server._free_port
    monkeypatch.setattr(llama_server, "_free_port", lambda: next(ports, None) or real_free_port())
    target, _ = models
    server = ManagedServer(fake_llama_server, target, log_dir=tmp_path)
    try:
        url = server.start(timeout_s=30)
        assert health(url).status_code == 200
        first, second = runs(fake_llama_server)
        assert first["port"] == taken.getsockname()[1] and url.endswith(f":{second['port']}")
        assert not alive(first["pid"])
    finally:
        server.stop()
        taken.close()


def test_the_api_key_goes_in_a_private_file_not_the_process_list(fake_llama_server, models, tmp_path):
    target, _ = models
    server = ManagedServer(fake_llama_server, target, api_key="s3cret-key", log_dir=tmp_path / "logs")
    try:
        server.start(timeout_s=30)
        [run] = runs(fake_llama_server)
        assert "s3cret-key" not in " ".join(run["argv"]) and run["key"] == "s3cret-key\n"
        key_file = Path(run["argv"][run["argv"].index("--api-key-file") + 1])
        assert key_file.stat().st_mode & 0o077 == 0
    finally:
        server.stop()
    assert not key_file.exists()


@pytest.mark.parametrize("key", ["#starts-a-comment", "two words", "a,b", "line\nbreak"])
def test_an_api_key_the_server_would_misread_is_refused(key, models, tmp_path):
    with pytest.raises(ServerError, match="API key"):
        ManagedServer(Path("llama-server"), models[0], api_key=key, log_dir=tmp_path)


def test_the_context_manager_starts_and_stops(fake_llama_server, models, tmp_path):
    with ManagedServer(fake_llama_server, models[0], log_dir=tmp_path) as url:
        assert health(url).status_code == 200
        pid = runs(fake_llama_server)[0]["pid"]
    assert not alive(pid) and not supervisor_threads()


# --- supervising ---------------------------------------------------------------------------------

def test_a_crashed_server_is_restarted_on_the_same_port_and_is_healthy_again(fake_llama_server, models, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_CRASHES", "1")
    states = States()
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path, on_state=states)
    try:
        url = server.start(timeout_s=30)
        assert wait_for(lambda: states.names.count("ready") == 2)
        assert states.names == ["starting", "ready", "crashed", "restarting", "ready"]
        crashed = dict(states.seen)["crashed"]
        assert "exited with status 134" in crashed and "GGML_ASSERT" in crashed
        first, second = runs(fake_llama_server)
        assert first["port"] == second["port"] and server.url == url
        assert health(url).status_code == 200 and server.pid == second["pid"]
        # the crashed run's log is kept beside the new one
        assert "GGML_ASSERT" in server.log_path.with_name("llama-server.log.1").read_text()
    finally:
        server.stop()
    assert states.names[-1] == "stopped"


def test_a_server_killed_by_a_native_fault_is_reported_with_its_signal(fake_llama_server, models, tmp_path,
                                                                       monkeypatch):
    """A SIGILL (a kernel the CPU cannot run) leaves no log line: the state says which signal, in words."""
    monkeypatch.setenv("FAKE_LLAMA_CRASHES", "1")
    monkeypatch.setenv("FAKE_LLAMA_CRASH_SIGNAL", "SIGILL")
    states = States()
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path, on_state=states)
    try:
        server.start(timeout_s=30)
        assert wait_for(lambda: states.names.count("ready") == 2)
        crashed = dict(states.seen)["crashed"]
        assert "was killed by SIGILL (illegal instruction)" in crashed and "\n" not in crashed
    finally:
        server.stop()


@pytest.mark.parametrize("extra_buffers", [True, False])
def test_where_the_cpu_probe_found_faulting_kernels_the_server_gets_no_repack(fake_llama_server, models, tmp_path,
                                                                             monkeypatch, extra_buffers):
    """The verdict of engine/cpu_kernels.py reaches llama-server as --no-repack (the same switch as a local
    load's use_extra_bufts); where the kernels run, the command line is llama.cpp's default."""
    from specchat.engine import cpu_kernels

    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "_verdict", cpu_kernels.CpuVerdict(
        "runs" if extra_buffers else "faults", extra_buffers, ("AMX", "CPU_REPACK"), "" if extra_buffers else "SIGILL"))
    argv = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path).command(8080)
    assert ("--no-repack" in argv) is (not extra_buffers)


def test_a_server_crashing_more_than_three_times_a_minute_is_given_up(fake_llama_server, models, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_CRASHES", "99")
    monkeypatch.setenv("FAKE_LLAMA_LOAD_S", "0.1")
    monkeypatch.setenv("FAKE_LLAMA_CRASH_AFTER_S", "0.1")
    states = States()
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path, on_state=states)
    try:
        server.start(timeout_s=30)
        assert wait_for(lambda: "failed" in states.names, timeout=30)
        names = states.names
        # four crashes, three restarts, then given up; whether a restart is seen "ready" before its crash
        # (0.1 s later) depends on how soon the supervisor polls it on a loaded machine
        assert names[:2] == ["starting", "ready"] and names[-2:] == ["crashed", "failed"], names
        assert (names.count("crashed"), names.count("restarting")) == (4, 3), names
        assert [n for n in names if n != "ready"] == ["starting"] + ["crashed", "restarting"] * 3 + ["crashed", "failed"]
        assert server.state == "failed" and "crashed 4 times in 60 s" in (server.last_error or "")
        assert len(runs(fake_llama_server)) == 4 and server.pid is None
        assert not any(alive(r["pid"]) for r in runs(fake_llama_server))
    finally:
        server.stop()
    assert states.names[-1] == "stopped" and not supervisor_threads()


def test_stop_leaves_no_process_and_no_thread_and_is_idempotent(fake_llama_server, models, tmp_path):
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path)
    server.start(timeout_s=30)
    pid = server.pid
    assert pid is not None and supervisor_threads()
    server.stop()
    assert not alive(pid) and server.pid is None and server.url is None and server.state == "stopped"
    assert not supervisor_threads()
    server.stop()
    assert server.state == "stopped"


def test_stop_kills_a_server_that_ignores_sigterm(fake_llama_server, models, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_IGNORE_TERM", "1")
    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path)
    server.start(timeout_s=30)
    pid = server.pid
    assert pid is not None
    started = time.monotonic()
    server.stop(timeout_s=0.5)
    assert time.monotonic() - started < 10  # returns, instead of waiting on a server that will not go
    assert not alive(pid)


def test_a_crash_is_not_mistaken_for_a_stop_and_a_state_callback_error_is_survived(fake_llama_server, models,
                                                                                  tmp_path):
    seen: list[str] = []

    def flaky(state: str, detail: str) -> None:
        seen.append(state)
        raise RuntimeError("a bug in the UI")

    server = ManagedServer(fake_llama_server, models[0], log_dir=tmp_path, on_state=flaky)
    try:
        server.start(timeout_s=30)
        os.kill(server.pid, signal.SIGKILL)
        assert wait_for(lambda: seen.count("ready") == 2)
    finally:
        server.stop()
    assert seen == ["starting", "ready", "crashed", "restarting", "ready", "stopped"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_owner_leaves_no_orphan_server(fake_llama_server, models, tmp_path):
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from pathlib import Path\n"
         "from specchat.remote.llama_server import ManagedServer\n"
         "s = ManagedServer(Path(sys.argv[1]), Path(sys.argv[2]), log_dir=Path(sys.argv[3]))\n"
         "s.start(timeout_s=30)\n"
         "print(s.pid, flush=True)\n"
         "time.sleep(600)\n",
         str(fake_llama_server), str(models[0]), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(owner.stdout.readline())
        assert alive(pid)
        owner.kill()  # kill -9: no atexit, no stop()
        owner.wait()
        assert wait_for(lambda: not alive(pid), timeout=10)
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()
        if pid is not None and alive(pid):  # the orphan this test is about: never leave it running
            os.kill(pid, signal.SIGKILL)


# --- finding a binary ----------------------------------------------------------------------------

def _stamped_build(root: Path, accel: str) -> Path:
    directory = build.build_dir(root, build.installed_version(), accel)
    binaries = {}
    for name in build.TARGETS:
        path = directory / "bin" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n# {name} {accel}\n")
        path.chmod(0o755)
        binaries[name] = {"size": path.stat().st_size, "sha256": build.sha256_of(path)}
    (directory / build.STAMP).write_text(json.dumps({
        "version": build.installed_version(), "accel": accel, "cmake_args": build.cmake_args(accel),
        "binaries": binaries}))
    return directory / "bin" / "llama-server"


def test_find_prefers_the_configured_path_then_path_then_an_accelerated_build(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    assert find_llama_server() is None
    root = build.default_build_root()
    cpu = _stamped_build(root, "cpu")
    assert find_llama_server() == cpu
    cuda = _stamped_build(root, "cuda")
    assert find_llama_server() == cuda
    on_path = bare / "llama-server"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert find_llama_server() == on_path
    configured = tmp_path / "mine" / "llama-server"
    configured.parent.mkdir()
    configured.write_text("#!/bin/sh\n")
    configured.chmod(0o755)
    assert find_llama_server(str(configured)) == configured


def test_a_configured_path_that_is_not_an_executable_is_an_error_not_a_fallback(tmp_path):
    with pytest.raises(ServerError, match="is not an executable file"):
        find_llama_server(str(tmp_path / "missing"))
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    with pytest.raises(ServerError, match="is not an executable file"):
        find_llama_server(str(plain))


def test_an_unfinished_build_is_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    binary = _stamped_build(build.default_build_root(), "cpu")
    binary.write_text("#!/bin/sh\n# rebuilt by hand, another size\n")
    assert find_llama_server() is None


# --- the real thing ------------------------------------------------------------------------------

@pytest.mark.real_server
def test_the_real_server_starts_with_the_qwen_pair_and_stops_cleanly(llama_server_binary, qwen_target, qwen_draft,
                                                                     tmp_path):
    states = States()
    server = ManagedServer(llama_server_binary, qwen_target, qwen_draft, spec_type="draft-simple", n_ctx=2048,
                           threads=2, log_dir=tmp_path, on_state=states)
    try:
        url = server.start(timeout_s=300)
        pid = server.pid
        assert health(url).json() == {"status": "ok"}
        with httpx2.Client(trust_env=False, timeout=10) as client:
            props = client.get(url + "/props").json()
        assert Path(props["model_path"]).name == qwen_target.name
    finally:
        server.stop()
    assert pid is not None and not alive(pid) and not supervisor_threads()
    assert states.names == ["starting", "ready", "stopped"]
