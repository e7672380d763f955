"""A thin, checked layer over llama-cpp-python's low-level API.

One :class:`LoadedModel` is a model, its context and one batch allocated once.
It mirrors what sits in the KV cache (``tokens``) so callers can append with
:meth:`decode` and roll back with :meth:`trim`; every llama.cpp return code is
checked and turned into :class:`LlamaError` with a one-line message.  A decode under
way stops within one graph node when the answer is stopped (:meth:`LoadedModel.abort_on`,
llama.cpp's abort callback), a prefill of thousands of tokens included.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from specchat.engine import cpu_kernels
from specchat.errors import UserError
from specchat.models.gguf_header import GGUFError, validate_file

if TYPE_CHECKING:
    from specchat.cancel import CancelToken


class LlamaError(UserError, RuntimeError):
    """llama.cpp refused or failed; the message is one line for the user."""


class LoadCancelled(LlamaError):
    """Loading was given up because the caller asked (a newer load, or the app closing)."""


class DecodeAborted(LlamaError):
    """A decode stopped part-way because the answer was stopped (:meth:`LoadedModel.abort_on`); the KV cache
    holds what it held before the decode."""


_log_lock = threading.Lock()
_last_log: list[str] = []
_LOG_KEEP = 40
_log_count = 0  # lines seen so far: a load reads what was logged after its start (:func:`_buffers_since`)
_BUFFER_LINE = re.compile(r"\b([A-Za-z0-9_]+) model buffer size")
_buffer_lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=64)  # (line number, buffer type)


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # keep the last lines so a failed load can say why; never print (the app owns the terminal)
    try:
        line = text.decode("utf-8", errors="replace").rstrip()
    except Exception:  # pragma: no cover - never raise into C
        return
    if line:
        global _log_count
        buffer = _BUFFER_LINE.search(line) if "model buffer size" in line else None
        with _log_lock:
            _last_log.append(line)
            del _last_log[:-_LOG_KEEP]
            _log_count += 1
            if buffer is not None:  # kept apart: a load logs hundreds of lines after these (repacking)
                _buffer_lines.append((_log_count, buffer.group(1)))


def _log_mark() -> int:
    with _log_lock:
        return _log_count


def _buffers_since(mark: int) -> tuple[str, ...]:
    """The buffer types llama.cpp put model weights in ("CPU_Mapped", "CPU_REPACK", "AMX", "CUDA0") since
    :func:`_log_mark` said ``mark``, from its "X model buffer size" lines, each once, in order."""
    with _log_lock:
        return tuple(dict.fromkeys(name for n, name in _buffer_lines if n > mark))


_backend_ready = False


def _on_load_progress(cancelled: Callable[[], bool] | None, progress: Callable[[float, float], None] | None,
                      share: float, _user_data: ctypes.c_void_p) -> bool:
    """llama.cpp's progress callback: report the share read, go on unless cancelled.  Nothing may
    raise through ctypes (it would answer false: an abort), so a report that fails (a bug) prints its
    traceback and the load goes on."""
    if progress is not None:
        try:
            progress(float(share), 1.0)
        except Exception:
            traceback.print_exc()
    return not (cancelled is not None and cancelled())


def _flag_reader() -> Callable[[ctypes.c_void_p], bool]:
    """llama.cpp's abort callback, answering from a flag byte (:class:`_AbortFlag`): the C library's
    ``strlen`` over a two-byte buffer (b"\\0\\0" is 0: go on; b"\\1\\0" is 1: stop).  The compute thread
    calls it after every graph node (about 500 a decode of a 0.5B model); as C it takes no GIL, never
    waits for another Python thread and never swallows a Ctrl+C that arrives in the main thread, as a
    Python callback would (an exception in a ctypes callback is printed and dropped).  Where no C library
    can be found, a Python callback reads the byte instead."""
    address = None
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None) if os.name != "nt" else ctypes.cdll.msvcrt
        address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
    if address:
        return llama_cpp.ggml_abort_callback(address)
    return llama_cpp.ggml_abort_callback(lambda data: ctypes.string_at(data, 1) != b"\0")


_ABORT_READER = _flag_reader()  # one for the process: every context's abort_callback points at it


class _AbortFlag:
    """The byte a context's abort callback reads (its ``abort_callback_data``): set by the answer's
    CancelToken from the cancelling thread, cleared when the answer is over.  Both under one lock, so a
    cancel that races the answer's end never leaves it set for the next decode."""

    def __init__(self) -> None:
        self.byte = ctypes.create_string_buffer(2)
        self._lock = threading.Lock()
        self._armed: object = None

    @property
    def data(self) -> ctypes.c_void_p:
        return ctypes.cast(self.byte, ctypes.c_void_p)

    def arm(self, token: object) -> Callable[[], None]:
        """Arm for ``token``; the closer to run when it is cancelled (sets the byte while still armed)."""
        with self._lock:
            self._armed = token
            self.byte[0] = b"\0"

        def stop() -> None:
            with self._lock:
                if self._armed is token:
                    self.byte[0] = b"\1"
        return stop

    def disarm(self) -> None:
        with self._lock:
            self._armed = None
            self.byte[0] = b"\0"


def init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        if not os.environ.get("SPECCHAT_LLAMA_LOG"):
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _backend_ready = True


def last_log_error() -> str:
    with _log_lock:
        for line in reversed(_last_log):
            low = line.lower()
            if any(w in low for w in ("error", "failed", "unable", "cannot", "out of memory")):
                return line
    return ""


_cuda_graphs: bool | None = None


def replays_shapes(options: ModelOptions) -> bool:
    """Whether a model loaded with ``options`` decodes through CUDA graphs: its decodes' cost depends on
    their batch shape staying the same (engine/shapes.py)."""
    return options.n_gpu_layers != 0 and cuda_graphs()


def cuda_graphs() -> bool:
    """Whether llama.cpp runs offloaded decodes through CUDA graphs here (a CUDA build, graphs not
    disabled by ``GGML_CUDA_DISABLE_GRAPHS``): then a decode's cost depends on its batch shape
    staying the same (engine/shapes.py)."""
    global _cuda_graphs
    if _cuda_graphs is None:
        init_backend()
        system = llama_cpp.llama_print_system_info().decode(errors="replace").upper()
        _cuda_graphs = (bool(llama_cpp.llama_supports_gpu_offload()) and "CUDA" in system
                        and not os.environ.get("GGML_CUDA_DISABLE_GRAPHS"))
    return _cuda_graphs


def backend_info() -> dict[str, str]:
    """Versions and the compute backend in use, for --version and the About box."""
    init_backend()
    system = llama_cpp.llama_print_system_info().decode(errors="replace")
    gpu = bool(llama_cpp.llama_supports_gpu_offload())
    names = []
    for tag, name in (("CUDA", "CUDA"), ("METAL", "Metal"), ("VULKAN", "Vulkan"), ("HIP", "ROCm"), ("SYCL", "SYCL")):
        if tag in system.upper():
            names.append(name)
    kernels = cpu_kernels.known()
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "backend": "+".join(names) if gpu and names else ("GPU" if gpu else "CPU"),
        "system_info": system.strip(),
        # what the CPU probe found (engine/cpu_kernels.py); it runs before the first model loads
        "cpu_kernels": kernels.line() if kernels is not None else "llama.cpp's CPU kernels: checked at the first load",
    }


def default_threads() -> int:
    try:
        import psutil

        return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)
    except Exception:  # pragma: no cover
        return max(1, os.cpu_count() or 1)


class _Handles:
    """A model's native handles, freed in order by :meth:`free` (kept apart from the
    :class:`LoadedModel` so that its finalizer holds no reference to the model)."""

    def __init__(self, model: llama_cpp.llama_model_p | None) -> None:
        self.model = model
        self.ctx: llama_cpp.llama_context_p | None = None
        self.batch: llama_cpp.llama_batch | None = None
        # what the context's abort callback reads: kept here, alive until the context is freed
        self.abort = _AbortFlag()
        self.abort_callback = _ABORT_READER

    def free(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None


@dataclass(frozen=True, slots=True)
class ModelOptions:
    n_ctx: int = 4096
    n_gpu_layers: int = -1  # -1: as many as fit (all); 0: CPU only
    n_threads: int = 0  # 0: physical cores
    n_batch: int = 512
    n_ubatch: int = 512
    flash_attn: bool | None = None  # None: llama.cpp decides
    # llama.cpp's extra buffer types for CPU weights (AMX, repacked layouts); None: what this machine's
    # probe found runs (engine/cpu_kernels.py: AMX faults on some virtual machines)
    extra_buffers: bool | None = None


class LoadedModel:
    """A model with one context (sequence 0) and a reusable batch."""

    # the answer's stop while :meth:`abort_on` runs (None outside it); the flag its context's abort callback reads
    abort_token: CancelToken | None = None
    _abort: _AbortFlag | None = None

    def __init__(self, path: str | Path, options: ModelOptions = ModelOptions(), *, n_outputs: int = 0,
                 cancelled: Callable[[], bool] | None = None,
                 progress: Callable[[float, float], None] | None = None) -> None:
        """``cancelled``: polled while the weights load; when it turns true the load stops
        within one tensor and :class:`LoadCancelled` is raised.  ``progress(done, 1.0)``: the share
        of the weights read, from llama.cpp's progress callback (called in this thread)."""
        init_backend()
        self.path = Path(path)
        self.options = options
        try:
            self.header = validate_file(self.path)
        except GGUFError as exc:
            raise LlamaError(str(exc)) from None
        if cancelled is not None and cancelled():
            raise LoadCancelled(f"{self.path.name}: loading was cancelled")
        extra = options.extra_buffers
        if extra is None:
            try:
                extra = cpu_kernels.extra_buffers()
            except cpu_kernels.CpuKernelError as exc:
                raise LlamaError(str(exc)) from None
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = options.n_gpu_layers if options.n_gpu_layers >= 0 else 999
        if hasattr(mparams, "use_extra_bufts"):
            mparams.use_extra_bufts = extra
        self.extra_buffers: bool = extra
        mark = _log_mark()
        if cancelled is not None or progress is not None:
            # llama.cpp aborts the load when the progress callback returns false; the ctypes
            # callback object must outlive the call
            callback = llama_cpp.llama_progress_callback(partial(_on_load_progress, cancelled, progress))
            mparams.progress_callback = callback
        self._model: llama_cpp.llama_model_p | None = llama_cpp.llama_model_load_from_file(
            str(self.path).encode(), mparams)
        # the owner of the native memory: close() runs it, and so does the garbage collector if a
        # path ever drops a model unclosed (a model is ~100 MB to GBs that nothing else frees)
        self._handles = _Handles(self._model)
        self._finalizer = weakref.finalize(self, self._handles.free)
        self._finalizer.atexit = False  # at exit the process goes anyway; llama.cpp may be torn down
        if cancelled is not None and cancelled():  # aborted by the callback, or cancelled just after
            self.close()
            raise LoadCancelled(f"{self.path.name}: loading was cancelled")
        if not self._model:
            why = last_log_error()
            raise LlamaError(f"{self.path.name}: llama.cpp could not load the model" + (f" ({why})" if why else ""))
        # where llama.cpp put the weights ("CPU_Mapped", "CPU_REPACK", "AMX", "CUDA0"), from its load log
        self.buffer_types: tuple[str, ...] = _buffers_since(mark)
        self._ctx: llama_cpp.llama_context_p | None = None
        self._batch: llama_cpp.llama_batch | None = None
        # rows of logits one decode may ask for: past it llama.cpp aborts the process (GGML_ASSERT)
        self.n_outputs: int = min(n_outputs, options.n_batch) if n_outputs else options.n_batch
        # its decodes replay CUDA graphs: the loop keeps the shapes it feeds it (engine/shapes.py)
        self.shape_sensitive = replays_shapes(options)
        try:
            self._init_context(options, n_outputs)
        except BaseException:
            self.close()
            raise

    def _init_context(self, options: ModelOptions, n_outputs: int) -> None:
        threads = options.n_threads or default_threads()
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = options.n_ctx
        cparams.n_batch = options.n_batch
        cparams.n_ubatch = min(options.n_ubatch, options.n_batch)
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = False
        if hasattr(cparams, "n_outputs_max") and n_outputs:
            cparams.n_outputs_max = n_outputs
        if options.flash_attn is not None and hasattr(cparams, "flash_attn_type"):
            cparams.flash_attn_type = 1 if options.flash_attn else 0
        # a decode stops within one graph node once the flag is set (abort_on): llama_decode returns 2
        cparams.abort_callback = self._handles.abort_callback
        cparams.abort_callback_data = self._handles.abort.data
        self._ctx = self._handles.ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        self._abort = self._handles.abort
        if not self._ctx:
            why = last_log_error()
            raise LlamaError(
                f"{self.path.name}: could not create a context of {options.n_ctx} tokens"
                + (f" ({why})" if why else " (out of memory?)")
            )
        # declared: llama_cpp's functions are typed Any behind its ctypes decorator
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch: int = options.n_batch
        self.n_threads: int = threads  # what it was loaded with: the most it runs (engine/threads.py)
        self.threads_now: int = threads
        self._mem: llama_cpp.llama_memory_t | None = llama_cpp.llama_get_memory(self._ctx)
        self.vocab: llama_cpp.llama_vocab_p | None = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self._row_type = ctypes.c_float * self.n_vocab  # one logits row
        self.can_trim: bool = not (
            llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(self._model)
        )
        # a context shift (drop a block, move what follows back) needs positions that can move: not
        # on recurrent or hybrid models, nor where llama.cpp says this memory cannot shift (M-RoPE)
        self.can_shift: bool = self.can_trim and bool(llama_cpp.llama_memory_can_shift(self._mem))
        self.add_bos: bool = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self._batch = self._handles.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []  # what sits in the KV cache, in order
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Free the batch, the context and the model (once; later calls do nothing)."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        self._batch = None
        self._ctx = None
        self._model = None

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_threads(self, n: int) -> None:
        """Run the next decodes (single tokens and batches) on ``n`` threads, 1 to :attr:`n_threads`."""
        n = max(1, min(int(n), self.n_threads))
        if n != self.threads_now and self._ctx:
            llama_cpp.llama_set_n_threads(self._ctx, n, n)
            self.threads_now = n

    # -- metadata ---------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode(errors="replace")

    @property
    def size_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self._model))

    # -- tokens -----------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise LlamaError("tokenization failed")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for; special tokens (end of turn ...) render as nothing."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            cached = self._pieces[token] = buf.raw[: max(n, 0)]
        return cached

    def is_eog(self, token: int) -> bool:
        v = self._eog.get(token)
        if v is None:
            v = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return v

    def token_text(self, token: int) -> str:
        raw = llama_cpp.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    # -- KV cache ---------------------------------------------------------------

    @contextlib.contextmanager
    def abort_on(self, cancel: CancelToken | None) -> Iterator[None]:
        """While the block runs, cancelling ``cancel`` stops a decode under way within one graph node (a
        prefill of thousands of tokens, a verify batch): :meth:`decode` rolls the cache back to what it
        held and raises :class:`DecodeAborted`, and the context stays usable.  A decode started after the
        cancel stops at its first node.  Outside the block nothing aborts."""
        if cancel is None:
            yield
            return
        flag = self._abort
        remove = cancel.on_cancel(flag.arm(cancel)) if flag is not None else (lambda: None)
        self.abort_token = cancel
        try:
            yield
        finally:
            self.abort_token = None
            remove()
            if flag is not None:
                flag.disarm()

    def decode(self, tokens: list[int], *, logits: str | int = "last") -> None:
        """Append ``tokens`` after what is in the KV cache.

        ``logits``: "last" (one row, the last token), "all" (a row per token), "none", or a number n: a
        row for each of the last n tokens (what the prompt's agreement reads, engine/generate.py).  At
        most ``n_outputs`` rows: the context holds no more, and asking llama.cpp for more aborts the process.  Large inputs go in ``n_batch`` chunks; only the final chunk gets logits
        (with n rows, the final chunk starts early enough to hold them).
        On failure the cache is rolled back to where it was and LlamaError is raised.
        """
        if not tokens:
            return
        start = len(self.tokens)
        if start + len(tokens) > self.n_ctx:
            raise LlamaError(f"context full: {start} + {len(tokens)} tokens > {self.n_ctx}")
        if logits == "all" and len(tokens) > self.n_batch:
            raise LlamaError(f"cannot take logits for {len(tokens)} tokens at once (n_batch {self.n_batch})")
        if isinstance(logits, int):
            rows = min(max(logits, 0), len(tokens))
        else:
            rows = len(tokens) if logits == "all" else int(logits == "last")
        if rows > self.n_outputs:
            raise LlamaError(f"cannot take logits for {rows} tokens at once (this context holds {self.n_outputs})")
        batch = self._batch
        if batch is None:  # closed (or a failed load): llama.cpp would write through a freed batch
            raise LlamaError(f"{self.path.name}: the model is closed")
        cut = len(tokens) - rows  # the tokens from here on get a row of logits
        starts = list(range(0, len(tokens), self.n_batch))
        if rows > 1 and starts[-1] > cut:  # the final chunk starts early enough to hold every row asked for
            starts[-1] = cut
        pos = start
        for i, begin in enumerate(starts):
            chunk = tokens[begin : starts[i + 1] if i + 1 < len(starts) else len(tokens)]
            n = len(chunk)
            for j, tok in enumerate(chunk):
                batch.token[j] = tok
                # llama_cpp declares pos as an array of arrays; its _fields_ say POINTER(llama_pos)
                batch.pos[j] = pos + j  # type: ignore[call-overload]
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
                batch.logits[j] = begin + j >= cut
            batch.n_tokens = n
            rc = llama_cpp.llama_decode(self._ctx, batch)
            if rc != 0:
                # llama.cpp dropped the failed chunk's positions; the chunks before it go too
                self._rollback(start)
                if rc == 2 and self.abort_token is not None and self.abort_token.cancelled:
                    raise DecodeAborted(f"{self.path.name}: stopped")
                what = {1: "no room in the KV cache", 2: "aborted", -1: "invalid batch"}.get(rc, f"error {rc}")
                raise LlamaError(f"{self.path.name}: llama_decode failed: {what}")
            pos += n
        self.tokens.extend(tokens)

    def _rollback(self, n: int) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1)
        del self.tokens[n:]

    def trim(self, n: int) -> None:
        """Keep the first ``n`` tokens of the KV cache, drop the rest."""
        if n >= len(self.tokens):
            return
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1):
            raise LlamaError(f"{self.path.name}: this model's memory cannot be partially trimmed")
        del self.tokens[n:]

    def drop(self, start: int, count: int) -> None:
        """Remove cache tokens ``[start, start + count)`` and move the ones after them back by ``count``
        positions (llama.cpp's context shift; the moved keys are re-rotated on the next decode)."""
        if not self.can_shift:
            raise LlamaError(f"{self.path.name}: this model's memory cannot shift")
        end = start + count
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, start, end):
            raise LlamaError(f"{self.path.name}: could not drop cache tokens {start}-{end}")
        llama_cpp.llama_memory_seq_add(self._mem, 0, end, -1, -count)
        del self.tokens[start:end]

    def keep_prefix(self, tokens: list[int]) -> int:
        """Make the cache a prefix of ``tokens``, keeping as much of it as can be reused; return its length.

        Usually the longest common prefix.  When ``tokens`` leaves out a block of the cache and then
        goes on as the cache does (a long chat cut by truncate-middle or a rolling window), the block
        is dropped and what follows is shifted back (:meth:`drop`) instead of prefilled again, where
        the model can shift and at least :data:`SHIFT_MIN` tokens are saved.  As with llama.cpp's own
        context shift, the kept turns keep the keys computed when the dropped ones were still there.
        """
        n = len(self.tokens)
        # the usual case (the draft every round, a follow-up prompt): the cache is a prefix; one
        # list comparison in C instead of a Python loop over the whole context
        if len(tokens) >= n and tokens[:n] == self.tokens:
            return n
        n = _common_prefix(tokens, self.tokens)
        if n < len(self.tokens) and self.can_shift:
            gap = _gap(tokens, self.tokens, n)
            if gap is not None:
                self.drop(n, gap)
                n += _common_prefix(tokens[n:], self.tokens[n:])
        if n < len(self.tokens):
            if self.can_trim:
                self.trim(n)
            else:
                self.clear()
                n = 0
        return n

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    # -- logits -----------------------------------------------------------------

    def logits(self, i: int) -> np.ndarray:
        """Logits row of batch index ``i`` of the last decode (negative counts from the end).

        A view into llama.cpp's buffer: valid until the next decode.
        """
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, i)
        if not ptr:
            raise LlamaError(f"no logits for batch row {i}")
        # the row type is made once: 1.8 us a call against np.ctypeslib.as_array's 4.8 us, which
        # builds a ctypes array type every time (measured, 152k vocabulary); a round reads K + 2 rows
        return np.frombuffer(self._row_type.from_address(ctypes.addressof(ptr.contents)), dtype=np.float32)

    @property
    def ctx(self) -> llama_cpp.llama_context_p | None:  # the raw context, for the sampler chain
        return self._ctx


# A context shift is used only when it saves re-prefilling at least this many tokens: the block
# after the gap must match this far (fewer is not worth a shift, and could be a chance match).
SHIFT_MIN = 32


def _common_prefix(a: list[int], b: list[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _gap(tokens: list[int], cache: list[int], n: int) -> int | None:
    """The length of the block of ``cache`` after its first ``n`` tokens that ``tokens`` leaves out, if
    ``tokens[n:]`` then goes on as the cache does for :data:`SHIFT_MIN` tokens; None otherwise."""
    want = tokens[n : n + SHIFT_MIN]
    if len(want) < SHIFT_MIN:
        return None
    j = n + 1
    while True:
        try:
            j = cache.index(want[0], j)  # a scan in C: the candidates, then one slice compare each
        except ValueError:
            return None
        if cache[j : j + SHIFT_MIN] == want:
            return j - n
        j += 1

