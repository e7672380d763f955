"""Find a ``llama-server`` and run one on 127.0.0.1 for SpecChat: started, watched, restarted, stopped.

- :func:`find_llama_server`: the configured path, else ``llama-server`` on PATH, else a
  finished build of :mod:`specchat.remote.build` for the installed llama-cpp-python.
- :func:`server_help`: what a binary supports, read from its ``--help`` (flags and the
  ``--spec-type`` values change between builds; nothing is assumed from a version).
- :class:`ManagedServer`: owns one server process.  ``start()`` picks a free port, checks
  every flag against the binary's help, waits for ``/health``; a supervisor thread restarts
  a crashed server on the same port (at most 3 times in 60 s); ``stop()`` ends it, and so
  does the interpreter's exit or (Linux) the death of the thread that started it.
- :func:`spec_type_offers`: which of a binary's ``--spec-type`` values a chat's models can use (the
  drafter's kind and fit read from the GGUF headers, :mod:`specchat.models.drafter_heads`).

Qt-free; every failure is a one-line :class:`~specchat.remote.errors.ServerError`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from specchat.cancel import CancelToken, start_daemon
from specchat.engine import cpu_kernels
from specchat.errors import exit_description, one_line
from specchat.files import write_text_atomically
from specchat.remote.build import ACCELS, cached_build, default_build_root
from specchat.remote.errors import ServerError

if TYPE_CHECKING:
    import httpx2

    from specchat.models.drafter_heads import DrafterKind
    from specchat.models.gguf_header import GGUFHeader

log = logging.getLogger("specchat")


class StartWaitCancelled(ServerError):
    """The wait for a starting llama-server was cancelled (a Stop); the server goes on starting."""


MANAGED = "llama-server"  # a chat's backend value for the llama-server SpecChat starts itself
HELP_TIMEOUT_S = 20.0
HELP_MAX_BYTES = 1 << 20  # the real help is 50 kB; a binary that prints more is cut off
HOST = "127.0.0.1"
MAX_RESTARTS = 3  # restarts allowed in RESTART_WINDOW_S; one more crash is "failed"
RESTART_WINDOW_S = 60.0
PORT_TRIES = 3  # a free port can be taken between our probe and the server's bind
POLL_S = 0.1  # how often start polls /health and the supervisor polls the process
WAIT_SLICE_S = 0.05  # how soon a wait for a start hears its cancel (a Stop during a restart)
LOG_NAME = "llama-server.log"  # this run's output; the previous run's is LOG_NAME.1
KEY_FILE = ".llama-server-api-key"
STATES = ("starting", "ready", "crashed", "restarting", "failed", "stopped")
# Flags SpecChat sets itself; extra_args may not set them again.
MANAGED_FLAGS = frozenset({
    "--host", "--port", "-m", "--model", "-md", "--model-draft", "--spec-draft-model", "--spec-type",
    "--spec-draft-n-max", "--metrics", "-c", "--ctx-size", "-t", "--threads", "-ngl", "--gpu-layers",
    "--n-gpu-layers", "--api-key", "--api-key-file",
})
_FLAG_RE = re.compile(r"(?:^|[\s,])(--?[A-Za-z][A-Za-z0-9_.-]*)")
_BIND_FAILED = re.compile(r"couldn't bind|address already in use|bind\(\) failed", re.IGNORECASE)
_GENERIC_LINE = re.compile(r"exiting due to|cleaning up before exit|^\s*$", re.IGNORECASE)
_LEVEL_LINE = re.compile(r"\d+\.\d+\.\d+\.\d+ ([EWIDT]) (.*)")
_ERROR_LINE = re.compile(r"\berror\b|GGML_ASSERT|exception", re.IGNORECASE)
_PROBLEM_LINE = re.compile(r"error|failed|cannot|can't|unable|invalid|not found|abort|unknown", re.IGNORECASE)

StateCallback = Callable[[str, str], None]


# --- what a binary supports ---------------------------------------------------------------

@dataclass(frozen=True)
class ServerHelp:
    """What one llama-server binary accepts, from its ``--help``."""

    binary: Path
    flags: frozenset[str]  # every spelling, removed ones ("the argument has been removed") left out
    spec_types: tuple[str, ...]  # the --spec-type values it lists, in its order
    spec_type_default: str  # "" when the help gives none

    def supports(self, flag: str) -> bool:
        return flag in self.flags


def parse_help(text: str, binary: Path) -> ServerHelp:
    """Parse llama.cpp's help layout: an option's spellings start a line (its help from column
    40, or on the next lines when the spellings are longer), continuation lines are indented."""
    flags: set[str] = set()
    spec_types: tuple[str, ...] = ()
    spec_default = ""
    for head, description in _options(text):
        names = _FLAG_RE.findall(head)
        if "the argument has been removed" in description:
            continue
        flags.update(names)
        if "--spec-type" in names:
            hint = re.search(r"--spec-type\s+(\S+)", head)
            values = re.split(r"[,|\[\]{}<>]", hint.group(1)) if hint else []
            spec_types = tuple(v for v in values if re.fullmatch(r"[a-z0-9][a-z0-9_-]*", v))
            default = re.search(r"\(default:\s*([a-z0-9_,-]+)\s*\)", description)
            spec_default = default.group(1) if default else ""
    return ServerHelp(binary, frozenset(flags), spec_types, spec_default)


def _options(text: str) -> Iterator[tuple[str, str]]:
    """(spellings, description) of each option in a help text."""
    head = ""
    lines: list[str] = []
    for line in text.splitlines():
        if re.match(r"--?[A-Za-z]", line):
            if head:
                yield head, " ".join(lines)
            # spellings of at most 37 characters are padded to column 40 and the help follows
            short = len(line) > 40 and not line[37:40].strip()
            head, lines = (line[:40], [line[40:]]) if short else (line, [])
        elif head:
            lines.append(line.strip())
    if head:
        yield head, " ".join(lines)


_help_cache: dict[tuple[str, int, int], ServerHelp] = {}
_help_lock = threading.Lock()


def server_help(binary: Path) -> ServerHelp:
    """Run ``binary --help`` once (cached by path, mtime and size) and parse it.

    Raises ServerError when it cannot run, fails, hangs (20 s) or does not look like a
    llama-server (no ``--port`` in its help).
    """
    path = Path(binary).expanduser()
    try:
        st = path.stat()
    except OSError as e:
        raise ServerError(f"llama-server {path}: {e.strerror or e}; check the path") from None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    with _help_lock:
        if key in _help_cache:
            return _help_cache[key]
    rc, text = _run_capped([str(path), "--help"], HELP_TIMEOUT_S, HELP_MAX_BYTES, path)
    if rc != 0:
        raise ServerError(f"llama-server {path}: --help failed (it {exit_description(rc)}): {_last_meaningful(text)}")
    result = parse_help(text, path)
    if not result.supports("--port") or not result.supports("-m"):
        raise ServerError(f"{path} does not look like llama-server (its --help lists no --port or -m); "
                          "point SpecChat at a llama-server binary")
    with _help_lock:
        if len(_help_cache) >= 32:
            _help_cache.clear()
        _help_cache[key] = result
    return result


def _run_capped(cmd: list[str], timeout_s: float, cap: int, path: Path) -> tuple[int, str]:
    """Run ``cmd``; its exit code and the first ``cap`` bytes of its output (the rest is read and
    dropped, so it never blocks on a full pipe and never fills memory)."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    except OSError as e:
        raise ServerError(f"llama-server {path}: cannot run it: {e.strerror or e}; "
                          "check that it is an executable for this machine") from None
    chunks: list[bytes] = []

    def read() -> None:
        size = 0
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            if size < cap:
                chunks.append(chunk[: cap - size])
                size += len(chunks[-1])

    reader = start_daemon(read, name="llama-server --help")
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise ServerError(f"llama-server {path}: --help did not finish in {timeout_s:.0f} s; "
                          "check that it is a llama-server binary") from None
    finally:
        reader.join(2.0)  # a grandchild holding the pipe open must not hang us
        if proc.stdout is not None and not reader.is_alive():  # never close an fd being read
            proc.stdout.close()
    return rc, b"".join(chunks).decode("utf-8", "replace")


# --- finding a binary -----------------------------------------------------------------------

def find_llama_server(configured: str = "") -> Path | None:
    """The llama-server to use, or None when there is none.

    ``configured`` (a path from the config) wins; one that is set but is not an executable
    file is a ServerError rather than a silent fallback to another binary.  Then
    ``llama-server`` on PATH, then a finished build for the installed llama-cpp-python
    (an accelerated one first).
    """
    if configured.strip():
        path = Path(configured.strip()).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ServerError(f"llama-server {path} (configured) is not an executable file; "
                              "fix the path in the config or clear it to use the built one")
        return path
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    root = default_build_root()
    for accel in (*[a for a in ACCELS if a != "cpu"], "cpu"):
        with contextlib.suppress(ServerError, OSError):
            built = cached_build(root, accel)
            if built is not None:
                return built
    return None


# --- the managed server -------------------------------------------------------------------

class _Stopping(Exception):
    """stop() was called while the supervisor was starting the server."""


class _PortTaken(ServerError):
    """The server could not bind its port."""


class ManagedServer:
    """One llama-server process on 127.0.0.1, owned by whoever created this object.

    The owner calls :meth:`stop` (or uses ``with``); the interpreter's exit stops it too.
    ``on_state(state, detail)`` is called from the supervisor thread with one of
    :data:`STATES`; it must return quickly and must not raise (its errors are logged).
    """

    def __init__(self, binary: Path, target: Path, draft: Path | None = None, *,
                 spec_type: str | None = None, n_max: int | None = None, n_ctx: int = 4096,
                 threads: int | None = None, gpu_layers: int | None = None, api_key: str = "",
                 extra_args: Sequence[str] = (), log_dir: Path,
                 on_state: StateCallback | None = None) -> None:
        self.binary = Path(binary)
        self.target = Path(target)
        self.draft = Path(draft) if draft is not None else None
        self.spec_type = spec_type if spec_type is not None else ("draft-simple" if draft else "none")
        self.n_max = _int_in("n_max", n_max, 0, 1024)
        self.n_ctx = _int_in("n_ctx", n_ctx, 1, 1 << 24)
        self.threads = _int_in("threads", threads, 1, 4096)
        self.gpu_layers = _int_in("gpu_layers", gpu_layers, -1, 100_000)  # -1: all of them
        self.api_key = _check_key(api_key)
        self.extra_args = tuple(str(a) for a in extra_args)
        self.log_dir = Path(log_dir)
        self.on_state = on_state
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._state = "stopped"
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._url: str | None = None
        self._thread: threading.Thread | None = None
        self._stopping = CancelToken()  # the owner's stop(): the supervisor ends the process and itself
        self._started = threading.Event()
        self._start_error: str | None = None
        self._stop_timeout = 10.0
        self._give_up_at = math.inf  # when wait_started stops waiting for a start under way
        self._start_timeout_s = 0.0

    # -- properties

    @property
    def url(self) -> str | None:
        with self._lock:
            return self._url

    @property
    def pid(self) -> int | None:
        with self._lock:
            proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    @property
    def log_path(self) -> Path:
        return self.log_dir / LOG_NAME

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- the command line

    def command(self, port: int, help_: ServerHelp | None = None) -> list[str]:
        """The full command line for ``port``, every flag checked against the binary's help."""
        h = help_ or server_help(self.binary)
        args = ["--host", HOST, "--port", str(port), "-m", str(self.target)]
        if self.spec_type != "none" or self.draft is not None:
            if not h.spec_types:
                raise ServerError(f"llama-server {self.binary} lists no --spec-type values; "
                                  "use a newer llama-server or run without speculative decoding")
            for t in self.spec_type.split(","):
                if t not in h.spec_types:
                    raise ServerError(f"llama-server {self.binary} does not support --spec-type {t!r}; "
                                      f"it supports: {', '.join(h.spec_types)}")
        if self.draft is not None:
            args += [_spelling(h, "-md", "--model-draft", "--spec-draft-model"), str(self.draft)]
        if self.spec_type != "none" or (self.draft is not None and h.supports("--spec-type")):
            args += ["--spec-type", self.spec_type]
        if self.n_max is not None:
            args += [_spelling(h, "--spec-draft-n-max"), str(self.n_max)]
        args += [_spelling(h, "--metrics"), _spelling(h, "-c", "--ctx-size"), str(self.n_ctx)]
        args += cpu_kernels.server_args(h.flags)  # --no-repack where llama.cpp's extra CPU kernels fault
        if self.threads is not None:
            args += [_spelling(h, "-t", "--threads"), str(self.threads)]
        if self.gpu_layers is not None:
            args += [_spelling(h, "-ngl", "--gpu-layers", "--n-gpu-layers"),
                     "all" if self.gpu_layers == -1 else str(self.gpu_layers)]
        if self.api_key:
            if h.supports("--api-key-file"):  # keeps the key out of the process list
                args += ["--api-key-file", str(self.log_dir / KEY_FILE)]
            else:
                args += [_spelling(h, "--api-key"), self.api_key]
        for a in self.extra_args:
            flag = a.split("=", 1)[0]
            if flag in MANAGED_FLAGS:
                raise ServerError(f"llama-server extra argument {flag} is set by SpecChat itself; "
                                  "use the matching setting instead")
            if re.fullmatch(r"--?[A-Za-z][A-Za-z0-9_.-]*", flag) and not h.supports(flag):
                raise ServerError(f"llama-server {self.binary} does not support {flag}; "
                                  "see its --help for the options it has")
        return [str(self.binary), *args, *self.extra_args]

    # -- life

    def start(self, timeout_s: float = 120, cancel: CancelToken | None = None) -> str:
        """Start the server and wait until ``/health`` says ok; returns ``http://127.0.0.1:PORT``.

        Raises ServerError (the binary lacks a flag or spec type, the process exits while
        starting: its log's last meaningful line, or it is not ready in ``timeout_s``).  A ``cancel``
        that fires first raises :class:`StartWaitCancelled` within :data:`WAIT_SLICE_S`: the server goes on
        starting (a model being loaded does not stop at once anyway), and :meth:`wait_started` waits again.
        """
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                if self._state == "ready" and self._url:
                    return self._url
                raise ServerError(f"llama-server for {self.target.name} is already {self._state}; "
                                  "stop it first")
        for path, what in ((self.target, "model"), (self.draft, "draft model")):
            if path is not None and not path.is_file():
                raise ServerError(f"llama-server: the {what} {path} does not exist; check the path")
        help_ = server_help(self.binary)
        self.command(0, help_)  # every flag checked before anything starts
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            if self.api_key:
                write_text_atomically(self.log_dir / KEY_FILE, self.api_key + "\n")
        except OSError as e:
            raise ServerError(f"llama-server: cannot write to {self.log_dir}: {e.strerror or e}; "
                              "check the directory") from None
        self._stopping = CancelToken()  # the owner's stop(): the supervisor ends the process and itself
        self._started = threading.Event()
        self._start_error = None
        self.last_error = None
        atexit.register(self.stop)
        with self._lock:  # the supervisor's first step waits for this lock: it sees its own thread here
            self._thread = start_daemon(self._run, help_, float(timeout_s), name=f"llama-server {self.target.name}")
        # The supervisor's start is bounded by timeout_s (plus a stop's wait); this only guards
        # against a callback that never returns.
        self._give_up_at = time.monotonic() + timeout_s + self._stop_timeout + 30
        self._start_timeout_s = timeout_s
        return self.wait_started(cancel)

    def wait_started(self, cancel: CancelToken | None = None) -> str:
        """Wait for the start under way (:meth:`start`): its URL, or ServerError as :meth:`start` says;
        :class:`StartWaitCancelled` when ``cancel`` fires first (nothing is stopped: wait again, or stop)."""
        with self._lock:
            thread = self._thread
        if thread is None:
            raise ServerError(f"llama-server for {self.target.name} is not starting; start it first")
        while not self._started.wait(WAIT_SLICE_S):
            if cancel is not None and cancel.cancelled:
                raise StartWaitCancelled(f"llama-server for {self.target.name} is still starting")
            if time.monotonic() > self._give_up_at:
                self.stop()
                raise ServerError(f"llama-server for {self.target.name} did not start in "
                                  f"{self._start_timeout_s:.0f} s")
        if self._start_error is not None:
            thread.join()
            self._forget_thread()
            raise ServerError(self._start_error)
        url = self.url
        assert url is not None
        return url

    def stop(self, timeout_s: float = 10) -> None:
        """End the server: SIGTERM, then SIGKILL after ``timeout_s``; idempotent; joins the supervisor."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        self._stop_timeout = max(0.0, float(timeout_s))
        self._stopping.cancel()
        if thread is threading.current_thread():  # stop() from on_state: the supervisor ends after it
            return
        thread.join(self._stop_timeout + 10)
        if thread.is_alive():  # on_state is stuck: end the process here, the thread ends after it
            with self._lock:
                proc = self._proc
            if proc is not None:
                _terminate(proc, 0)
        self._forget_thread()

    def _forget_thread(self) -> None:
        atexit.unregister(self.stop)
        with self._lock:
            self._thread = None
            self._url = None
        with contextlib.suppress(OSError):
            (self.log_dir / KEY_FILE).unlink()

    # -- the supervisor thread (every process is started here: PR_SET_PDEATHSIG follows a thread)

    def _run(self, help_: ServerHelp, timeout_s: float) -> None:
        try:
            self._set_state("starting", str(self.target))
            self._first_start(help_, timeout_s)
        except (ServerError, _Stopping) as e:
            stopped = isinstance(e, _Stopping)
            self._start_error = (f"llama-server for {self.target.name} was stopped while starting"
                                 if stopped else str(e))
            self.last_error = self._start_error
            self._set_state("stopped" if stopped else "failed", self._start_error)
            self._started.set()
            return
        except BaseException as e:  # a bug: still end the process, and say so in one line
            self._end_process()
            self._start_error = f"llama-server for {self.target.name} could not start: {one_line(repr(e))}"
            self._set_state("failed", self._start_error)
            self._started.set()
            raise
        self._started.set()
        try:
            self._supervise(help_, timeout_s)
        finally:
            self._end_process()
            self._set_state("stopped", "")

    def _first_start(self, help_: ServerHelp, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for attempt in range(PORT_TRIES):
            port = _free_port()
            try:
                self._launch(help_, port, deadline, timeout_s)
                return
            except _PortTaken:
                if attempt == PORT_TRIES - 1:
                    raise

    def _supervise(self, help_: ServerHelp, timeout_s: float) -> None:
        restarts: collections.deque[float] = collections.deque()
        while True:
            rc = self._wait_for_exit()
            if rc is None:
                return
            detail = f"it {exit_description(rc)}: {_last_meaningful(self._log_text())}"
            log.warning(one_line(f"llama-server for {self.target.name} crashed ({detail})"))
            self._set_state("crashed", detail)
            while True:
                now = time.monotonic()
                while restarts and now - restarts[0] > RESTART_WINDOW_S:
                    restarts.popleft()
                if len(restarts) >= MAX_RESTARTS:
                    self.last_error = (f"llama-server for {self.target.name} crashed {MAX_RESTARTS + 1} times "
                                       f"in {RESTART_WINDOW_S:.0f} s; last: {detail}; see {self.log_path}")
                    self._set_state("failed", self.last_error)
                    self._stopping.wait(None)  # nothing runs; the owner's stop() ends this thread
                    return
                restarts.append(now)
                self._set_state("restarting", f"restart {len(restarts)} of {MAX_RESTARTS} "
                                              f"in {RESTART_WINDOW_S:.0f} s")
                try:
                    assert self._port is not None
                    self._launch(help_, self._port, time.monotonic() + timeout_s, timeout_s)
                    break
                except _Stopping:
                    return
                except ServerError as e:
                    detail = str(e)
                    self._set_state("crashed", detail)

    def _launch(self, help_: ServerHelp, port: int, deadline: float, timeout_s: float) -> None:
        """Start one process on ``port`` and wait for ``/health``; on any failure it is ended."""
        if self._stopping.cancelled:
            raise _Stopping
        cmd = self.command(port, help_)
        proc = self._spawn(cmd)
        with self._lock:
            self._proc = proc
            self._port = port
        try:
            self._wait_healthy(proc, port, deadline, timeout_s)
        except BaseException:
            _terminate(proc, self._stop_timeout)
            raise
        with self._lock:
            self._url = f"http://{HOST}:{port}"
        self._set_state("ready", f"http://{HOST}:{port}")

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        self._rotate_log()
        kwargs: dict[str, object] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # a terminal's Ctrl-C reaches SpecChat, which stops it
            if sys.platform.startswith("linux"):
                kwargs["preexec_fn"] = _die_with_parent(os.getpid())
        else:
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        try:
            with self.log_path.open("wb") as out:
                return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,  # type: ignore[call-overload]
                                        stdin=subprocess.DEVNULL, **kwargs)
        except OSError as e:
            raise ServerError(f"llama-server {self.binary}: cannot run it: {e.strerror or e}; "
                              "check that it is an executable for this machine") from None

    def _wait_healthy(self, proc: subprocess.Popen[bytes], port: int, deadline: float,
                      timeout_s: float) -> None:
        import httpx2

        url = f"http://{HOST}:{port}/health"
        last = "no answer"
        with httpx2.Client(timeout=httpx2.Timeout(2.0, connect=0.5), trust_env=False) as client:
            while True:
                if self._stopping.cancelled:
                    raise _Stopping
                status = None
                try:
                    r = client.get(url)
                    status, last = r.status_code, f"HTTP {r.status_code}"
                    ok = status == 200 and _json_status(r) == "ok"
                except httpx2.HTTPError as e:
                    ok, last = False, type(e).__name__
                rc = proc.poll()  # after the request: a 200 from someone else's server on a port
                if rc is not None:  # we failed to bind must not count as ours
                    text = self._log_text()
                    line = _last_meaningful(text)
                    err = _PortTaken if _BIND_FAILED.search(text) else ServerError
                    raise err(f"llama-server for {self.target.name} exited while starting (it {exit_description(rc)}): "
                              f"{line}; see {self.log_path}")
                if ok:
                    return
                if time.monotonic() >= deadline:
                    loading = " (still loading the model)" if status == 503 else ""
                    raise ServerError(f"llama-server for {self.target.name} was not ready in "
                                      f"{timeout_s:.0f} s{loading}; last /health: {last}; see {self.log_path}")
                self._stopping.wait(POLL_S)

    def _wait_for_exit(self) -> int | None:
        """The running process's exit code when it exits, or None when stop() is called."""
        with self._lock:
            proc = self._proc
        assert proc is not None
        while not self._stopping.wait(POLL_S):
            rc = proc.poll()
            if rc is not None:
                return rc
        return None

    def _end_process(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is not None:
            _terminate(proc, self._stop_timeout)

    def _set_state(self, state: str, detail: str) -> None:
        with self._lock:
            self._state = state
        if self.on_state is not None:
            try:
                self.on_state(state, detail)
            except Exception:  # the UI's bug must not kill the supervisor
                log.exception("llama-server state callback failed")

    def _rotate_log(self) -> None:
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            if self.log_path.exists():
                os.replace(self.log_path, self.log_path.with_name(LOG_NAME + ".1"))
        except OSError as e:
            raise ServerError(f"llama-server: cannot write its log in {self.log_dir}: {e.strerror or e}; "
                              "check the directory") from None

    def _log_text(self, tail: int = 64 * 1024) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


# --- helpers --------------------------------------------------------------------------------

def _int_in(name: str, value: int | None, low: int, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ServerError(f"llama-server setting {name}={value!r} is out of range; use {low}..{high}")
    return value


def _check_key(key: str) -> str:
    # One line, no spaces or commas (llama-server splits --api-key on commas), not a comment
    # ('#' starts one in --api-key-file: the server would run with no key at all).
    if key and (not key.isprintable() or any(c.isspace() for c in key) or "," in key or key.startswith("#")):
        raise ServerError("llama-server API key: use one line of printable characters without spaces "
                          "or commas, not starting with '#'")
    return key


def _spelling(h: ServerHelp, *names: str) -> str:
    for name in names:
        if h.supports(name):
            return name
    raise ServerError(f"llama-server {h.binary} does not support {names[0]}; "
                      "use a newer llama-server (see its --help)")


def _json_status(r: httpx2.Response) -> str | None:
    try:
        body = r.json()
    except ValueError:
        return None
    status = body.get("status") if isinstance(body, dict) else None
    return status if isinstance(status, str) else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _terminate(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM (its whole session on POSIX), wait, SIGKILL, and always reap it: no zombie."""
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(OSError):
        if os.name == "posix":  # not reaped yet, so its pid (= its session's group) is still its own
            os.killpg(proc.pid, sig)
        elif sig == signal.SIGTERM:
            proc.terminate()
        else:
            proc.kill()


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn asking Linux to SIGTERM the server when the thread that started it dies
    (the supervisor thread lives until stop(), so a kill -9 of SpecChat leaves no orphan)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    pr_set_pdeathsig = 1

    def child() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return child


def _last_meaningful(text: str) -> str:
    """The line of a server's output that says what went wrong.

    llama.cpp marks each line with its level (``0.00.005.423 E gguf_init_from_reader: ...``);
    a failure is a run of ``E`` lines whose first one is the cause (``this GGUF file is
    version ... but this software only supports up to version 3``) and the rest its echoes
    (``failed to load model``).  Without levels: the last line saying "error", else the
    last naming a problem ("failed", "cannot"...), else the last line.  Generic lines
    ("exiting due to...", "cleaning up before exit") never count.
    """
    lines = [ln.strip() for ln in text.splitlines()[-200:]]
    useful = [ln for ln in lines if not _GENERIC_LINE.search(ln)]
    levelled = [_LEVEL_LINE.match(ln) for ln in useful]
    errors = [i for i, m in enumerate(levelled) if m and m.group(1) == "E"]
    if errors:
        first = errors[-1]
        while first > 0 and (m := levelled[first - 1]) is not None and m.group(1) == "E":
            first -= 1
        match = levelled[first]
        assert match is not None
        return one_line(match.group(2), 300)
    for pattern in (_ERROR_LINE, _PROBLEM_LINE):
        for line in reversed(useful):
            if pattern.search(line):
                return one_line(line, 300)
    return one_line(useful[-1], 300) if useful else "no output"


def spec_type_offers(available: tuple[str, ...], target: Path | None, draft: Path | None) -> dict[str, str]:
    """Each speculative type this llama-server lists → "" when the chat's models can use it, else why not
    (one line).

    The kinds come from the files' GGUF headers (:mod:`specchat.models.drafter_heads`): ``draft-simple``
    wants an ordinary draft model with the target's vocabulary; ``draft-eagle3``, ``draft-dflash`` and
    ``draft-dspark`` a trained head of that kind as the draft; ``draft-mtp`` an MTP head (``mtp-*.gguf``,
    Gemma 4's assistant) as the draft, or no draft and a target with its own MTP layers; ``ngram-*``
    nothing but the text.  A head of the right kind is then checked against the target as llama.cpp
    checks it at load (:func:`~specchat.models.drafter_heads.check_head`), so a head llama.cpp would
    refuse, abort on or silently not draft with is greyed out with the field that disagrees.  A file
    whose header cannot be read is left to llama-server, which says what is wrong with it.
    """
    from specchat.models.drafter_heads import DrafterKind

    t, d = _header(target), _header(draft)
    d_kind = _kind(d)
    by_type = {k.spec_type: k for k in (DrafterKind.EAGLE3, DrafterKind.DFLASH, DrafterKind.DSPARK)}
    out: dict[str, str] = {}
    for spec in available:
        if spec == "none" or spec.startswith("ngram"):
            out[spec] = ""
        elif spec == "draft-simple":
            out[spec] = _simple_offer(draft, t, d, d_kind)
        elif spec == "draft-mtp":
            out[spec] = _mtp_offer(draft, t, d, d_kind)
        elif spec in by_type:
            out[spec] = _head_offer(by_type[spec], draft, t, d, d_kind)
        else:  # a type this SpecChat does not know: a trained drafter whose architecture is named after it
            want = spec.removeprefix("draft-")
            out[spec] = "" if d is not None and want in d.architecture.lower() else \
                f"needs a trained {want} drafter as the draft model"
    return out


def _simple_offer(draft: Path | None, t: GGUFHeader | None, d: GGUFHeader | None, d_kind: DrafterKind | None) -> str:
    from specchat.models.drafter_heads import check_head

    if draft is None:
        return "needs a draft model: choose one in the pair"
    if d_kind is not None and d_kind.trained:
        return f"the draft is {d_kind.label}, which drafts with --spec-type {d_kind.spec_type}"
    return (check_head(t, d) or "") if t is not None and d is not None else ""


def _mtp_offer(draft: Path | None, t: GGUFHeader | None, d: GGUFHeader | None, d_kind: DrafterKind | None) -> str:
    from specchat.models.drafter_heads import DrafterKind, check_head, check_mtp_target

    if t is None:
        return "needs a target with multi-token-prediction layers, or an MTP head as the draft (the target is unreadable)"
    if draft is None:
        return check_mtp_target(t) or ""
    if d_kind is DrafterKind.MTP_HEAD:
        return (check_head(t, d) or "") if d is not None else ""
    if check_mtp_target(t) is None:  # llama-server would load the draft as the MTP head
        return "the target's own multi-token-prediction layers draft without a draft model: take the draft out of the pair"
    what = d_kind.label if d_kind is not None else "not an MTP head"
    return f"needs an MTP head (mtp-*.gguf) as the draft, or a target with multi-token-prediction layers; the draft is {what}"


def _head_offer(want: DrafterKind, draft: Path | None, t: GGUFHeader | None, d: GGUFHeader | None,
                d_kind: DrafterKind | None) -> str:
    from specchat.models.drafter_heads import check_head

    need = f"needs {want.label} as the draft model"
    if draft is None or d is None or d_kind is not want:
        return need + (f"; the draft is {d_kind.label}" if d_kind is not None and draft is not None else "")
    return (check_head(t, d) or "") if t is not None else ""


def _header(path: Path | None) -> GGUFHeader | None:
    from specchat.models.gguf_header import GGUFError, read_file_header

    if path is None:
        return None
    try:
        return read_file_header(path)
    except (GGUFError, OSError):
        return None


def _kind(header: GGUFHeader | None) -> DrafterKind | None:
    from specchat.models.drafter_heads import drafter_kind
    from specchat.models.gguf_header import GGUFError

    if header is None:
        return None
    try:
        return drafter_kind(header)
    except GGUFError:
        return None
