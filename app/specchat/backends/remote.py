"""A server as a chat's backend (a :class:`~.protocol.Backend`): connect (probe), answer, close.

:class:`RemoteConfig` names what to connect to; it is frozen and compares by value like
the engine's ``PairConfig``, so the answer service reloads only when a chat's backend
really changed.  :class:`RemoteBackend` owns the HTTP client (and, for a managed
llama-server, the server process) for as long as it is the loaded backend.  Its answers
are the local backend's events: ``Started``, then the stream with its text split once
(:func:`~specchat.engine.phases.split_answer`; a server's reasoning arrives inside
``<think>`` tags, see :mod:`specchat.remote.chat`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from specchat.engine.answer import AnswerEvent, AnswerRequest, Started
from specchat.engine.cancel import CancelToken
from specchat.engine.events import Done, Fallback, GenerationStats, StopReason
from specchat.engine.phases import split_answer
from specchat.engine.progress import ProgressSink
from specchat.engine.settings import Mode
from specchat.errors import UserError
from specchat.remote.chat import Cancel, stream_answer
from specchat.remote.client import Capabilities, ServerClient
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import MANAGED, StartWaitCancelled
from specchat.remote.servers import Keychain, ServerConfig

from .protocol import PairInfo, ServerReport
from .server_auto import WINDOW, Choice, Sample, ServerAuto

if TYPE_CHECKING:
    from specchat.remote.llama_server import ManagedServer


@dataclass(frozen=True, slots=True)
class ManagedSpec:
    """A llama-server SpecChat starts on 127.0.0.1 for a chat's own pair, with one of llama.cpp's
    speculative types (the native drafters its Python API cannot reach: eagle3, mtp, dflash, ngram-*)."""

    target: Path
    draft: Path | None = None
    spec_type: str = "draft-simple"
    n_ctx: int = 4096
    threads: int | None = None
    gpu_layers: int | None = None
    binary: str = ""  # a configured llama-server ("" = PATH, then a build of 'specchat servers build')
    log_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    server: ServerConfig
    managed: ManagedSpec | None = None  # set: start this server first (its URL is known once it runs)

    @classmethod
    def managed_server(cls, spec: ManagedSpec) -> RemoteConfig:
        return cls(ServerConfig(MANAGED, "http://127.0.0.1:0"), spec)

    controller: ClassVar[None] = None  # a server drafts as it was started: no controller of ours

    @property
    def opens(self) -> RemoteConfig:
        """What connecting depends on: all of it."""
        return self

    @property
    def native_files(self) -> tuple[Path, ...]:
        """Model files llama.cpp runs in this process for it: none (a server runs its own)."""
        return ()

    @property
    def label(self) -> str:
        if self.managed is not None:
            return f"llama-server on this machine ({self.managed.spec_type})"
        return f"{self.server.name} ({self.server.url})"


class RemoteBackend:
    """A connected server: its capabilities, and answers as engine events."""

    def __init__(self, client: ServerClient, caps: Capabilities, process: ManagedServer | None = None,
                 label: str = "", spec: ManagedSpec | None = None) -> None:
        self.client = client
        self.caps = caps
        self._process = process  # the ManagedServer this backend started and stops
        self.label = label or client.where  # as the chat names it (RemoteConfig.label)
        # a managed llama-server started with a drafter: auto turns it on or off per answer (a restart of the
        # same binary, target and options with or without the drafter), from the rates of each task
        self._spec = spec if process is not None and spec is not None and caps.speculative else None
        self.auto = ServerAuto(f"llama-server's {spec.spec_type}") if self._spec is not None and spec else None
        self._samples: dict[str, list[Sample]] = {}  # per task, this backend's own answers (no store given)
        self._lost = ""  # why the managed server is gone (a switch that did not start again): every answer says it
        self._restart_s: float | None = None  # how long the last switch took (auto weighs its looks by it)
        # a restart a Stop stopped waiting for: (the server, with its drafter, when it began); it goes on
        # starting and the next answer waits for it
        self._starting: tuple[ManagedServer, bool, float] | None = None

    @classmethod
    def open(cls, config: RemoteConfig, cancel: CancelToken, progress: ProgressSink | None = None) -> RemoteBackend:
        """:meth:`connect`, as :func:`.factory.open_backend` calls it (a probe is a few short GETs).
        A server has no steps to count: ``progress`` hears nothing, the window says it is connecting."""
        return cls.connect(config, cancel=cancel)

    @property
    def info(self) -> PairInfo:
        caps = self.caps
        return PairInfo(target=caps.model_name, draft=None, backend=f"{caps.engine} at {self.label}",
                        n_ctx=caps.n_ctx or 0, supports_reasoning_switch=True, speculation_blocked="",
                        verify_ms={}, draft_ms=None, target_bytes=0, draft_bytes=0,
                        server=ServerReport(caps.describe(), caps.notes, caps.vram))

    @classmethod
    def connect(cls, config: RemoteConfig, keychain: Keychain | None = None,
                cancel: CancelToken | None = None) -> RemoteBackend:
        """Probe the server, after starting it when it is a managed one (ServerError, one line,
        when it cannot be used)."""
        if config.managed is not None:
            return cls._start_managed(config.managed, config.label)
        key = (keychain or Keychain()).get(config.server.name)
        client = ServerClient(config.server, key)
        try:
            caps = client.probe(cancel=cancel)  # within its deadline; a cancel (closing the app) ends it at once
        except BaseException:
            client.close()
            raise
        return cls(client, caps, label=config.label)

    @classmethod
    def _start_managed(cls, spec: ManagedSpec, label: str) -> RemoteBackend:
        from specchat.profile import Profile
        from specchat.remote.llama_server import ManagedServer, find_llama_server

        binary = find_llama_server(spec.binary)
        if binary is None:
            raise ServerError("no llama-server found: put one on PATH, or build one with 'specchat servers build' "
                              "(add --cuda, --metal or --vulkan for a GPU)")
        log_dir = spec.log_dir or Profile.default().cache_dir / "llama-server-logs"
        process = ManagedServer(binary, spec.target, spec.draft, spec_type=spec.spec_type, n_ctx=spec.n_ctx,
                                threads=spec.threads, gpu_layers=spec.gpu_layers, log_dir=log_dir)
        url = process.start()
        try:
            client = ServerClient(ServerConfig(MANAGED, url))
            try:
                caps = client.probe()
            except BaseException:
                client.close()
                raise
        except BaseException:
            process.stop()
            raise
        return cls(client, caps, process, label, spec)

    def _switch(self, on: bool, cancel: Cancel | None = None) -> None:
        """Restart the managed llama-server with its drafter (``on``) or without (plain decoding): the same
        binary, target, context, threads and layers; ServerError (one line) when it does not come back.
        A ``cancel`` (the answer's Stop) ends the wait at once with StartWaitCancelled; the server goes on
        starting, and the next answer waits for it (:meth:`_come_back`)."""
        from specchat.remote.llama_server import ManagedServer

        spec, old = self._spec, self._process
        if spec is None or old is None:
            raise ServerError(self._lost or "the managed llama-server is not running: load the chat's pair again")
        began = time.monotonic()
        self.client.close()
        old.stop()
        self._process = None
        process = ManagedServer(old.binary, spec.target, spec.draft if on else None,
                                spec_type=spec.spec_type if on else "none", n_ctx=spec.n_ctx, threads=spec.threads,
                                gpu_layers=spec.gpu_layers, log_dir=old.log_dir)
        self._starting = (process, on, began)
        self._come_back(cancel, first=True)

    def _come_back(self, cancel: Cancel | None, first: bool = False) -> None:
        """Wait for the restart under way (:meth:`_switch`'s), then connect to it."""
        assert self._starting is not None
        process, on, began = self._starting
        try:
            url = process.start(cancel=cancel) if first else process.wait_started(cancel)
            client = ServerClient(ServerConfig(MANAGED, url))
            try:
                caps = client.probe()  # the server is up: one quick request
            except BaseException:
                client.close()
                raise
        except StartWaitCancelled:
            raise  # still starting: the next answer waits again
        except BaseException as exc:
            self._starting = None
            process.stop()
            self._lost = (f"llama-server did not start again {'with' if on else 'without'} its drafter "
                          f"({exc if isinstance(exc, ServerError) else type(exc).__name__}): load the chat's pair again")
            if isinstance(exc, ServerError):
                raise ServerError(self._lost) from None
            raise
        self._starting = None
        self.client, self.caps, self._process = client, caps, process
        self._restart_s = time.monotonic() - began

    def _auto_choice(self, request: AnswerRequest) -> tuple[Choice | None, bool | None]:
        """Under ``auto`` on a managed llama-server with a drafter: on or off for this answer, and the side
        the server must be switched to first (None: it runs the right one); under draft or lookup, the
        drafter back on if auto had turned it off."""
        if self.auto is None:
            return None, None
        running = bool(self.caps.speculative)
        if request.mode is not Mode.AUTO:  # draft or lookup: the drafter, back on if off; baseline: as it runs
            return None, (True if request.mode is not Mode.BASELINE and not running else None)
        samples = ([Sample(on, c) for on, c in request.measured] if request.measured
                   else self._samples.get(request.task, []))
        choice = self.auto.choose(request.task, samples, running, self._restart_s)
        return choice, (choice.on if choice.on != running else None)

    @staticmethod
    def _side(on: bool) -> str:
        return "with its drafter" if on else "without its drafter (plain decoding)"

    def _switch_note(self, on: bool, choice: Choice | None) -> Fallback:
        """What the user reads while the server restarts (seconds for a large model), before the answer."""
        side = self._side(on)
        took = f"; the last restart took {self._restart_s:.1f} s" if self._restart_s is not None else ""
        why = f" ({choice.why})" if choice is not None else ""
        return Fallback(f"restarting llama-server {side}{why}{took}")

    def _learn(self, task: str, on: bool, done: Done) -> None:
        """A finished answer's counts teach its task's rate (this backend's own, for callers with no store)."""
        if done.stop_reason in (StopReason.CANCELLED, StopReason.ERROR) or not done.stats.counts.decode_tok_s:
            return
        samples = self._samples.setdefault(task, [])
        samples.append(Sample(on, done.stats.counts))
        del samples[:-4 * WINDOW]

    def answer(self, request: AnswerRequest, cancel: Cancel, *, mode: str = "",
               observe: Callable[[dict], None] | None = None) -> Iterator[AnswerEvent]:
        """``Started``, then the server's answer as engine events, its text split.  ``observe`` sees every
        chunk as sent.  ``request.mode`` is the local loop's: a server drafts as it was started, and an
        answer asked as baseline of one that drafts says so (:meth:`baseline_note`) rather than pass for plain."""
        if request.prompt:
            raise UserError("a raw prompt (no chat template) needs a pair loaded by SpecChat, not a server")
        if self._lost:
            raise ServerError(self._lost)
        yield Started(0, False)
        try:
            if self._starting is not None:  # a restart an earlier Stop left under way
                yield Fallback(f"waiting for llama-server to come back {self._side(self._starting[1])}")
                self._come_back(cancel)
            choice, switch_to = self._auto_choice(request)
            if switch_to is not None:
                yield self._switch_note(switch_to, choice)
                self._switch(switch_to, cancel)
        except StartWaitCancelled:  # Stop while it restarts: the answer ends now, the server comes up meanwhile
            yield Done(StopReason.CANCELLED, GenerationStats.empty(self.mode_label))
            return
        note = self.baseline_note(request.mode)
        if note is not None:
            yield note
        structured = request.sampling.structured.kind
        for ev in split_answer(stream_answer(self.client, self.caps, request, cancel, mode=mode or self.mode_label,
                                             observe=observe)):
            if isinstance(ev, Done):
                stats = ev.stats
                if structured:  # the server was held to the chat's schema or grammar
                    stats = replace(stats, structured=structured)
                if note is not None:  # the footer's stats line says why this "baseline" answer drafted
                    stats = replace(stats, fallbacks=(*stats.fallbacks, note.reason), notes=(*stats.notes, note.brief))
                if choice is not None:  # auto's choice for this task, and why, in the stats line
                    stats = replace(stats, notes=(*stats.notes, choice.why))
                ev = replace(ev, stats=stats)
                if choice is not None:
                    self._learn(request.task, choice.on, ev)
            yield ev

    def baseline_note(self, mode: Mode) -> Fallback | None:
        """The note a baseline answer of a drafting server gets.  A server drafts as it was started:
        llama-server takes no per-request off switch (its ``speculative.*`` request fields are compiled out,
        tools/server/server-schema.cpp:198, and a slot's draft length is the room left in its context and
        max_tokens, server-context.cpp:453), so the answer still drafts and its mode label stays "+draft".
        None for any other mode, or a server that does not draft (or does not say)."""
        if mode is not Mode.BASELINE or not self.caps.speculative or self.caps.kind.per_request_mode:
            return None
        how = f" ({self.caps.speculation})" if self.caps.speculation else ""
        fix = ("set the chat's llama.cpp drafter to 'none'" if self._process is not None
               else "start the server without a drafter")
        return Fallback(f"speculation stays on: {self.caps.engine} drafts as it was started{how} and cannot turn "
                        f"drafting off for one answer; for plain decoding, {fix}",
                        permanent=True, brief="the server drafts: speculation cannot be turned off per answer")

    @property
    def mode_label(self) -> str:
        """What the answer's footer says ran it: the engine, and "+draft" when the server drafts."""
        return self.caps.engine + ("+draft" if self.caps.speculative else "")

    def close(self) -> None:
        """Close the connection, and stop the server if this backend started it."""
        self.client.close()
        if self._starting is not None:
            self._starting[0].stop()
            self._starting = None
        if self._process is not None:
            self._process.stop()
            self._process = None
