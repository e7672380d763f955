"""The tokenizer metadata and the GGUF synthesiser: Qwen2 shapes with random weights, written one tensor at a
time (numpy, gguf and llama_cpp are imported where they are used, never at import time)."""

from __future__ import annotations

import ctypes
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TOKEN_TYPE_UNUSED = 5  # gguf.TokenType.UNUSED: how llama.cpp's converter pads a vocabulary ("[PAD<i>]")


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


class RandomPool:
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


def add_shape(writer: Any, shape: Shape, tokenizer: Tokenizer, n_vocab: int) -> None:
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


def write_header(writer: Any, plan: list[tuple[str, tuple[int, ...], bool]]) -> None:
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
    add_shape(writer, shape, tokenizer, n_vocab)
    write_header(writer, plan)
    pool = RandomPool(pool_size, seed)
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
