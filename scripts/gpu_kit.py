"""The GPU kit: SpecChat beside llama-server on a GPU machine with no network, in two device calls.
Never run in CI (its CPU proof is: tests/scripts/test_gpu_kit.py).

- ``pack`` (here, with the network): the carry folder ``gpu-kit/`` (git-ignored, ~9.4 MiB): the
  llama-cpp-python 0.3.36 sdist stripped to what one build of its vendored llama.cpp reads (the
  server's and llama-bench's sources kept), the Qwen tokenizer as a tensor-less GGUF copied from the
  test model's header, and the pure-Python wheels SpecChat needs that the GPU image lacks.
- ``build`` (on the GPU machine, its own call: about 5.5 min at -j16 for CUDA sm_90): one cmake tree
  of the vendored llama.cpp (shared libllama/libggml*, llama-server, llama-bench) and the bindings
  laid over it in ``--site``, so SpecChat and llama-server run the same llama.cpp.  ``--detach``
  runs it in a session of its own that outlives the call; ``--wait S`` waits for it.
- ``measure`` (the next call, while the machine is warm: /tmp is kept only until it goes back,
  30 s after a call): agreement pairs, llama-bench, SpecChat's per-shape decode costs, and one
  interleaved ``specchat bench`` per alpha beside llama-server; ``OUT/report.md``,
  ``OUT/results.json``, ``OUT/logs.tar.gz``.
- ``pairs [--check]``: the agreement pairs alone; ``run``: the random-weight cost profile.

One device call, the CUDA tree built here first (no GPU time spent on compiling)::

    python scripts/gpu_kit.py pack
    python scripts/gpu_kit.py build --cuda-from-index --jobs 2 --site /tmp/kit-cuda/site --detach --wait 0
    python scripts/gpu_kit.py build --site /tmp/kit-cuda/site --wait 7200     # about 1 h 30 on two cores
    run(command="python3 scripts/gpu_kit.py build && PYTHONUNBUFFERED=1 python3 "
                "scripts/gpu_kit.py measure --out $OUT", carry=["gpu-kit"], timeout_s=480)

``build --cuda-from-index`` installs NVIDIA's compiler from the package index
(``specchat cuda-build``'s toolchain, :mod:`specchat.remote.cuda_toolchain`), builds the tree for
sm_90 and packs it into ``gpu-kit/prebuilt-cuda-sm90.tar.xz``; ``build`` on the GPU machine then
unpacks it (seconds) and links the machine's CUDA 13 runtime and cuBLAS beside it.  ``measure``
writes ``results.json`` after every stage, so a call cut short still returns what it measured.

Without a prebuilt tree, two device calls (the build there takes about 5.5 min at -j16)::

    run(command="python3 scripts/gpu_kit.py build --detach --wait 560", carry=["gpu-kit"], timeout_s=600)
    run(command="python3 scripts/gpu_kit.py build --wait 300 && PYTHONUNBUFFERED=1 python3 "
                "scripts/gpu_kit.py measure --out $OUT", carry=["gpu-kit"], timeout_s=600)

Proven here without a GPU (the CPU build takes ~3.5 min on two cores)::

    .venv/bin/python scripts/gpu_kit.py build --cpu --jobs 2 --detach --wait 600
    .venv/bin/python scripts/gpu_kit.py measure --cpu --shape tiny --f16 --alphas 0.6,0.9 --out /tmp/kit-out
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LLAMA_CPP_PYTHON = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
KIT_LIMIT_BYTES = 40 << 20  # the carried working tree is 64 MiB in all; the repo needs the rest
CARRY_LIMIT_BYTES = 58 << 20  # the kit with a prebuilt CUDA tree (the repo's tracked files are about 5 MiB)
DEFAULT_SITE = Path("/tmp/specchat-gpu-kit/site")
DEFAULT_WORK = Path("/tmp/specchat-gpu-kit/work")
TOKENIZER_FILE = "qwen-tokenizer.gguf"
TEST_MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"  # its header holds the real Qwen2.5 tokenizer
# The wheels SpecChat's engine and CLI import that the GPU image lacks (the image has numpy, jinja2,
# psutil, filelock, pyyaml, tqdm, requests, typing-extensions, nvidia-ml-py): gguf (models.gguf_header),
# diskcache (llama_cpp imports it), platformdirs (specchat.profile); and for the bench against
# llama-server (remote/): httpx2 and httpcore2, truststore, prometheus-client, keyring (servers.py)
# with jaraco.classes, jaraco.functools, jaraco.context and more-itertools (H100 run, 2026-11-24).
KIT_WHEELS = ("gguf", "diskcache", "platformdirs", "httpx2", "httpcore2", "truststore", "prometheus-client",
              "keyring", "jaraco.classes", "jaraco.functools", "jaraco.context", "more-itertools")
TOKEN_TYPE_UNUSED = 5  # gguf.TokenType.UNUSED: how llama.cpp's converter pads a vocabulary ("[PAD<i>]")
FILLER = 198  # "\n" in Qwen's vocabulary; a decode's cost does not depend on the token


# --------------------------------------------------------------------------------------------
# pack: the stripped sdist
# --------------------------------------------------------------------------------------------

# Paths below the sdist's top folder that a CUDA build of the library never reads.  llama.cpp's
# own models/ (tokenizer test vocabularies, 75 MB), docs/ (38 MB) and the git history the sdist
# carries (.git/, 38 MB packed) are most of the 217 MB.
_DROP_PREFIXES = (
    ".git/", "docs/", "examples/", "tests/", "docker/", "scripts/", ".github/", "vendor/llama.cpp/.git/",
    "vendor/llama.cpp/models/", "vendor/llama.cpp/docs/", "vendor/llama.cpp/tests/",
    "vendor/llama.cpp/benches/", "vendor/llama.cpp/examples/",
    "vendor/llama.cpp/pocs/", "vendor/llama.cpp/media/", "vendor/llama.cpp/gguf-py/",
    "vendor/llama.cpp/conversion/", "vendor/llama.cpp/ci/",
    "vendor/llama.cpp/skills/", "vendor/llama.cpp/requirements/", "vendor/llama.cpp/app/",
    "vendor/llama.cpp/.github/", "vendor/llama.cpp/.devops/", "vendor/llama.cpp/grammars/",
)
_GGML_BACKENDS = "vendor/llama.cpp/ggml/src/"
_KEPT_BACKENDS = {"ggml-cpu", "ggml-cuda"}
# One cmake tree of the vendored llama.cpp serves both sides of the side-by-side: its shared
# libllama/libggml* are what llama-cpp-python's bindings load (site/llama_cpp/lib links to the
# build's bin/), and llama-server and llama-bench are linked against the very same libraries.
# Built once, it takes about 5.5 min at -j16 for CUDA sm_90 (two separate builds took 11).
BUILD_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
               "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
               "-DLLAMA_BUILD_APP=OFF", "-DGGML_RPC=OFF")
BUILD_TARGETS = ("llama", "llama-server", "llama-bench")
KIT_ARCH = 90  # the lent GPUs: H100 and H200


def sdist_keeps(member: str) -> bool:
    """Whether a path of the sdist (``llama_cpp_python-X/...``) stays in the stripped copy."""
    _top, _, rel = member.partition("/")
    if not rel:
        return True
    if rel.startswith(_DROP_PREFIXES) or rel.endswith((".gguf", ".png", ".jpg", ".mp4", ".gif", ".webp", ".pdf",
                                                        ".wav", ".mp3")):
        return False
    if rel.startswith("vendor/llama.cpp/convert_"):
        return False
    # llama-server and llama-bench are built from the same tree (tools/); the server's web UI is off,
    # so of tools/ui (800 files) only its top-level build files stay, and of scripts/ the cmake ones
    if rel.startswith("vendor/llama.cpp/tools/ui/"):
        return "/" not in rel[len("vendor/llama.cpp/tools/ui/"):]
    if rel.startswith("vendor/llama.cpp/scripts/"):
        return rel.endswith(".cmake") or rel.endswith("/")
    if rel.startswith(_GGML_BACKENDS):
        backend = rel[len(_GGML_BACKENDS):].split("/", 1)
        if len(backend) == 2 and backend[0].startswith("ggml-") and backend[0] not in _KEPT_BACKENDS:
            return False
    return True


def strip_sdist(sdist: Path, out: Path) -> tuple[int, int]:
    """Copy the sdist's kept members into ``out`` (tar.xz); return (members kept, dropped)."""
    kept = dropped = 0
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(sdist, "r:*") as src, tarfile.open(tmp, "w:xz", preset=6) as dst:
        for member in src:
            if not (member.isfile() or member.isdir()) or not sdist_keeps(member.name):
                dropped += 1
                continue
            if ".." in Path(member.name).parts or member.name.startswith("/"):
                raise SystemExit(f"{sdist}: unsafe member {member.name!r}: fetch the sdist again")
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            kept += 1
    tmp.replace(out)
    return kept, dropped


def fetch_sdist(dest: Path) -> Path:
    """``pip download`` of the sdist (the one network step of the kit)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"llama_cpp_python=={LLAMA_CPP_PYTHON}", "-d", str(dest)], check=True)
    found = sorted(dest.glob(f"{SDIST_NAME}.tar.gz"))
    if not found:
        raise SystemExit(f"pip download left no {SDIST_NAME}.tar.gz in {dest}")
    return found[0]


def fetch_wheels(dest: Path, names: Iterable[str] = KIT_WHEELS) -> list[Path]:
    """The installed versions of ``names`` as pure-Python wheels (the GPU image has no network)."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{n}=={importlib.metadata.version(n)}" for n in names]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "py", "-d", str(dest), *pins], check=True)
    return sorted(dest.glob("*.whl"))


# --------------------------------------------------------------------------------------------
# the tokenizer metadata and the GGUF synthesiser
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A Qwen2 model's hyper-parameters (config.json of the Hugging Face model)."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int | None  # None: the tokenizer's size
    tied: bool  # tie_word_embeddings: no output.weight, the embedding is reused
    rope_theta: float = 1e6
    rms_eps: float = 1e-6
    n_ctx_train: int = 32768

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# Qwen/Qwen2.5-7B-Instruct and Qwen/Qwen2.5-0.5B-Instruct config.json; the 0.5B test model's header
# agrees (24 layers, 896, 14/2 heads, 4864, rope 1e6, eps 1e-6, 151936 tokens).
QWEN7B = Shape("qwen2.5-7b-instruct", 28, 3584, 28, 4, 18944, 152064, tied=False)
QWEN05B = Shape("qwen2.5-0.5b-instruct", 24, 896, 14, 2, 4864, 151936, tied=True)
# the same code at a size a 2-core machine synthesises and decodes in seconds; the target's
# vocabulary is padded beyond the draft's, as Qwen's 7B (152064) is beyond its 0.5B (151936)
TINY_TARGET = Shape("tiny-target", 2, 64, 2, 1, 128, 152064, tied=False)
TINY_DRAFT = Shape("tiny-draft", 1, 64, 2, 1, 128, None, tied=True)
SHAPES = {"qwen7b": (QWEN7B, QWEN05B), "tiny": (TINY_TARGET, TINY_DRAFT)}


@dataclass
class Tokenizer:
    """Every ``tokenizer.*`` key of a GGUF header: (key, value, value type, array item type)."""

    fields: list[tuple[str, Any, Any, Any]]

    @classmethod
    def from_gguf(cls, path: Path) -> Tokenizer:
        import gguf

        reader = gguf.GGUFReader(str(path))
        fields = []
        for key, field in reader.fields.items():
            if not key.startswith("tokenizer."):
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            fields.append((key, field.contents(), vtype, sub))
        if not any(k == "tokenizer.ggml.tokens" for k, *_ in fields):
            raise SystemExit(f"{path}: no tokenizer.ggml.tokens: not a GGUF with a tokenizer")
        return cls(fields)

    def value(self, key: str) -> Any:
        return next((v for k, v, *_ in self.fields if k == key), None)

    @property
    def n_tokens(self) -> int:
        return len(self.value("tokenizer.ggml.tokens"))

    def write_to(self, writer: Any, n_vocab: int | None = None) -> None:
        """Add every key; the token lists padded to ``n_vocab`` as llama.cpp's converter pads them."""
        n = self.n_tokens
        if n_vocab is not None and n_vocab < n:
            raise ValueError(f"a vocabulary of {n_vocab} cannot hold the tokenizer's {n} tokens")
        pad = (n_vocab or n) - n
        for key, value, vtype, sub in self.fields:
            if pad and key == "tokenizer.ggml.tokens":
                value = [*value, *(f"[PAD{i}]" for i in range(n, n + pad))]
            elif pad and key == "tokenizer.ggml.token_type":
                value = [*value, *([TOKEN_TYPE_UNUSED] * pad)]
            elif pad and key == "tokenizer.ggml.scores":
                value = [*value, *([0.0] * pad)]
            writer.add_key_value(key, value, vtype, sub)


def write_tokenizer_gguf(source: Path, out: Path) -> Tokenizer:
    """A tensor-less GGUF with the architecture and every tokenizer key of ``source``'s header."""
    import gguf

    tok = Tokenizer.from_gguf(source)
    arch = gguf.GGUFReader(str(source)).fields["general.architecture"].contents()
    tmp = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch)
    tok.write_to(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    tmp.replace(out)
    return tok


def tensor_plan(shape: Shape, n_vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape (rows, cols), is a matrix) of every Qwen2 tensor, in llama.cpp's names."""
    kv = shape.head_dim * shape.n_head_kv
    e, f = shape.n_embd, shape.n_ff
    plan: list[tuple[str, tuple[int, ...], bool]] = [("token_embd.weight", (n_vocab, e), True),
                                                     ("output_norm.weight", (e,), False)]
    if not shape.tied:
        plan.append(("output.weight", (n_vocab, e), True))
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (e,), False),
            (b + "attn_q.weight", (e, e), True), (b + "attn_q.bias", (e,), False),
            (b + "attn_k.weight", (kv, e), True), (b + "attn_k.bias", (kv,), False),
            (b + "attn_v.weight", (kv, e), True), (b + "attn_v.bias", (kv,), False),
            (b + "attn_output.weight", (e, e), True),
            (b + "ffn_norm.weight", (e,), False),
            (b + "ffn_gate.weight", (f, e), True), (b + "ffn_up.weight", (f, e), True),
            (b + "ffn_down.weight", (e, f), True),
        ]
    return plan


class _RandomPool:
    """Random N(0, 0.02) values, generated once and copied out at random offsets: a 7B model's
    7.6e9 weights at memcpy speed (drawing each one costs minutes); costs do not depend on values."""

    def __init__(self, size: int, seed: int) -> None:
        import numpy as np

        self._rng = np.random.default_rng(seed)
        values = (self._rng.standard_normal(size, dtype=np.float32) * 0.02).astype(np.float16)
        self._pool = np.concatenate([values, values])
        self._size = size

    def take(self, n: int, dtype: Any) -> Any:
        import numpy as np

        out = np.empty(n, dtype=dtype)
        for start in range(0, n, self._size):
            chunk = min(self._size, n - start)
            at = int(self._rng.integers(0, self._size))
            out[start:start + chunk] = self._pool[at:at + chunk]
        return out


def _add_shape(writer: Any, shape: Shape, tokenizer: Tokenizer, n_vocab: int) -> None:
    """The hyper-parameter and tokenizer keys of a Qwen2 GGUF of ``shape`` (F16 matrices)."""
    import gguf

    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    tokenizer.write_to(writer, n_vocab)


def _write_header(writer: Any, plan: list[tuple[str, tuple[int, ...], bool]]) -> None:
    """The tensor infos of ``plan`` (F16 matrices, F32 vectors) and the header, before the data."""
    import gguf
    import numpy as np

    for name, dims, matrix in plan:
        dtype = np.float16 if matrix else np.float32
        raw = gguf.GGMLQuantizationType.F16 if matrix else gguf.GGMLQuantizationType.F32
        writer.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize,
                               raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()


def write_random_gguf(path: Path, shape: Shape, tokenizer: Tokenizer, *, seed: int = 0,
                      pool_size: int = 1 << 24) -> int:
    """A Qwen2 GGUF of ``shape`` with random F16 matrices (F32 norms = 1 and biases), written one
    tensor at a time so a 15 GB file never sits in memory; returns the tensor count."""
    import gguf
    import numpy as np

    n_vocab = shape.n_vocab or tokenizer.n_tokens
    plan = tensor_plan(shape, n_vocab)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), "qwen2")
    writer.add_name(f"{shape.name} (random weights, SpecChat GPU kit)")
    _add_shape(writer, shape, tokenizer, n_vocab)
    _write_header(writer, plan)
    pool = _RandomPool(pool_size, seed)
    for name, dims, matrix in plan:
        n = int(np.prod(dims))
        if name.endswith("norm.weight"):
            data = np.ones(n, dtype=np.float32)
        else:
            data = pool.take(n, np.float16 if matrix else np.float32)
        writer.write_tensor_data(data.reshape(dims))
    writer.close()
    tmp.replace(path)
    return len(plan)


def quantize(src: Path, dst: Path, *, threads: int) -> None:
    """llama.cpp's quantize (its C API through llama-cpp-python) to Q4_K_M.  Rows not a multiple
    of 256 (the tiny shapes) fall back to llama.cpp's own choice (Q5_0 ...)."""
    import llama_cpp

    from specchat.engine.runtime import init_backend

    init_backend()  # quiet: llama.cpp's log goes to the runtime's ring buffer
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = threads
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    tmp = dst.with_name(dst.name + ".part")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"{src.name}: llama_model_quantize failed ({rc})")
    tmp.replace(dst)


def synthesise(shape: Shape, tokenizer: Tokenizer, work: Path, *, threads: int, seed: int) -> Path:
    """``work/<shape>-q4_k_m.gguf``, made once per shape (a marker names the shape it was made for)."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{shape.name}-q4_k_m.gguf"
    marker = out.with_suffix(".json")
    want = json.dumps({"shape": asdict(shape), "tokens": tokenizer.n_tokens, "seed": seed}, sort_keys=True)
    if out.exists() and marker.exists() and marker.read_text() == want:
        print(f"  {out.name}: already made", flush=True)
        return out
    f16 = work / f"{shape.name}-f16.gguf"
    t0 = time.perf_counter()
    write_random_gguf(f16, shape, tokenizer, seed=seed)
    t1 = time.perf_counter()
    quantize(f16, out, threads=threads)
    t2 = time.perf_counter()
    f16_size = f16.stat().st_size
    f16.unlink()
    marker.write_text(want)
    print(f"  {out.name}: F16 {f16_size / 1e9:.2f} GB written in {t1 - t0:.1f} s, Q4_K_M "
          f"{out.stat().st_size / 1e9:.2f} GB in {t2 - t1:.1f} s", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# agreement pairs: true costs and a chosen acceptance
# --------------------------------------------------------------------------------------------
#
# Random weights give true costs but no acceptance.  In an agreement pair every layer's output
# projections (attn_output, ffn_down) are zero, so the residual stream is the token's embedding
# whatever the context, and each model is a fixed bigram: its greedy next(t) is the row of
# output.weight closest to t's embedding, and row s is ``logit / n_embd`` times the embedding of
# the token before s on one random cycle over the tokenizer's normal tokens.  The draft has its
# own embeddings and follows the target's cycle on a random share alpha of tokens and goes
# elsewhere on the rest, so any lossless engine (SpecChat, llama-server) accepts each drafted
# token with probability alpha.  Every matrix is full size: a decode costs what the real shape
# costs.  The text is meaningless; special tokens are never produced (their rows are zero).

PAIR_LOGIT = 30.0  # the right next token's logit; the others are ~N(0, logit / sqrt(n_embd))
TOKEN_TYPE_NORMAL = 1  # gguf.TokenType.NORMAL


def normal_ids(tokenizer: Tokenizer) -> Any:
    """The ids of the tokenizer's ordinary tokens (the cycle runs over these only)."""
    import numpy as np

    types = tokenizer.value("tokenizer.ggml.token_type")
    if types is None:
        return np.arange(tokenizer.n_tokens)
    return np.flatnonzero(np.asarray(types) == TOKEN_TYPE_NORMAL)


def bigram_cycle(ids: Any, n_vocab: int, seed: int) -> Any:
    """next[t] for every id below ``n_vocab``: one random cycle over ``ids``; -1 elsewhere."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(ids)
    nxt = np.full(n_vocab, -1, dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def follow_share(nxt: Any, alpha: float, seed: int) -> Any:
    """A bigram equal to ``nxt`` on a random ``alpha`` share of its tokens and different on all others."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = nxt.copy()
    ids = np.flatnonzero(nxt >= 0)
    off = ids[rng.random(len(ids)) >= alpha]
    if len(off) == 1:  # one token cannot be shuffled: send it to another one
        out[off] = nxt[ids[(np.searchsorted(ids, off[0]) + 1) % len(ids)]]
    elif len(off) > 1:
        out[off] = np.roll(nxt[off], 1)  # each one goes where another one's target goes: never its own
    return out


def write_bigram_gguf(path: Path, shape: Shape, tokenizer: Tokenizer, nxt: Any, *, seed: int,
                      logit: float = PAIR_LOGIT) -> None:
    """A Qwen2 GGUF of ``shape`` whose greedy next token after t is ``nxt[t]`` (F16, one tensor at a time)."""
    import gguf
    import numpy as np

    n_vocab = shape.n_vocab or tokenizer.n_tokens
    e = shape.n_embd
    plan = tensor_plan(shape, n_vocab)
    if shape.tied:  # the bigram needs its own output matrix; a tied decode reads one of the same size
        plan.insert(2, ("output.weight", (n_vocab, e), True))
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n_vocab, e), dtype=np.float32).astype(np.float16)
    out = np.zeros((n_vocab, e), dtype=np.float16)
    have = np.flatnonzero(nxt[:n_vocab] >= 0)
    out[nxt[have]] = (emb[have].astype(np.float32) * (logit / e)).astype(np.float16)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), "qwen2")
    writer.add_name(f"{shape.name} agreement model (bigram, zeroed output projections, SpecChat GPU kit)")
    _add_shape(writer, shape, tokenizer, n_vocab)
    _write_header(writer, plan)
    pool = _RandomPool(1 << 22, seed + 7)
    for name, dims, matrix in plan:
        n = int(np.prod(dims))
        if name == "token_embd.weight":
            data = emb
        elif name == "output.weight":
            data = out
        elif name.endswith(("attn_output.weight", "ffn_down.weight")):
            data = np.zeros(dims, dtype=np.float16)
        elif name.endswith("norm.weight"):
            data = np.ones(n, dtype=np.float32)
        else:
            data = pool.take(n, np.float16 if matrix else np.float32)
        writer.write_tensor_data(np.asarray(data).reshape(dims))
    writer.close()
    tmp.replace(path)


@dataclass(frozen=True)
class AgreementPairs:
    """What ``pairs`` made: the target, one draft per alpha, and the bigrams' seeds (pairs.json)."""

    target: Path
    drafts: dict[float, Path]
    cycle_seed: int
    shape: str

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "drafts": {f"{a:g}": str(p) for a, p in self.drafts.items()},
                "cycle_seed": self.cycle_seed, "shape": self.shape}


def make_model(shape: Shape, tokenizer: Tokenizer, nxt: Any, out: Path, name: str, *, seed: int,
               threads: int, quantized: bool) -> Path:
    """``out/<name>-q4_k_m.gguf`` (or F16 with ``quantized=False``), made once (a marker names its inputs)."""
    path = out / f"{name}-{'q4_k_m' if quantized else 'f16'}.gguf"
    marker = path.with_suffix(".json")
    import hashlib

    want = json.dumps({"shape": asdict(shape), "tokens": tokenizer.n_tokens, "seed": seed,
                       "bigram": hashlib.sha256(nxt.tobytes()).hexdigest()}, sort_keys=True)
    if path.exists() and marker.exists() and marker.read_text() == want:
        return path
    f16 = out / f"{name}-f16.gguf"
    t0 = time.perf_counter()
    write_bigram_gguf(f16, shape, tokenizer, nxt, seed=seed)
    t1 = time.perf_counter()
    if quantized:
        quantize(f16, path, threads=threads)
        f16.unlink()
    marker.write_text(want)
    print(f"  {path.name}: {path.stat().st_size / 1e9:.2f} GB (written {t1 - t0:.1f} s, "
          f"quantized {time.perf_counter() - t1:.1f} s)", flush=True)
    return path


def make_pairs(shapes: str, tokenizer: Tokenizer, alphas: Sequence[float], out: Path, *, threads: int,
               cycle_seed: int = 1, quantized: bool = True) -> AgreementPairs:
    target_shape, draft_shape = SHAPES[shapes]
    out.mkdir(parents=True, exist_ok=True)
    n_vocab = max(target_shape.n_vocab or tokenizer.n_tokens, draft_shape.n_vocab or tokenizer.n_tokens)
    nxt = bigram_cycle(normal_ids(tokenizer), n_vocab, cycle_seed)
    target = make_model(target_shape, tokenizer, nxt, out, f"agree-{target_shape.name}", seed=11,
                        threads=threads, quantized=quantized)
    drafts = {}
    for alpha in alphas:
        dn = follow_share(nxt, alpha, seed=int(round(alpha * 1000)) + cycle_seed)
        drafts[alpha] = make_model(draft_shape, tokenizer, dn, out,
                                   f"agree-{draft_shape.name}-a{int(round(alpha * 100))}", seed=21,
                                   threads=threads, quantized=quantized)
    pairs = AgreementPairs(target, drafts, cycle_seed, shapes)
    write_json(out / "pairs.json", pairs.to_json())
    return pairs


def greedy_path(nxt: Any, start: int, n: int) -> list[int]:
    path = [start]
    for _ in range(n - 1):
        path.append(int(nxt[path[-1]]))
    return path


def agreement(model_path: Path, path: Sequence[int], wanted: Sequence[int], *, gpu: bool) -> float:
    """The share of ``path``'s positions at which the model's greedy next token is ``wanted``'s.

    A bigram's choice does not depend on the context, so the whole path is one decode."""
    from specchat.engine.runtime import LoadedModel, ModelOptions

    n = len(path)
    model = LoadedModel(model_path, ModelOptions(n_ctx=max(512, n + 8), n_gpu_layers=-1 if gpu else 0,
                                                 n_batch=n, n_ubatch=n), n_outputs=n)
    try:
        model.decode(list(path), logits="all")
        return sum(int(model.logits(i).argmax()) == w for i, w in enumerate(wanted)) / n
    finally:
        model.close()


def check_pairs(pairs: AgreementPairs, tokenizer: Tokenizer, *, n: int = 512, gpu: bool = False) -> dict[str, float]:
    """Measured, on the target's own greedy path from a normal token: how often the target follows its
    bigram, and how often each draft's greedy choice is the target's (its token acceptance)."""
    target_shape, draft_shape = SHAPES[pairs.shape]
    n_vocab = max(target_shape.n_vocab or tokenizer.n_tokens, draft_shape.n_vocab or tokenizer.n_tokens)
    nxt = bigram_cycle(normal_ids(tokenizer), n_vocab, pairs.cycle_seed)
    start = int(normal_ids(tokenizer)[len(normal_ids(tokenizer)) // 2])
    path = greedy_path(nxt, start, n + 1)
    got = {"target": agreement(pairs.target, path[:-1], path[1:], gpu=gpu)}
    for alpha, draft in pairs.drafts.items():
        got[f"draft {alpha:g}"] = agreement(draft, path[:-1], path[1:], gpu=gpu)
    return got


# --------------------------------------------------------------------------------------------
# measurement, all through SpecChat's runtime
# --------------------------------------------------------------------------------------------

def timed_decode(model: Any, n: int, *, logits: str = "all") -> float:
    """One decode of ``n`` filler tokens at the model's current depth, logits read (that waits for
    an asynchronous backend), then trimmed back: the calibration's measurement."""
    base = len(model.tokens)
    t0 = time.perf_counter()
    model.decode([FILLER] * n, logits=logits)
    model.logits(-1)
    dt = time.perf_counter() - t0
    model.trim(base)
    return dt


def fill_to(model: Any, depth: int) -> None:
    model.clear()
    model.decode([FILLER] * depth, logits="none")


STEADY_WARMUP = 3  # decodes of a shape before it is timed: llama.cpp captures a CUDA graph, then replays it


def measure_verify(target: Any, *, depth: int, sizes: Sequence[int], reps: int) -> dict[int, list[float]]:
    """Every repeat of a target decode of n tokens at ``depth`` tokens in the cache, in steady state.

    Sizes are interleaved across repeats, so drift on a shared machine hits every size alike, but
    each timed decode follows STEADY_WARMUP of its own size: a loop that keeps its shapes pays the
    replayed graph.  Cycling the sizes call by call re-captures every time and overstates the curve
    (on the H100, 4 tokens cost 2.7x one token that way and 1.40x repeated)."""
    fill_to(target, depth)
    out: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps):
        for n in sizes:
            for _ in range(STEADY_WARMUP):
                timed_decode(target, n)
            out[n].append(timed_decode(target, n))
    target.clear()
    return out


def measure_draft(draft: Any, *, depth: int, reps: int) -> dict[str, list[float]]:
    """A draft token's parts as the drafter pays them: a one-token decode, then its greedy choice
    against the default confidence floor (the rounds below use p_min 0, which skips the softmax)."""
    from specchat.engine.sampling import greedy_choice
    from specchat.engine.settings import ControllerSettings

    p_min = ControllerSettings().p_min

    fill_to(draft, depth)
    timed_decode(draft, 1, logits="last")
    decode_s, choice_s = [], []
    for _ in range(reps):
        decode_s.append(timed_decode(draft, 1, logits="last"))
        draft.decode([FILLER], logits="last")
        t0 = time.perf_counter()
        greedy_choice(draft.logits(-1), p_min)
        choice_s.append(time.perf_counter() - t0)
        draft.trim(depth)
    draft.clear()
    return {"decode_s": decode_s, "greedy_choice_s": choice_s}


def _consume(events: Iterable[Any]) -> tuple[Any, list[Any]]:
    from specchat.engine.events import Done, Error, RoundStats

    done, rounds = None, []
    for ev in events:
        if isinstance(ev, RoundStats):
            rounds.append(ev)
        elif isinstance(ev, Error):
            raise SystemExit(f"generation failed: {ev.message}")
        elif isinstance(ev, Done):
            done = ev
    if done is None:
        raise SystemExit("generation ended without its Done event")
    return done, rounds


def measure_plain(pair: Any, prompt: list[int], *, max_tokens: int, repeats: int) -> list[dict[str, float]]:
    """Plain decode through ``pair.generate(mode=baseline)`` and, right after, llama-bench-style raw
    decode on the same prompt, depth and count (``bench.raw_decode_rate``): the bench's reference."""
    from specchat.engine.settings import Mode
    from specchat.harness.bench import raw_decode_rate

    runs = []
    for _ in range(repeats):
        pair.target.clear()
        done, rounds = _consume(pair.generate(prompt, mode=Mode.BASELINE, max_tokens=max_tokens))
        tokens = done.stats.tokens
        raw = raw_decode_rate(pair, prompt, max(tokens - 1, 1))
        base = done.stats.decode_tok_s or 0.0
        runs.append({"tokens": tokens, "baseline_tok_s": base, "raw_tok_s": raw,
                     "ratio": base / raw if raw else 0.0,
                     "overhead_s_per_step": statistics.fmean(r.overhead_s for r in rounds) if rounds else 0.0})
    return runs


def measure_rounds(pair: Any, prompt: list[int], *, k: int, max_tokens: int) -> dict[str, Any]:
    """``Mode.DRAFT`` with the pair's fixed K: the draft, verify and overhead seconds of every round
    that drafted K tokens (the last rounds draft fewer, to stay within ``max_tokens``)."""
    from specchat.engine.settings import Mode

    pair.target.clear()
    if pair.draft is not None:
        pair.draft.clear()
    done, rounds = _consume(pair.generate(prompt, mode=Mode.DRAFT, max_tokens=max_tokens))
    drafting = [r for r in rounds if r.drafted == k]
    return {
        "rounds": len(rounds), "drafting_rounds": len(drafting), "tokens": done.stats.tokens,
        "k": [r.k for r in drafting], "accepted": [r.accepted for r in drafting],
        "draft_s": [r.draft_s for r in drafting], "verify_s": [r.verify_s for r in drafting],
        "overhead_s": [r.overhead_s for r in drafting],
    }


def measure_lookup(pair: Any, history: list[int], k: int, reps: int) -> list[float]:
    """Prompt-lookup proposals as a round pays them (the drafter's own timer): the index is built once
    per answer, then each round adds the few tokens the last one emitted.  (Timing ``reset()`` plus a
    proposal re-indexed the whole history every time: 273 us at depth 256 on the H100 run, against
    3 us a round at 4k tokens on a 2-core CPU this way.)"""
    from specchat.engine.settings import Drafter

    lookup = pair.drafters[Drafter.LOOKUP]
    lookup.reset()
    grown = list(history)
    lookup.propose(grown, k)
    out = []
    for i in range(reps):
        grown.extend(history[i % len(history): i % len(history) + 3])
        lookup.propose(grown, k)
        out.append(lookup.last_seconds)
    return out


def realistic_prompt(model: Any, depth: int) -> list[int]:
    """``depth`` tokens of ordinary text through the real tokenizer."""
    text = ("Speculative decoding lets a small draft model propose tokens that the large model "
            "verifies in one batch; accepted tokens cost a fraction of a step. ") * 64
    tokens = model.tokenize(text, add_special=False)
    while len(tokens) < depth:
        tokens = tokens + tokens
    return tokens[:depth]


# --------------------------------------------------------------------------------------------
# the profile
# --------------------------------------------------------------------------------------------

PROFILE_KEYS = ("specchat_cost_profile", "name", "title", "kind", "hardware", "target", "draft", "token_s",
                "verify_x", "draft_x", "overhead_s", "notes")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown"


def robust_rsd(values: Sequence[float]) -> float:
    """The relative standard deviation, estimated from the median absolute deviation."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return 1.4826 * mad / med if med > 0 else 0.0


def _sourced(value: float, source: str) -> dict[str, Any]:
    return {"value": round(value, 9), "source": source}


def build_profile(m: dict[str, Any], *, hardware: str, kind: str, shapes: str, date: str) -> dict[str, Any]:
    """The cost profile (docs: the schema) from :func:`measure_all`'s numbers."""
    verify = {int(n): min(v) for n, v in m["verify_s"].items()}
    token_s = verify[1]
    src = f"measured by scripts/gpu_kit.py on {hardware}, {date}, llama-cpp-python {m['llama_cpp_python']}"
    src += f" {m['backend']}"
    depth = m["depth"]
    draft_token = min(m["draft"]["decode_s"]) + statistics.median(m["draft"]["greedy_choice_s"])
    overhead = statistics.median(m["rounds"]["overhead_s"]) if m["rounds"]["overhead_s"] else 0.0
    ones = m["verify_s"]["1"] if "1" in m["verify_s"] else m["verify_s"][1]
    # robust: a shared machine adds rare long stalls that would swamp a plain standard deviation
    noise = robust_rsd(ones)
    capped = " (capped at 1: too few or too scattered repeats to say more)" if noise > 1.0 else ""
    noise = min(noise, 1.0)
    target, draft = SHAPES[shapes]
    name = f"{slug(hardware)}-{shapes}"
    plain = m["plain"]
    return {
        "specchat_cost_profile": 1,
        "name": name,
        "title": f"{hardware}, {target.name} Q4_K_M target with a {draft.name} Q4_K_M draft (agreement pair, alpha 0.9)",
        "kind": kind,
        "hardware": f"{hardware}, llama.cpp {m['backend']} (llama-cpp-python {m['llama_cpp_python']})",
        "target": f"{target.name} shape, Q4_K_M, agreement pair (bigram weights)",
        "draft": f"{draft.name} shape, Q4_K_M, agreement pair (alpha 0.9)",
        "token_s": _sourced(token_s, f"{src}: min of {len(ones)} one-token target decodes at depth {depth}"),
        "verify_x": verify_curve(verify, {n: len(m["verify_s"][str(n)]) for n in verify}, src),
        "draft_x": _sourced(draft_token / token_s, f"derived: (min one-token draft decode + median greedy "
                                                   f"choice) {draft_token:.6f} s / token_s; {src}"),
        "overhead_s": _sourced(overhead, f"{src}: median RoundStats.overhead_s of "
                                         f"{len(m['rounds']['overhead_s'])} draft rounds at K={m['k']}"),
        "lookup_s": _sourced(statistics.median(m["lookup_s"]),
                             f"{src}: median of {len(m['lookup_s'])} prompt-lookup proposals over {depth} tokens"),
        "noise": _sourced(noise, f"derived: 1.4826 * MAD / median of the {len(ones)} one-token target decodes{capped}; {src}"),
        "notes": [
            "agreement pair: full-size matrices (true costs), bigram weights (peaked logits), meaningless "
            "text; verify costs in steady state (each size repeated)",
            f"n_gpu_layers {m.get('n_gpu_layers', -1)} (-1: all on the GPU), n_ctx {m['n_ctx']}, "
            f"decodes at depth {depth}",
            f"plain decode through SpecChat: {statistics.median(r['ratio'] for r in plain):.3f} of "
            "llama-bench-style raw decode (median of the runs in measurements.json)",
            f"the attention and FFN matrices are copies of one pool of N(0, 0.02) values (seed {m['seed']})",
        ],
    }


def verify_curve(verify: dict[int, float], reps: dict[int, int], src: str) -> dict[str, Any]:
    """verify_x from the minimum decode times: the measured ratios, each raised to the largest ratio
    of a smaller batch (a profile's curve may not fall as the batch grows; kernels switch tiles, a
    busy machine adds noise); measurements.json keeps every raw time."""
    token_s = verify[1]
    out: dict[str, Any] = {"1": 1.0}
    floor, floor_n = 1.0, 1
    for n in sorted(verify):
        if n == 1:
            continue
        ratio = verify[n] / token_s
        what = f"derived: min of {reps[n]} decodes of {n} tokens ({verify[n]:.6f} s) / token_s ({token_s:.6f} s)"
        if ratio < floor:
            what += f" = {ratio:.3f}, raised to the n={floor_n} value"
            ratio = floor
        else:
            floor, floor_n = ratio, n
        out[str(n)] = _sourced(ratio, f"{what}; {src}")
    return out


def check_profile(profile: dict[str, Any]) -> None:
    missing = [k for k in PROFILE_KEYS if k not in profile]
    if missing or "1" not in profile.get("verify_x", {}):
        raise ValueError(f"profile lacks {', '.join(missing) or 'verify_x[1]'}")
    if not re.fullmatch(r"[a-z0-9._-]+", profile["name"]):
        raise ValueError(f"profile name {profile['name']!r} is not [a-z0-9._-]+")


def write_json(path: Path, doc: Any) -> None:
    from specchat.files import write_text_atomically

    write_text_atomically(path, json.dumps(doc, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# the device side: build, then run
# --------------------------------------------------------------------------------------------

def use_site(site: Path) -> None:
    """The carried wheels and the CUDA build first, then SpecChat's own sources."""
    for p in (str(ROOT / "app"), str(site)):
        if p not in sys.path and (p != str(site) or site.is_dir()):
            sys.path.insert(0, p)


def install_wheels(kit: Path, site: Path) -> None:
    wheels = sorted((kit / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"{kit}/wheels: no wheels: run 'python scripts/gpu_kit.py pack' on a machine with network")
    site.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--upgrade", "--target", str(site), *map(str, wheels)], check=True)


CUDA_SHIM = "specchat-kit-cuda.json"  # in the site: the cuBLAS libraries to preload, when the shim is used


def _cublas_in_toolkit() -> bool:
    nvcc = shutil.which("nvcc")
    roots = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))]
    if nvcc:
        roots.append(Path(nvcc).resolve().parent.parent)
    return any(any(r.glob(f"{d}/libcublas.so")) for r in roots for d in ("lib64", "lib", "targets/*/lib"))


def _find_python_cublas() -> tuple[Path, Path, Path] | None:
    """libcublas, libcublasLt and cublas_v2.h's folder from the Python ``nvidia`` packages
    (PyTorch's own cuBLAS), or None."""
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    found: dict[str, Path] = {}
    for base in map(Path, getattr(nvidia, "__path__", [])):
        for f in base.rglob("*"):
            if re.fullmatch(r"libcublas\.so\.\d+", f.name):
                found.setdefault("cublas", f)
            elif re.fullmatch(r"libcublasLt\.so\.\d+", f.name):
                found.setdefault("cublasLt", f)
            elif f.name == "cublas_v2.h":
                found.setdefault("include", f.parent)
    if len(found) < 3:
        return None
    return found["cublas"], found["cublasLt"], found["include"]


def cublas_flags(site: Path) -> list[str]:
    """CMake flags that point llama.cpp at a cuBLAS when the CUDA toolkit has none (this workplace's
    partial toolkits ship nvcc and cudart only): PyTorch's, through unversioned links."""
    if _cublas_in_toolkit():
        return []
    hit = _find_python_cublas()
    if hit is None:
        print("warning: no libcublas.so in the CUDA toolkit nor in Python's nvidia packages: the build "
              "will stop at CUDA::cublas", flush=True)
        return []
    cublas, cublas_lt, include = hit
    shim = site.parent / "cublas-shim"
    shim.mkdir(parents=True, exist_ok=True)
    for name, real in (("libcublas.so", cublas), ("libcublasLt.so", cublas_lt)):
        link = shim / name
        link.unlink(missing_ok=True)
        link.symlink_to(real)
    site.mkdir(parents=True, exist_ok=True)
    (site / CUDA_SHIM).write_text(json.dumps({"preload": [str(cublas_lt), str(cublas)]}))
    print(f"cuBLAS from {cublas.parent} (the toolkit has none)", flush=True)
    return [f"-DCUDA_cublas_LIBRARY={shim / 'libcublas.so'}", f"-DCUDA_cublasLt_LIBRARY={shim / 'libcublasLt.so'}",
            f"-DCMAKE_CUDA_FLAGS=-I{include}", f"-DCMAKE_CXX_FLAGS=-I{include}"]


def preload_cuda_shim(site: Path) -> None:
    """Load the shim's cuBLAS globally, so the built library finds it without LD_LIBRARY_PATH."""
    marker = site / CUDA_SHIM
    if marker.is_file():
        for lib in json.loads(marker.read_text()).get("preload", []):
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)


BUILD_STATUS = "build-status.json"  # beside the site: running / done / failed, with times (``build --wait``)


def build_dir(site: Path) -> Path:
    return site.parent / "llama.cpp-build"


def tool_path(site: Path, name: str) -> Path:
    """llama-server or llama-bench of the kit's build."""
    return build_dir(site) / "bin" / name


def build(kit: Path, site: Path, *, cpu: bool, jobs: int, log: Path, from_index: bool = False) -> None:
    """Unpack the stripped sdist, build one cmake tree of its llama.cpp (the shared libraries,
    llama-server, llama-bench) and lay llama-cpp-python's bindings into ``site`` over those libraries."""
    archives = sorted(kit.glob(f"{SDIST_NAME}*.tar.xz"))
    if not archives:
        raise SystemExit(f"{kit}: no {SDIST_NAME}-stripped.tar.xz: run 'python scripts/gpu_kit.py pack' first")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise SystemExit("cmake not found: the build needs cmake and a C++ compiler")
    src_root = site.parent / "src"
    shutil.rmtree(src_root, ignore_errors=True)
    src_root.mkdir(parents=True)
    with tarfile.open(archives[0], "r:xz") as tar:
        tar.extractall(src_root, filter="data")
    (src,) = [p for p in src_root.iterdir() if p.is_dir()]
    if cpu:
        flags = ["-DGGML_CUDA=OFF"]
    elif from_index:  # NVIDIA's compiler and libraries from the package index, on a machine without a GPU
        from specchat.remote import cuda_toolchain

        tc = cuda_toolchain.ensure(log=lambda line: print(line, flush=True))
        flags = ["-DGGML_CUDA=ON", *tc.cmake_args(KIT_ARCH, origin=True)]
    else:
        flags = ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={KIT_ARCH}", *cublas_flags(site)]
    out_dir = build_dir(site)
    print(f"building llama.cpp {LLAMA_CPP_PYTHON} ({'CPU' if cpu else f'CUDA sm_{KIT_ARCH}'}, -j{jobs}: "
          f"{', '.join(BUILD_TARGETS)}) in {out_dir}; log: {log}", flush=True)
    t0 = time.perf_counter()
    with log.open("w") as out:
        for cmd in ([cmake, "-S", str(src / "vendor" / "llama.cpp"), "-B", str(out_dir), *flags, *BUILD_FLAGS],
                    [cmake, "--build", str(out_dir), "--config", "Release", "-j", str(jobs),
                     "--target", *BUILD_TARGETS]):
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                print("".join(log.read_text(errors="replace").splitlines(True)[-40:]))
                raise SystemExit(f"the build failed ({rc}); the whole log is {log}")
    # the bindings: llama-cpp-python's Python package, its lib/ the tree's bin/ (libllama.so and the
    # libggml*.so it needs, found there by their build RPATH)
    site.mkdir(parents=True, exist_ok=True)
    dest = site / "llama_cpp"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src / "llama_cpp", dest)
    lib = dest / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    lib.symlink_to(out_dir / "bin", target_is_directory=True)
    missing = [n for n in ("libllama.so", "llama-server", "llama-bench") if not (out_dir / "bin" / n).exists()]
    if missing:
        raise SystemExit(f"the build made no {', '.join(missing)} in {out_dir / 'bin'}; see {log}")
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)


PREBUILT = f"prebuilt-cuda-sm{KIT_ARCH}.tar.xz"  # in the kit: a CUDA tree built here (``prebuild``)


def _carried(bin_dir: Path) -> list[Path]:
    """What runs on the GPU machine: the shared libraries (and their soname links), llama-server, llama-bench."""
    keep = [p for p in sorted(bin_dir.iterdir()) if re.fullmatch(r"lib(llama|ggml|mtmd)[\w.-]*\.so[\d.]*", p.name)]
    return keep + [bin_dir / n for n in ("llama-server", "llama-bench") if (bin_dir / n).is_file()]


def pack_prebuilt(site: Path, kit: Path) -> Path:
    """The CUDA tree built here (``build --cuda-from-index``), stripped of symbols, with the bindings, as one
    archive in the carry folder: ``bin/`` (libraries and tools, found by RPATH $ORIGIN) and ``llama_cpp/``."""
    out_bin = build_dir(site) / "bin"
    files = _carried(out_bin)
    if not any(p.name.startswith("libggml-cuda") for p in files):
        raise SystemExit(f"{out_bin}: no libggml-cuda: run 'gpu_kit.py build --cuda-from-index' here first")
    strip = shutil.which("strip")
    dest = kit / PREBUILT
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "bin"
        stage.mkdir()
        for f in files:
            if f.is_symlink():
                (stage / f.name).symlink_to(os.readlink(f))
                continue
            shutil.copy2(f, stage / f.name)
            with f.open("rb") as head:
                elf = head.read(4) == b"\x7fELF"
            if strip and elf:
                subprocess.run([strip, "--strip-unneeded", str(stage / f.name)], check=True)
        part = dest.with_name(dest.name + ".part")
        with tarfile.open(part, "w:xz", preset=6) as tar:
            tar.add(stage, arcname="bin")
            tar.add(site / "llama_cpp", arcname="llama_cpp", filter=lambda t: None if t.name == "llama_cpp/lib" else t)
        part.replace(dest)
    return dest


def unpack_prebuilt(kit: Path, site: Path) -> None:
    """``pack_prebuilt``'s archive laid out as ``build`` lays a tree: the build's bin/, the bindings over it."""
    out_dir = build_dir(site)
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(site / "llama_cpp", ignore_errors=True)
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(kit / PREBUILT, "r:xz") as tar:
        tar.extractall(out_dir, members=[m for m in tar.getmembers() if m.name.startswith("bin")], filter="data")
        tar.extractall(site, members=[m for m in tar.getmembers() if m.name.startswith("llama_cpp")], filter="data")
    (site / "llama_cpp" / "lib").symlink_to(out_dir / "bin", target_is_directory=True)
    link_cuda_runtime(out_dir / "bin")


CUDA_RUNTIME = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")


def link_cuda_runtime(bin_dir: Path) -> list[str]:
    """Links in ``bin_dir`` (the RPATH's $ORIGIN) to this machine's CUDA 13 runtime and cuBLAS: the
    toolkit's, else the Python ``nvidia`` packages' (PyTorch's).  Returns the names it found nowhere."""
    from specchat.remote import cuda_toolchain

    roots = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")), cuda_toolchain.default_root()]
    if shutil.which("nvcc"):
        roots.append(Path(shutil.which("nvcc") or "").resolve().parent.parent)
    try:
        import nvidia  # type: ignore[import-not-found]

        roots += [Path(p) for p in getattr(nvidia, "__path__", [])]
    except ImportError:
        pass
    missing = []
    for name in CUDA_RUNTIME:
        if (bin_dir / name).exists():
            continue
        found = next((f for r in roots if r.is_dir() for f in r.rglob(name) if f.is_file()), None)
        if found is None:
            missing.append(name)
            continue
        (bin_dir / name).unlink(missing_ok=True)
        (bin_dir / name).symlink_to(found)
    if missing:
        print(f"warning: no {', '.join(missing)} on this machine: llama.cpp's CUDA library will not load", flush=True)
    return missing


def build_status(site: Path) -> dict[str, Any]:
    path = site.parent / BUILD_STATUS
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def set_build_status(site: Path, **fields: Any) -> None:
    site.parent.mkdir(parents=True, exist_ok=True)
    write_json(site.parent / BUILD_STATUS, {**build_status(site), **fields, "at": time.time()})


def wait_for_build(site: Path, seconds: float) -> int:
    """Wait for a detached build (this call or an earlier one); 0 done, 1 failed, 3 still running."""
    deadline = time.monotonic() + seconds
    while True:
        st = build_status(site)
        state = st.get("state")
        if state == "done":
            print(f"build done in {st.get('seconds', 0):.0f} s", flush=True)
            return 0
        if state == "failed" or not st:
            print(f"build {'failed' if st else 'never started here'}: {st.get('error', '')} "
                  f"(log {site.parent / 'build.log'})", flush=True)
            tail = (site.parent / "build.out")
            if tail.is_file():
                print("".join(tail.read_text(errors="replace").splitlines(True)[-20:]), flush=True)
            return 1
        pid = int(st.get("pid", 0))
        if pid and not Path(f"/proc/{pid}").exists():
            print(f"the build process {pid} is gone without a result (the machine went back?)", flush=True)
            return 1
        if time.monotonic() >= deadline:
            print(f"build still running after {time.time() - st.get('started', time.time()):.0f} s: "
                  "call 'build --wait S' again", flush=True)
            return 3
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))  # --wait S waits S, not a whole poll more


def hardware_name(cpu: bool) -> str:
    if not cpu:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30, check=True).stdout.strip().splitlines()
            if out:
                return out[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
        return "unknown GPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def measure_all(target_path: Path, draft_path: Path, *, cpu: bool, depth: int, k: int, reps: int,
                plain_tokens: int, round_tokens: int, seed: int) -> dict[str, Any]:
    import llama_cpp

    from specchat.engine.calibration import measure
    from specchat.engine.pair import PairConfig, SpeculativePair
    from specchat.engine.runtime import LoadedModel, ModelOptions, backend_info
    from specchat.engine.settings import ControllerSettings

    n_ctx = 4096
    opts = ModelOptions(n_ctx=n_ctx, n_gpu_layers=0 if cpu else -1)
    sizes = list(range(1, 18))
    # a fixed K, every draft kept going (p_min 0) and no guard rail: every round drafts K tokens
    controller = ControllerSettings(k_min=k, k_max=k, p_min=0.0, min_token_acceptance=0.0,
                                    min_sequence_acceptance=0.0)
    config = PairConfig(target=target_path, draft=draft_path, target_options=opts, controller=controller)
    target = LoadedModel(target_path, opts, n_outputs=max(sizes))
    try:
        draft = LoadedModel(draft_path, opts, n_outputs=1)
    except BaseException:
        target.close()
        raise
    costs = measure(target, draft, k)  # the calibration the pair would run, kept among the numbers
    with SpeculativePair.from_models(config, target, draft, costs) as pair:
        info = backend_info()
        print(f"  backend {info['backend']}, target {target.describe()}, draft {draft.describe()}", flush=True)
        prompt = realistic_prompt(target, depth)
        verify = measure_verify(target, depth=depth, sizes=sizes, reps=reps)
        drafted = measure_draft(draft, depth=depth, reps=reps * 4)
        plain = measure_plain(pair, prompt, max_tokens=plain_tokens, repeats=3)
        rounds = measure_rounds(pair, prompt, k=k, max_tokens=round_tokens)
        lookup = measure_lookup(pair, prompt, k, reps * 4)
        return {
            "llama_cpp_python": llama_cpp.__version__, "backend": info["backend"],
            "system_info": info["system_info"], "target_file": target_path.name, "draft_file": draft_path.name,
            "target_desc": target.describe(), "draft_desc": draft.describe(),
            "target_bytes": target.size_bytes, "draft_bytes": draft.size_bytes, "n_ctx": n_ctx,
            "n_threads": target.n_threads, "n_gpu_layers": opts.n_gpu_layers, "depth": depth, "k": k, "seed": seed,
            "calibration": {"verify_s": {str(n): v for n, v in costs.verify_s.items()},
                            "draft_s": dict(costs.draft_s)},
            "verify_s": {str(n): v for n, v in verify.items()}, "draft": drafted, "plain": plain,
            "rounds": rounds, "lookup_s": lookup,
        }


def run_simulate(profile: Path, site: Path) -> str:
    """``specchat simulate`` on every committed trace; says so when there is none, or no command."""
    traces = sorted((ROOT / "docs" / "traces").glob("*.json"))
    if not traces:
        return "no committed traces in docs/traces: nothing simulated\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(site) if site.is_dir() else "",
                                                                   str(ROOT / "app")) if p))
    parts = []
    for trace in traces:
        cmd = [sys.executable, "-m", "specchat", "simulate", "--trace", str(trace), "--profile", str(profile)]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        head = f"$ specchat simulate --trace docs/traces/{trace.name} --profile {profile.name}"
        body = res.stdout + res.stderr
        if res.returncode != 0 and "simulate" in body and "unknown command" in body.lower():
            body = "specchat simulate is not there yet (harness/simulate.py): " + body.strip() + "\n"
        parts.append(f"{head}\n{body}(exit {res.returncode})\n")
    return "\n".join(parts)


def summary_lines(m: dict[str, Any], profile: dict[str, Any]) -> list[str]:
    verify = profile["verify_x"]
    x = {n: (v if isinstance(v, float) else v["value"]) for n, v in verify.items()}
    plain = m["plain"]
    r = m["rounds"]
    wall = [d + v + o for d, v, o in zip(r["draft_s"], r["verify_s"], r["overhead_s"], strict=True)]
    share = statistics.median(o / w for o, w in zip(r["overhead_s"], wall, strict=True) if w > 0) if wall else 0.0
    return [
        f"hardware: {profile['hardware']}",
        f"target {m['target_desc']} ({m['target_bytes'] / 1e9:.2f} GB), draft {m['draft_desc']} "
        f"({m['draft_bytes'] / 1e9:.2f} GB), depth {m['depth']}",
        "plain decode: " + ", ".join(f"{p['baseline_tok_s']:.1f} vs raw {p['raw_tok_s']:.1f} tok/s "
                                     f"({p['ratio']:.3f})" for p in plain),
        f"token_s {profile['token_s']['value'] * 1e3:.3f} ms; verify_x "
        + " ".join(f"{n}:{x[n]:.2f}" for n in sorted(x, key=int)),
        f"draft token {profile['draft_x']['value'] * profile['token_s']['value'] * 1e3:.3f} ms "
        f"(draft_x {profile['draft_x']['value']:.3f}; greedy choice "
        f"{statistics.median(m['draft']['greedy_choice_s']) * 1e3:.3f} ms of it)",
        f"loop overhead per round (K={m['k']}, {len(r['overhead_s'])} rounds): median "
        f"{profile['overhead_s']['value'] * 1e3:.3f} ms, {share:.1%} of a round "
        f"(round {statistics.median(wall) * 1e3 if wall else 0:.2f} ms)",
        f"prompt lookup {profile['lookup_s']['value'] * 1e6:.1f} us; noise {profile['noise']['value']:.3f}",
    ]


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------

def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def cmd_pack(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    stripped = out / f"{SDIST_NAME}-stripped.tar.xz"
    t0 = time.perf_counter()
    if args.sdist is not None:
        if not args.sdist.is_file():
            raise SystemExit(f"{args.sdist}: no such sdist: give the {SDIST_NAME}.tar.gz file, or no --sdist")
        kept, dropped = strip_sdist(args.sdist, stripped)
    else:
        with tempfile.TemporaryDirectory() as tmp:  # 76 MB, needed only until it is stripped
            kept, dropped = strip_sdist(fetch_sdist(Path(tmp)), stripped)
    print(f"{stripped.name}: {kept} members kept, {dropped} dropped, {stripped.stat().st_size / 2**20:.1f} MiB "
          f"({time.perf_counter() - t0:.0f} s)")
    source = args.tokenizer_from or test_model_path()
    if source is None or not source.is_file():
        raise SystemExit(f"no {TEST_MODEL} to copy the tokenizer from: run scripts/test_models.py, "
                         "or give --tokenizer-from FILE")
    tok = write_tokenizer_gguf(source, out / TOKENIZER_FILE)
    print(f"{TOKENIZER_FILE}: {tok.n_tokens} tokens, {len(tok.fields)} keys from {source.name}, "
          f"{(out / TOKENIZER_FILE).stat().st_size / 2**20:.1f} MiB")
    wheels = fetch_wheels(out / "wheels")
    print("wheels: " + ", ".join(w.name for w in wheels))
    size = folder_size(out)
    print(f"{out}: {size / 2**20:.1f} MiB (limit {KIT_LIMIT_BYTES >> 20} MiB)")
    return 0 if size <= KIT_LIMIT_BYTES else 1


def test_model_path() -> Path | None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import test_models
    except ImportError:
        return None
    return Path(test_models.cache_dir()) / TEST_MODEL


def cmd_build(args: argparse.Namespace) -> int:
    """The build, in this process, or (``--detach``) in a process of its own session that outlives
    this device call; ``--wait S`` then waits up to S seconds for it (and is all a later call runs)."""
    if args.detach and not args.attached:
        args.site.parent.mkdir(parents=True, exist_ok=True)
        out = (args.site.parent / "build.out").open("w")
        argv = [sys.executable, str(Path(__file__).resolve()), "build", "--attached", "--kit", str(args.kit),
                "--site", str(args.site), "--jobs", str(args.jobs), *(["--cpu"] if args.cpu else []),
                *(["--cuda-from-index"] if args.cuda_from_index else [])]
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        set_build_status(args.site, state="running", pid=proc.pid, started=time.time(), error="")
        print(f"build started (pid {proc.pid}, its own session); output in {args.site.parent / 'build.out'}",
              flush=True)
        return wait_for_build(args.site, args.wait)
    if args.wait and not args.attached:  # a later call: only wait for (or report) the detached build
        return wait_for_build(args.site, args.wait)
    t0 = time.time()
    set_build_status(args.site, state="running", pid=os.getpid(), started=t0, error="")
    try:
        install_wheels(args.kit, args.site)
        if (args.kit / PREBUILT).is_file() and not args.cpu and not args.cuda_from_index:
            print(f"unpacking {PREBUILT} (built on the CPU machine) instead of compiling", flush=True)
            unpack_prebuilt(args.kit, args.site)
        else:
            build(args.kit, args.site, cpu=args.cpu, jobs=args.jobs, log=args.site.parent / "build.log",
                  from_index=args.cuda_from_index)
            if args.cuda_from_index:
                packed = pack_prebuilt(args.site, args.kit)
                size = folder_size(args.kit)
                print(f"{packed}: {packed.stat().st_size / 2**20:.1f} MiB; the kit is {size / 2**20:.1f} MiB"
                      + (f": over the {CARRY_LIMIT_BYTES >> 20} MiB the carry leaves it" if size > CARRY_LIMIT_BYTES
                         else ""), flush=True)
    except BaseException as exc:
        set_build_status(args.site, state="failed", error=str(exc)[:500])
        raise
    set_build_status(args.site, state="done", seconds=time.time() - t0)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.shapes == "qwen7b" and args.cpu:
        print("note: the 7B shape on a CPU takes a long time and ~20 GB of disk", flush=True)
    if not args.skip_build:
        install_wheels(args.kit, args.site)
        build(args.kit, args.site, cpu=args.cpu, jobs=args.jobs, log=args.site.parent / "build.log")
    elif (args.kit / "wheels").is_dir():
        install_wheels(args.kit, args.site)
    use_site(args.site)
    preload_cuda_shim(args.site)
    try:
        import llama_cpp
    except ImportError:
        raise SystemExit(f"no llama_cpp in {args.site} or this Python: run the build call first "
                         "(a machine that went back keeps no build)") from None
    if not args.cpu and not llama_cpp.llama_supports_gpu_offload():
        raise SystemExit(f"{llama_cpp.__file__}: this llama-cpp-python has no GPU offload: run the build call "
                         "(or use --cpu)")
    tok_file = args.kit / TOKENIZER_FILE
    if not tok_file.is_file():
        source = test_model_path()
        if source is None or not source.is_file():
            raise SystemExit(f"{tok_file}: missing: run 'python scripts/gpu_kit.py pack' first")
        tok_file = source
    tokenizer = Tokenizer.from_gguf(tok_file)
    target_shape, draft_shape = SHAPES[args.shapes]
    threads = os.cpu_count() or 1
    print(f"synthesising {target_shape.name} and {draft_shape.name} in {args.work}", flush=True)
    # an agreement pair at alpha 0.9: full-size matrices (true costs) and the draft's peaked logits, so
    # its greedy choice costs what it costs on a real draft (random weights' flat logits forced the
    # full-vocabulary softmax: 1.7 of 2.9 ms a drafted token on the H100)
    pairs = make_pairs(args.shapes, tokenizer, [0.9], args.work, threads=threads, cycle_seed=args.seed + 1)
    target, draft = pairs.target, pairs.drafts[0.9]
    print("measuring", flush=True)
    m = measure_all(target, draft, cpu=args.cpu, depth=args.depth, k=args.k, reps=args.reps,
                    plain_tokens=args.plain_tokens, round_tokens=args.round_tokens, seed=args.seed)
    hardware = hardware_name(args.cpu)
    date = _dt.date.today().isoformat()
    m["hardware"], m["date"] = hardware, date
    profile = build_profile(m, hardware=hardware, kind="measured-cpu" if args.cpu else "measured-gpu",
                            shapes=args.shapes, date=date)
    check_profile(profile)
    args.out.mkdir(parents=True, exist_ok=True)
    profile_path = args.out / f"profile-{profile['name']}.json"
    write_json(profile_path, profile)
    write_json(args.out / "measurements.json", m)
    lines = summary_lines(m, profile)
    print("\n".join(lines), flush=True)
    sim = run_simulate(profile_path, args.site)
    from specchat.files import write_text_atomically

    write_text_atomically(args.out / "simulate.txt", sim)
    print(sim, flush=True)
    print(f"wrote {profile_path}, {args.out / 'measurements.json'}, {args.out / 'simulate.txt'}")
    return 0


# --------------------------------------------------------------------------------------------
# measure: SpecChat beside llama-server on agreement pairs, one report
# --------------------------------------------------------------------------------------------

LOCAL_MODES = ("baseline", "draft", "lookup", "auto")
SERVER_N_MAX = (3, 8)  # llama-server's draft-simple default (3) and a longer draft


def server_contenders(cpu: bool) -> list[tuple[str, int | None]]:
    """llama-server's speculative contenders, as (spec type, n_max): draft-simple at each n_max and
    ngram-mod, llama.cpp's best draft-free mode.  On a CPU draft-simple runs at its default only: every
    server holds its own repacked copy of the target (4.4 GB for the 7B shape) in a 24 GB machine."""
    return [("draft-simple", n) for n in (SERVER_N_MAX[:1] if cpu else SERVER_N_MAX)] + [("ngram-mod", None)]


def run_llama_bench(binary: Path, model: Path, *, cpu: bool, depth: int, reps: int, n_gen: int,
                    pp: Sequence[int]) -> list[dict[str, Any]]:
    """llama-bench's JSON rows: tg ``n_gen`` and pp of each size, at ``depth`` tokens in the cache."""
    cmd = [str(binary), "-m", str(model), "-d", str(depth), "-n", str(n_gen), "-p", ",".join(map(str, pp)),
           "-r", str(reps), "-o", "json", "-ngl", "0" if cpu else "99"]
    from specchat.engine import cpu_kernels
    from specchat.errors import exit_description

    cmd += cpu_kernels.server_args(frozenset({"--repack"}))  # llama-bench's switch, where the probe found a fault
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"llama-bench {exit_description(res.returncode)}: {res.stderr.strip().splitlines()[-1:]}")
    return [{k: row.get(k) for k in ("n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "avg_ns")}
            for row in json.loads(res.stdout)]


def measure_shapes(model: Any, *, depth: int, sizes: Sequence[int], reps: int) -> dict[str, Any]:
    """Decode costs as a loop pays them: each size repeated (steady: llama.cpp replays its CUDA graph
    from the third call of a shape) and the sizes cycled (every call a new shape: a re-capture each)."""
    fill_to(model, depth)
    steady: dict[str, list[float]] = {}
    for n in sizes:
        for _ in range(STEADY_WARMUP):
            timed_decode(model, n)
        steady[str(n)] = [timed_decode(model, n) for _ in range(reps)]
    churn: dict[str, list[float]] = {str(n): [] for n in sizes}
    for _ in range(reps):
        for n in sizes:
            churn[str(n)].append(timed_decode(model, n))
    model.clear()
    return {"steady_s": steady, "churn_s": churn}


def measure_costs(pairs: AgreementPairs, *, cpu: bool, depth: int, reps: int) -> dict[str, Any]:
    """SpecChat's per-shape costs on the target and the (alpha-independent) draft: steady and churned
    decode sizes, and a drafted token (one-token decode + greedy choice on the draft's peaked logits)."""
    from specchat.engine.runtime import LoadedModel, ModelOptions

    opts = ModelOptions(n_ctx=4096, n_gpu_layers=0 if cpu else -1)
    sizes = [1, 2, 3, 4, 5, 6, 8, 12, 16]
    out: dict[str, Any] = {}
    for name, path in (("target", pairs.target), ("draft", next(iter(pairs.drafts.values())))):
        model = LoadedModel(path, opts, n_outputs=max(sizes))
        try:
            out[name] = measure_shapes(model, depth=depth, sizes=sizes, reps=reps)
            if name == "draft":
                out["drafted_token"] = measure_draft(model, depth=depth, reps=reps * 4)
        finally:
            model.close()
    return out


def bench_alpha(pairs: AgreementPairs, alpha: float, *, server: Path, cpu: bool, out: Path, max_tokens: int,
                repeat: int, tasks: str, site: Path) -> Path:
    """One interleaved ``specchat bench``: SpecChat in every mode, llama-server with draft-simple at each
    n_max and plain, on the same prompts; returns its JSON."""
    from specchat.errors import exit_description
    from specchat.remote.llama_server import ManagedServer

    draft = pairs.drafts[alpha]
    gpu_layers = 0 if cpu else -1
    draft_layers = () if cpu else ("-ngld", "99")
    logs = out / "logs" / f"a{alpha:g}"
    servers = [ManagedServer(server, pairs.target, draft if kind == "draft-simple" else None, spec_type=kind,
                             n_max=n, gpu_layers=gpu_layers,
                             extra_args=draft_layers if kind == "draft-simple" else (),
                             log_dir=logs / (f"n{n}" if n else kind)) for kind, n in server_contenders(cpu)]
    servers.append(ManagedServer(server, pairs.target, gpu_layers=gpu_layers, log_dir=logs / "plain"))
    json_path = out / f"bench-a{alpha:g}.json"
    try:
        urls = [s.start(timeout_s=300) for s in servers]
        cmd = [sys.executable, "-m", "specchat", "--profile", str(out / "profile"), "bench",
               "--target", str(pairs.target), "--draft", str(draft), "--modes", ",".join(LOCAL_MODES),
               "--no-fit-check", "--task", tasks, "--max-tokens", str(max_tokens), "--repeat", str(repeat),
               *[a for u in urls[:-1] for a in ("--server", u)], "--baseline-server", urls[-1],
               "--json", str(json_path), *(["--gpu-layers", "0", "--draft-gpu-layers", "0"] if cpu else [])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(site) if site.is_dir() else "",
                                                                       str(ROOT / "app")) if p))
        print(f"  alpha {alpha:g}: specchat bench ({', '.join(LOCAL_MODES)}) beside llama-server "
              f"({', '.join(contender_names(cpu)[k] for k in contender_names(cpu) if k.startswith('server'))})",
              flush=True)
        with (logs / "bench.log").open("w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=3600).returncode
        if rc != 0:
            tail = (logs / "bench.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise SystemExit(f"specchat bench {exit_description(rc)} at alpha {alpha:g}: " + " | ".join(tail))
    finally:
        for s in servers:
            s.stop()
    return json_path


def contender_names(cpu: bool) -> dict[str, str]:
    """The bench's contender keys (its --server URLs are "server", "server-2", ...) in words."""
    names = {m: f"SpecChat {'plain' if m == 'baseline' else m}" for m in LOCAL_MODES}
    for i, (kind, n) in enumerate(server_contenders(cpu)):
        names["server" if i == 0 else f"server-{i + 1}"] = f"llama-server {kind}" + (f" (n_max {n})" if n else "")
    names["server-plain"] = "llama-server plain"
    return names


def bench_table(doc: dict[str, Any], cpu: bool) -> list[str]:
    """The markdown rows of one alpha's bench (every prompt pooled), x SpecChat plain."""
    from specchat.harness.bench import BenchRun, median_runs, summarize
    from specchat.metrics import Counts

    runs = [BenchRun.from_json(r) for r in doc["runs"]]
    names = contender_names(cpu)
    labels = [k for k in names if any(r.mode == k for r in runs)]
    rows = {r.mode: r for r in summarize(runs, labels, base="baseline") if r.task == "all"}
    med = median_runs(runs)
    lines = ["| contender | tok/s | x SpecChat plain | token acceptance | mean K | ms per drafted token | "
             "ms per round's verify |", "|---|---|---|---|---|---|---|"]
    for label in labels:
        row = rows[label]
        c = Counts.total(r.counts for r in med if r.mode == label)
        per_draft = f"{c.draft_s / c.drafted * 1e3:.2f}" if c.drafted and c.draft_s else "-"
        per_verify = f"{c.verify_s / c.rounds * 1e3:.2f}" if c.rounds and c.verify_s else "-"
        acc = f"{row.token_acceptance:.0%}" if row.token_acceptance is not None else "-"
        mult = f"{row.multiplier:.2f}x" if row.multiplier is not None else "-"
        lines.append(f"| {names[label]} | {row.decode_tok_s:.1f} | {mult} | {acc} | "
                     f"{row.mean_k:.1f} | {per_draft} | {per_verify} |")
    return lines


def report(result: dict[str, Any]) -> str:
    """The markdown report of one measure run."""
    costs = result["costs"]
    med = statistics.median
    lines = [f"# SpecChat beside llama-server on agreement pairs: {result['hardware']}", "",
             f"{result['date']}, llama-cpp-python {result['llama_cpp_python']} ({result['backend']}), one cmake "
             f"tree for SpecChat, llama-server and llama-bench; shapes {result['shape']} "
             f"({result['target']}, {result['draft']}); {result['max_tokens']} tokens, tasks {result['tasks']}, "
             f"repeat {result['repeat']}. Command: `{result['command']}`", "",
             "## Agreement (measured: the share of 512 positions of the target's greedy path)", "",
             "| model | follows the target |", "|---|---|"]
    lines += [f"| {k} | {v:.1%} |" for k, v in result["agreement"].items()]
    lines += ["", f"## Raw llama.cpp (llama-bench, depth {result['depth']})", "", "| model | test | tok/s |", "|---|---|---|"]
    for model, rows in result["llama_bench"].items():
        for r in rows:
            test = f"tg{r['n_gen']}" if r.get("n_gen") else f"pp{r['n_prompt']}"
            lines.append(f"| {model} | {test} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} |")
    lines += ["", f"## Decode costs through SpecChat's runtime (depth {result['depth']}, medians)", "",
              "Steady: one batch size repeated (on CUDA, llama.cpp replays its captured graph from the "
              "third call of a shape). Cycled: the sizes in turn, every call a new shape (on CUDA, a graph "
              "re-capture each; on a CPU, caches warmed by another size).", "",
              "| model | tokens | steady ms | x one token | cycled sizes ms | cycled / steady |",
              "|---|---|---|---|---|---|"]
    for model in ("target", "draft"):
        st, ch = costs[model]["steady_s"], costs[model]["churn_s"]
        one = med(st["1"])
        for n in st:
            lines.append(f"| {model} | {n} | {med(st[n]) * 1e3:.3f} | {med(st[n]) / one:.2f} | "
                         f"{med(ch[n]) * 1e3:.3f} | {med(ch[n]) / med(st[n]):.2f}x |")
    d = costs["drafted_token"]
    lines += ["", f"A drafted token: {med(d['decode_s']) * 1e3:.3f} ms decode + "
              f"{med(d['greedy_choice_s']) * 1e3:.3f} ms greedy choice (the draft's peaked logits).", ""]
    if "sampling" in result:
        import backend_sampling

        lines += ["## The draft's greedy choice: on the host or in llama.cpp's graph (scripts/backend_sampling.py)",
                  "", f"A 1-token decode and its choice, {result['sampling']['tokens']} tokens, medians; "
                  "host is the loop's way (with its p_min test).", "", backend_sampling.table(result["sampling"]), ""]
    for alpha, doc in result["bench"].items():
        lines += [f"## alpha {alpha}", "", *bench_table(doc, result.get("cpu", False)), ""]
    return "\n".join(lines)


def cmd_measure(args: argparse.Namespace) -> int:
    import llama_cpp

    from specchat.engine.runtime import backend_info

    t_start = time.perf_counter()
    if not args.cpu and not llama_cpp.llama_supports_gpu_offload():
        raise SystemExit(f"{llama_cpp.__file__}: this llama.cpp has no GPU offload: run the build call (or --cpu)")
    server = args.llama_server or tool_path(args.site, "llama-server")
    bench_bin = args.llama_bench or tool_path(args.site, "llama-bench")
    if not server.is_file():
        raise SystemExit(f"{server}: no llama-server: run the build call first, or give --llama-server")
    alphas = parse_alphas(args.alphas)
    tokenizer = Tokenizer.from_gguf(tokenizer_file(args))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    target_shape, draft_shape = SHAPES[args.shape]
    result: dict[str, Any] = {
        "complete": False, "hardware": hardware_name(args.cpu), "cpu": args.cpu, "date": _dt.date.today().isoformat(),
        "llama_cpp_python": llama_cpp.__version__, "backend": backend_info()["backend"],
        "shape": args.shape, "target": f"{target_shape.name} {'F16' if args.f16 else 'Q4_K_M'}",
        "draft": f"{draft_shape.name} {'F16' if args.f16 else 'Q4_K_M'}", "depth": args.depth,
        "max_tokens": args.max_tokens, "repeat": args.repeat, "tasks": args.tasks,
        "command": "gpu_kit.py " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["measure"] else "gpu_kit.py measure"}

    def save(stage: str, **found: Any) -> None:
        """What is measured so far, in OUT/results.json: a call cut short still returns it."""
        result.update(found, stage=stage, seconds=time.perf_counter() - t_start)
        write_json(out / "results.json", result)

    save("started")
    print(f"agreement pairs ({args.shape}) in {args.work}", flush=True)
    pairs = make_pairs(args.shape, tokenizer, alphas, args.work, threads=os.cpu_count() or 1,
                       quantized=not args.f16)
    agreement_ = check_pairs(pairs, tokenizer, gpu=not args.cpu)
    print("  " + ", ".join(f"{k} {v:.1%}" for k, v in agreement_.items()), flush=True)
    save("pairs", agreement=agreement_)
    raw: dict[str, Any] = {}
    if bench_bin.is_file():
        for name, path in (("target", pairs.target), ("draft", next(iter(pairs.drafts.values())))):
            raw[name] = run_llama_bench(bench_bin, path, cpu=args.cpu, depth=args.depth, reps=args.reps,
                                        n_gen=args.bench_tokens, pp=(2, 3, 4, 8, 16))
        print("  llama-bench: " + "; ".join(f"{k} tg {next(r['avg_ts'] for r in v if r['n_gen']):.1f} tok/s"
                                            for k, v in raw.items()), flush=True)
    else:
        print(f"  {bench_bin}: no llama-bench; its table is left out", flush=True)
    save("llama-bench", llama_bench=raw)
    costs = measure_costs(pairs, cpu=args.cpu, depth=args.depth, reps=args.reps)
    save("costs", costs=costs)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backend_sampling  # scripts/backend_sampling.py: each way in a child process

    print("  the draft's greedy choice: host or in the graph", flush=True)
    sampling = backend_sampling.measure(next(iter(pairs.drafts.values())), gpu_layers=0 if args.cpu else -1,
                                        tokens=args.bench_tokens, reps=args.reps)
    save("sampling", sampling=sampling)
    bench: dict[str, Any] = {}
    for alpha in alphas:
        path = bench_alpha(pairs, alpha, server=server, cpu=args.cpu, out=out, max_tokens=args.max_tokens,
                           repeat=args.repeat, tasks=args.tasks, site=args.site)
        bench[f"{alpha:g}"] = json.loads(path.read_text())
        save(f"bench {alpha:g}", bench=bench)
    save("done", complete=True)
    from specchat.files import write_text_atomically

    write_text_atomically(out / "report.md", report(result) + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:  # at most 8 files come back from a device call
        tar.add(out / "logs", arcname="logs")
    print(report(result), flush=True)
    print(f"measured in {result['seconds']:.0f} s: {out / 'report.md'}, {out / 'results.json'}, "
          f"{out / 'logs.tar.gz'}", flush=True)
    return 0


def tokenizer_file(args: argparse.Namespace) -> Path:
    if args.tokenizer is not None:
        return args.tokenizer
    kit_file = args.kit / TOKENIZER_FILE
    if kit_file.is_file():
        return kit_file
    source = test_model_path()
    if source is None or not source.is_file():
        raise SystemExit(f"{kit_file}: missing: run 'python scripts/gpu_kit.py pack' first, or give --tokenizer FILE")
    return source


def cmd_pairs(args: argparse.Namespace) -> int:
    alphas = parse_alphas(args.alphas)
    tokenizer = Tokenizer.from_gguf(tokenizer_file(args))
    t0 = time.perf_counter()
    print(f"agreement pairs ({args.shape}) for alpha {', '.join(f'{a:g}' for a in alphas)} in {args.out}", flush=True)
    pairs = make_pairs(args.shape, tokenizer, alphas, args.out, threads=args.threads, quantized=not args.f16)
    print(f"made in {time.perf_counter() - t0:.0f} s: {args.out / 'pairs.json'}", flush=True)
    if args.check:
        got = check_pairs(pairs, tokenizer, gpu=not args.cpu)
        write_json(args.out / "check.json", got)
        for what, share in got.items():
            print(f"  {what}: follows the target's bigram on {share:.1%} of 512 tokens", flush=True)
    return 0


def parse_alphas(text: str) -> list[float]:
    try:
        alphas = sorted({float(a) for a in text.split(",") if a.strip()})
    except ValueError:
        raise SystemExit(f"--alphas {text!r}: give shares between 0 and 1, e.g. 0.6,0.8,0.9") from None
    if not alphas or not all(0.0 <= a <= 1.0 for a in alphas):
        raise SystemExit(f"--alphas {text!r}: give shares between 0 and 1, e.g. 0.6,0.8,0.9")
    return alphas


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_kit.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="make the carry folder (here, with the network)")
    pack.add_argument("--sdist", type=Path, help=f"{SDIST_NAME}.tar.gz (default: pip download it)")
    pack.add_argument("--out", type=Path, default=ROOT / "gpu-kit")
    pack.add_argument("--tokenizer-from", type=Path, help=f"a Qwen2.5 GGUF (default: the test model {TEST_MODEL})")
    for name, help_ in (("build", "one cmake tree: llama.cpp's libraries for SpecChat, llama-server, llama-bench "
                              "(its own device call)"),
                        ("run", "synthesise, measure, write the profile (the next device call)")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--kit", type=Path, default=ROOT / "gpu-kit")
        s.add_argument("--site", type=Path, default=DEFAULT_SITE)
        s.add_argument("--cpu", action="store_true", help="no GPU: CPU build, n_gpu_layers=0")
        s.add_argument("--jobs", type=int, default=16)
    b = sub.choices["build"]
    b.add_argument("--detach", action="store_true", help="build in a process of its own session (outlives the call)")
    b.add_argument("--wait", type=float, default=0.0, help="wait up to S seconds for a detached build")
    b.add_argument("--attached", action="store_true", help=argparse.SUPPRESS)
    b.add_argument("--cuda-from-index", action="store_true",
                   help="CUDA with NVIDIA's compiler from the package index (specchat cuda-build's): on a machine "
                        "without a GPU or toolkit, for sm_90")
    run = sub.choices["run"]
    run.add_argument("--out", type=Path, default=Path("gpu-kit-out"))
    run.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where the GGUFs are made (~20 GB for qwen7b)")
    run.add_argument("--shapes", choices=sorted(SHAPES), default="qwen7b")
    run.add_argument("--skip-build", action="store_true", help="use the build of the previous call (or this Python's)")
    run.add_argument("--depth", type=int, default=256, help="tokens in the cache while measuring")
    run.add_argument("--k", type=int, default=8, help="the fixed draft length of the overhead rounds")
    run.add_argument("--reps", type=int, default=7, help="repeats of each verify size")
    run.add_argument("--plain-tokens", type=int, default=128)
    run.add_argument("--round-tokens", type=int, default=200)
    run.add_argument("--seed", type=int, default=0)
    pairs = sub.add_parser("pairs", help="agreement pairs: a target and drafts that agree with it on a share alpha")
    pairs.add_argument("--kit", type=Path, default=ROOT / "gpu-kit")
    pairs.add_argument("--site", type=Path, default=DEFAULT_SITE)
    pairs.add_argument("--shape", choices=sorted(SHAPES), default="qwen7b")
    pairs.add_argument("--alphas", default="0.6,0.8,0.9", help="the drafts' agreement shares")
    pairs.add_argument("--out", type=Path, default=DEFAULT_WORK / "pairs")
    pairs.add_argument("--tokenizer", type=Path, default=None,
                       help=f"a GGUF with the tokenizer (default: the kit's {TOKENIZER_FILE}, or the test model)")
    pairs.add_argument("--f16", action="store_true", help="keep F16 (no Q4_K_M): quicker, for tests")
    pairs.add_argument("--check", action="store_true", help="decode with llama.cpp and print the measured agreement")
    pairs.add_argument("--cpu", action="store_true", help="check on the CPU")
    pairs.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    m = sub.add_parser("measure", help="agreement pairs, llama-bench, SpecChat's shape costs and one bench per "
                                       "alpha beside llama-server: report.md, results.json, logs.tar.gz")
    m.add_argument("--kit", type=Path, default=ROOT / "gpu-kit")
    m.add_argument("--site", type=Path, default=DEFAULT_SITE)
    m.add_argument("--out", type=Path, default=Path("gpu-kit-out"))
    m.add_argument("--work", type=Path, default=DEFAULT_WORK / "pairs", help="where the pairs are made")
    m.add_argument("--shape", choices=sorted(SHAPES), default="qwen7b")
    m.add_argument("--alphas", default="0.6,0.8,0.9")
    m.add_argument("--tokenizer", type=Path, default=None)
    m.add_argument("--f16", action="store_true", help="F16 pairs (no Q4_K_M): quicker, for the CPU proof")
    m.add_argument("--cpu", action="store_true", help="no GPU: n_gpu_layers 0 everywhere")
    m.add_argument("--llama-server", type=Path, default=None, help="default: the kit build's")
    m.add_argument("--llama-bench", type=Path, default=None, help="default: the kit build's (left out if missing)")
    m.add_argument("--depth", type=int, default=256)
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--bench-tokens", type=int, default=128, help="llama-bench's tg length")
    m.add_argument("--max-tokens", type=int, default=256)
    m.add_argument("--repeat", type=int, default=1)
    m.add_argument("--tasks", default="code,chat")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command != "pack":
        use_site(args.site)
        preload_cuda_shim(args.site)
    import specchat  # noqa: F401  (before numpy: llama.cpp's library first, specchat/__init__.py says why)

    return {"pack": cmd_pack, "build": cmd_build, "run": cmd_run, "pairs": cmd_pairs,
            "measure": cmd_measure}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
