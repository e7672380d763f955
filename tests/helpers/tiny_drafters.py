"""Tiny synthetic targets and trained drafters of every kind llama-server's ``--spec-type`` takes.

For each of ``draft-eagle3``, ``draft-mtp``, ``draft-dflash`` and ``draft-dspark`` this writes a
target and a drafter with exactly the architecture names, metadata keys, tensor names and shapes
the vendored llama.cpp (llama-cpp-python 0.3.36, build b11312) loads, random weights (seeded) and
the tokenizer of a real model copied byte for byte (the pinned qwen2.5-coder-0.5b: 151,936 tokens).

What the loader wants, by file (paths in the llama.cpp source tree):

- targets: ``qwen3`` (src/models/qwen3.cpp: dense, and its graph exposes every layer's input,
  ``t_layer_inp``, which EAGLE-3 and DFlash read; qwen2's does not) for eagle3/dflash/dspark, and
  ``qwen35`` with one trailing NextN block (``qwen35.nextn_predict_layers = 1``,
  ``blk.N.nextn.eh_proj/enorm/hnorm``, src/models/qwen35.cpp:93-123) for MTP: qwen35 is a dense
  architecture with an MTP draft graph (``graph_mtp``, qwen35.cpp:486), hybrid like the real one: every second layer is a gated delta net
  (``qwen35.full_attention_interval = 2``, qwen35.cpp:17-22).
- ``eagle3`` (src/models/eagle3.cpp:3-98): ``eagle3.target_layers`` (exactly 3 ids),
  ``eagle3.target_hidden_size``; ``fc.weight`` [3 * target hidden, n_embd], one decoder layer whose
  q/k/v read 2 * n_embd, ``blk.0.attn_norm_2``; no ``token_embd``/``output``: both are the target's
  (through ``ctx_other``, llama-context.cpp:156-163), so n_embd equals the target's.
- ``dflash`` (src/models/dflash.cpp:7-255): ``dflash.target_layers``, ``dflash.block_size``;
  ``fc.weight`` [len(target_layers) * n_embd, n_embd], ``enc.output_norm``, decoder layers with
  q/k norms; a mask token (``tokenizer.ggml.mask_token_id``, read at speculative.cpp:997).
  DSpark is the same architecture plus the Markov head ``markov_w1`` [rank, n_vocab] and
  ``markov_w2`` [rank, n_vocab] (dflash.cpp:124-136; the tensor tells the kinds apart,
  common/speculative.cpp:2297-2300).
- the MTP sidecar (``mtp-*.gguf``, conversion/qwen.py:340-367): the target's architecture and
  block count, ``token_embd``, ``output_norm``, ``output`` and only the NextN block (no trunk:
  qwen35.cpp:36-37 makes the trunk optional then).

The targets are *bigram* models (as scripts/gpukit/pairs.py builds them): attention and FFN outputs
are zero, so the residual stream is the token's embedding and the greedy next token after ``t`` is
``nxt[t]`` on a random cycle of ordinary tokens, with a wide logit margin.  So greedy decoding is the
same token for token however the target batches its verification (plain or speculative), and an
answer never ends early.  The drafters are random: they draft (and are mostly rejected).

    python tests/helpers/tiny_drafters.py OUT_DIR [SOURCE.gguf]   # writes the files, prints them
"""

from __future__ import annotations

import mmap
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SOURCE_MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"  # the pinned model whose tokenizer is copied

# GGUF value and tensor types (gguf/constants.py: GGUFValueType, GGMLQuantizationType)
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_SCALAR_SIZE = {_U8: 1, _I8: 1, _U16: 2, _I16: 2, _U32: 4, _I32: 4, _F32: 4, _BOOL: 1, _U64: 8, _I64: 8, _F64: 8}
F32, F16, Q8_0, I64 = 0, 1, 8, 27
ALIGNMENT = 32
TOKEN_NORMAL = 1

N_EMBD = 32  # every model here: 2 heads of 16
N_HEAD = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 64
N_LAYER = 4  # target trunk layers
FULL_ATTENTION_INTERVAL = 2  # qwen35: layers 1 and 3 full attention, 0 and 2 gated delta net
SSM_CONV_KERNEL = 4
CYCLE = 1024  # ordinary tokens on the targets' bigram cycle
LOGIT = 40.0  # the right next token's logit; the others ~ N(0, LOGIT / sqrt(N_EMBD)) over CYCLE rows


# --- the tokenizer, copied as raw key-value bytes -------------------------------------------


@dataclass(frozen=True)
class Tokenizer:
    """Every ``tokenizer.*`` key-value pair of a GGUF header, as its encoded bytes."""

    raw: tuple[bytes, ...]
    n_tokens: int
    token_type: np.ndarray  # int32 per token

    @classmethod
    def from_gguf(cls, path: Path) -> Tokenizer:
        """Walk the header once (mmap: only the header's pages are read, about 0.2 s for Qwen)."""
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:4] != b"GGUF":
                raise ValueError(f"{path}: not a GGUF file")
            _version, _n_tensors, n_kv = struct.unpack_from("<IQQ", m, 4)
            pos = 24
            raw: list[bytes] = []
            n_tokens = 0
            token_type = np.zeros(0, dtype=np.int32)
            for _ in range(n_kv):
                start = pos
                (klen,) = struct.unpack_from("<Q", m, pos)
                key = m[pos + 8:pos + 8 + klen].decode()
                pos += 8 + klen
                (vtype,) = struct.unpack_from("<I", m, pos)
                pos += 4
                value_at = pos
                pos = _skip_value(m, pos, vtype)
                if not key.startswith("tokenizer."):
                    continue
                raw.append(bytes(m[start:pos]))
                if key == "tokenizer.ggml.tokens":
                    (n_tokens,) = struct.unpack_from("<Q", m, value_at + 4)
                elif key == "tokenizer.ggml.token_type":
                    (count,) = struct.unpack_from("<Q", m, value_at + 4)
                    token_type = np.frombuffer(m, dtype="<i4", count=count, offset=value_at + 12).copy()
        if not n_tokens:
            raise ValueError(f"{path}: no tokenizer.ggml.tokens")
        return cls(tuple(raw), n_tokens, token_type)

    def normal_ids(self) -> np.ndarray:
        if not len(self.token_type):
            return np.arange(self.n_tokens)
        return np.flatnonzero(self.token_type == TOKEN_NORMAL)


def _skip_value(m: mmap.mmap, pos: int, vtype: int) -> int:
    if vtype == _STR:
        (n,) = struct.unpack_from("<Q", m, pos)
        return pos + 8 + n
    if vtype == _ARR:
        etype, count = struct.unpack_from("<IQ", m, pos)
        pos += 12
        if etype == _STR:
            unpack = struct.Struct("<Q").unpack_from
            for _ in range(count):
                pos += 8 + unpack(m, pos)[0]
            return pos
        return pos + _SCALAR_SIZE[etype] * count
    return pos + _SCALAR_SIZE[vtype]


# --- a minimal GGUF writer ------------------------------------------------------------------


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


@dataclass
class GGUFFile:
    """Key-value pairs and tensors, written as GGUF v3 (alignment 32) in one pass."""

    arch: str
    kv: list[bytes] = field(default_factory=list)
    tensors: list[tuple[str, int, tuple[int, ...], bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.add("general.architecture", self.arch)

    def add(self, key: str, value: object) -> None:
        """A str, bool, int (u32), float (f32), or a list of strs, ints (i32) or bools."""
        head = _string(key)
        if isinstance(value, str):
            self.kv.append(head + struct.pack("<I", _STR) + _string(value))
        elif isinstance(value, bool):
            self.kv.append(head + struct.pack("<IB", _BOOL, value))
        elif isinstance(value, int):
            self.kv.append(head + struct.pack("<II", _U32, value))
        elif isinstance(value, float):
            self.kv.append(head + struct.pack("<If", _F32, value))
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            self.kv.append(head + struct.pack("<IIQ", _ARR, _STR, len(value)) + b"".join(map(_string, value)))
        elif isinstance(value, list) and value and all(isinstance(v, bool) for v in value):
            self.kv.append(head + struct.pack("<IIQ", _ARR, _BOOL, len(value)) + bytes(map(int, value)))
        elif isinstance(value, list):
            self.kv.append(head + struct.pack("<IIQ", _ARR, _I32, len(value)) + np.asarray(value, "<i4").tobytes())
        else:
            raise TypeError(f"{key}: cannot write {type(value).__name__}")

    def arch_keys(self, **keys: object) -> None:
        for k, v in keys.items():
            self.add(f"{self.arch}.{k.replace('__', '.')}", v)

    def tensor(self, name: str, data: np.ndarray, ne: tuple[int, ...] | None = None, *, qtype: int | None = None) -> None:
        """``data`` with numpy shape (ne[n-1], ..., ne[0]); F32 unless ``qtype`` (Q8_0, F16, I64)."""
        ne = ne or tuple(reversed(data.shape))
        if qtype == Q8_0:
            blob = _q8_0(np.asarray(data, dtype=np.float32))
        elif qtype == F16:
            blob = np.asarray(data, dtype="<f2").tobytes()
        elif qtype == I64:
            blob = np.asarray(data, dtype="<i8").tobytes()
        else:
            qtype, blob = F32, np.asarray(data, dtype="<f4").tobytes()
        self.tensors.append((name, qtype, ne, blob))

    def chunks(self, tokenizer: Tokenizer | None = None) -> Iterator[bytes]:
        """The file's bytes, in pieces: header, key-values (``tokenizer``'s last), tensor infos, data."""
        kv = self.kv + list(tokenizer.raw if tokenizer is not None else ())
        infos, offset = [], 0
        for name, qtype, ne, blob in self.tensors:
            infos.append(_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                         + struct.pack("<IQ", qtype, offset))
            offset += -(-len(blob) // ALIGNMENT) * ALIGNMENT
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(kv)) + b"".join(kv) + b"".join(infos)
        yield head + b"\0" * (-len(head) % ALIGNMENT)
        for _, _, _, blob in self.tensors:
            yield blob + b"\0" * (-len(blob) % ALIGNMENT)

    def write(self, path: Path, tokenizer: Tokenizer | None = None) -> Path:
        tmp = path.with_name(path.name + ".part")
        with tmp.open("wb") as f:
            f.writelines(self.chunks(tokenizer))
        tmp.replace(path)
        return path


def _q8_0(x: np.ndarray) -> bytes:
    """ggml's Q8_0: per 32 values an f16 scale and 32 int8 (rows a multiple of 32)."""
    blocks = x.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1) / 127.0
    q = np.round(blocks / np.where(d == 0, 1.0, d)[:, None]).astype(np.int8)
    out = np.empty(len(blocks), dtype=[("d", "<f2"), ("qs", "i1", (32,))])
    out["d"], out["qs"] = d.astype(np.float16), q
    return out.tobytes()


# --- the models -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyPair:
    """One kind's files: start llama-server with ``-m target [-md draft] --spec-type spec_type``."""

    spec_type: str
    target: Path
    draft: Path | None


class _Rng:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def w(self, *numpy_shape: int, scale: float = 0.2) -> np.ndarray:
        return (self.rng.standard_normal(numpy_shape, dtype=np.float32) * scale).astype(np.float32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _zeros(*numpy_shape: int) -> np.ndarray:
    return np.zeros(numpy_shape, dtype=np.float32)


def _common_keys(f: GGUFFile, name: str, n_layer: int, n_embd: int = N_EMBD) -> None:
    f.add("general.name", name)
    f.arch_keys(context_length=4096, embedding_length=n_embd, block_count=n_layer, feed_forward_length=N_FF,
                attention__head_count=N_HEAD, attention__head_count_kv=N_HEAD,
                attention__layer_norm_rms_epsilon=1e-6, rope__freq_base=1_000_000.0)


def _bigram(tok: Tokenizer, rng: _Rng, n_embd: int) -> tuple[np.ndarray, np.ndarray]:
    """(token_embd, output) of a bigram target: next(t) = the token after t on a random cycle."""
    ids = rng.rng.permutation(tok.normal_ids())[:CYCLE]
    emb = rng.rng.standard_normal((tok.n_tokens, n_embd), dtype=np.float32)
    out = np.zeros((tok.n_tokens, n_embd), dtype=np.float32)
    out[np.roll(ids, -1)] = emb[ids] * (LOGIT / n_embd)
    return emb, out


def _qwen_attention(f: GGUFFile, rng: _Rng, i: int, *, gated_q: bool, zero_out: bool) -> None:
    q_out = HEAD_DIM * N_HEAD * (2 if gated_q else 1)
    f.tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
    f.tensor(f"blk.{i}.attn_q.weight", rng.w(q_out, N_EMBD))
    f.tensor(f"blk.{i}.attn_k.weight", rng.w(HEAD_DIM * N_HEAD, N_EMBD))
    f.tensor(f"blk.{i}.attn_v.weight", rng.w(HEAD_DIM * N_HEAD, N_EMBD))
    f.tensor(f"blk.{i}.attn_output.weight", _zeros(N_EMBD, HEAD_DIM * N_HEAD) if zero_out
             else rng.w(N_EMBD, HEAD_DIM * N_HEAD))
    f.tensor(f"blk.{i}.attn_q_norm.weight", _ones(HEAD_DIM))
    f.tensor(f"blk.{i}.attn_k_norm.weight", _ones(HEAD_DIM))


def _ffn(f: GGUFFile, rng: _Rng, i: int, *, zero_out: bool, n_embd: int = N_EMBD) -> None:
    f.tensor(f"blk.{i}.ffn_gate.weight", rng.w(N_FF, n_embd))
    f.tensor(f"blk.{i}.ffn_up.weight", rng.w(N_FF, n_embd))
    f.tensor(f"blk.{i}.ffn_down.weight", _zeros(n_embd, N_FF) if zero_out else rng.w(n_embd, N_FF))


def write_qwen3_target(path: Path, tok: Tokenizer, *, seed: int) -> Path:
    """A bigram ``qwen3`` target of N_LAYER layers (EAGLE-3 and DFlash read its layers' inputs)."""
    rng = _Rng(seed)
    f = GGUFFile("qwen3")
    _common_keys(f, "tiny qwen3 bigram target (SpecChat tests)", N_LAYER)
    emb, out = _bigram(tok, rng, N_EMBD)
    f.tensor("token_embd.weight", emb, qtype=Q8_0)
    f.tensor("output_norm.weight", _ones(N_EMBD))
    f.tensor("output.weight", out, qtype=Q8_0)
    for i in range(N_LAYER):
        _qwen_attention(f, rng, i, gated_q=False, zero_out=True)
        f.tensor(f"blk.{i}.ffn_norm.weight", _ones(N_EMBD))
        _ffn(f, rng, i, zero_out=True)
    return f.write(path, tok)


def _qwen35_keys(f: GGUFFile, name: str, n_embd: int = N_EMBD) -> None:
    _common_keys(f, name, N_LAYER + 1, n_embd)
    f.arch_keys(nextn_predict_layers=1, attention__key_length=HEAD_DIM, attention__value_length=HEAD_DIM,
                rope__dimension_count=HEAD_DIM, rope__dimension_sections=[4, 2, 2, 0],
                full_attention_interval=FULL_ATTENTION_INTERVAL,
                ssm__conv_kernel=SSM_CONV_KERNEL, ssm__inner_size=n_embd, ssm__state_size=HEAD_DIM, ssm__time_step_rank=N_HEAD,
                ssm__group_count=N_HEAD)


def _qwen35_mtp_block(f: GGUFFile, rng: _Rng, n_embd: int = N_EMBD) -> None:
    i = N_LAYER  # the NextN block follows the trunk (qwen35.cpp:121-123)
    q_out = HEAD_DIM * N_HEAD * 2
    f.tensor(f"blk.{i}.attn_norm.weight", _ones(n_embd))
    f.tensor(f"blk.{i}.post_attention_norm.weight", _ones(n_embd))
    f.tensor(f"blk.{i}.attn_q.weight", rng.w(q_out, n_embd))
    f.tensor(f"blk.{i}.attn_k.weight", rng.w(HEAD_DIM * N_HEAD, n_embd))
    f.tensor(f"blk.{i}.attn_v.weight", rng.w(HEAD_DIM * N_HEAD, n_embd))
    f.tensor(f"blk.{i}.attn_output.weight", rng.w(n_embd, HEAD_DIM * N_HEAD))
    f.tensor(f"blk.{i}.attn_q_norm.weight", _ones(HEAD_DIM))
    f.tensor(f"blk.{i}.attn_k_norm.weight", _ones(HEAD_DIM))
    _ffn(f, rng, i, zero_out=False, n_embd=n_embd)
    f.tensor(f"blk.{i}.nextn.eh_proj.weight", rng.w(n_embd, 2 * n_embd))
    f.tensor(f"blk.{i}.nextn.enorm.weight", _ones(n_embd))
    f.tensor(f"blk.{i}.nextn.hnorm.weight", _ones(n_embd))


def write_qwen35_mtp_target(path: Path, tok: Tokenizer, *, seed: int) -> Path:
    """A bigram ``qwen35`` target with its own MTP head (an MTP-capable target: ``--spec-type draft-mtp``
    with no draft file) - the shape of Qwen3.6-27B converted with its MTP block."""
    rng = _Rng(seed)
    f = GGUFFile("qwen35")
    _qwen35_keys(f, "tiny qwen35 bigram target with an MTP block (SpecChat tests)")
    emb, out = _bigram(tok, rng, N_EMBD)
    f.tensor("token_embd.weight", emb, qtype=Q8_0)
    f.tensor("output_norm.weight", _ones(N_EMBD))
    f.tensor("output.weight", out, qtype=Q8_0)
    for i in range(N_LAYER):
        f.tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
        f.tensor(f"blk.{i}.post_attention_norm.weight", _ones(N_EMBD))
        if (i + 1) % FULL_ATTENTION_INTERVAL:
            _gated_delta_net(f, rng, i)
        else:
            _qwen35_attention(f, rng, i)
        _ffn(f, rng, i, zero_out=True)
    _qwen35_mtp_block(f, rng)
    return f.write(path, tok)


def _qwen35_attention(f: GGUFFile, rng: _Rng, i: int) -> None:
    """A full-attention trunk layer: q carries the output gate (2x wide), output zero (bigram)."""
    f.tensor(f"blk.{i}.attn_q.weight", rng.w(HEAD_DIM * N_HEAD * 2, N_EMBD))
    f.tensor(f"blk.{i}.attn_k.weight", rng.w(HEAD_DIM * N_HEAD, N_EMBD))
    f.tensor(f"blk.{i}.attn_v.weight", rng.w(HEAD_DIM * N_HEAD, N_EMBD))
    f.tensor(f"blk.{i}.attn_output.weight", _zeros(N_EMBD, HEAD_DIM * N_HEAD))
    f.tensor(f"blk.{i}.attn_q_norm.weight", _ones(HEAD_DIM))
    f.tensor(f"blk.{i}.attn_k_norm.weight", _ones(HEAD_DIM))


def _gated_delta_net(f: GGUFFile, rng: _Rng, i: int) -> None:
    """A linear-attention trunk layer (qwen35.cpp:51-89; ssm sizes from :func:`_qwen35_keys`: key and value
    heads of HEAD_DIM, N_HEAD of each); ``ssm_out`` zero (bigram).  A hybrid qwen35 needs at least one:
    with none its recurrent cache has no buffer and the first decode aborts (ggml-backend.cpp:205)."""
    key_dim = value_dim = HEAD_DIM * N_HEAD
    conv_dim = 2 * key_dim + value_dim
    f.tensor(f"blk.{i}.attn_qkv.weight", rng.w(conv_dim, N_EMBD))
    f.tensor(f"blk.{i}.attn_gate.weight", rng.w(value_dim, N_EMBD))
    f.tensor(f"blk.{i}.ssm_conv1d.weight", rng.w(conv_dim, SSM_CONV_KERNEL))
    f.tensor(f"blk.{i}.ssm_dt.bias", _zeros(N_HEAD))
    f.tensor(f"blk.{i}.ssm_a", -_ones(N_HEAD))
    f.tensor(f"blk.{i}.ssm_beta.weight", rng.w(N_HEAD, N_EMBD))
    f.tensor(f"blk.{i}.ssm_alpha.weight", rng.w(N_HEAD, N_EMBD))
    f.tensor(f"blk.{i}.ssm_norm.weight", _ones(HEAD_DIM))
    f.tensor(f"blk.{i}.ssm_out.weight", _zeros(N_EMBD, value_dim))


def write_mtp_sidecar(path: Path, tok: Tokenizer, *, seed: int, n_embd: int = N_EMBD) -> Path:
    """The MTP head alone as ``mtp-*.gguf`` (conversion/qwen.py ``--mtp-only``): the target's architecture
    and block count, embeddings, final norm, LM head and the NextN block; no trunk layers."""
    rng = _Rng(seed)
    f = GGUFFile("qwen35")
    _qwen35_keys(f, "tiny qwen35 MTP head (SpecChat tests)", n_embd)
    f.tensor("token_embd.weight", rng.w(tok.n_tokens, n_embd, scale=1.0), qtype=Q8_0)
    f.tensor("output_norm.weight", _ones(n_embd))
    f.tensor("output.weight", rng.w(tok.n_tokens, n_embd, scale=1.0), qtype=Q8_0)
    _qwen35_mtp_block(f, rng, n_embd)
    return f.write(path, tok)


def write_eagle3(path: Path, tok: Tokenizer, *, seed: int, target_layers: Iterable[int] = (1, 2, 3),
                 target_hidden: int = N_EMBD) -> Path:
    """An EAGLE-3 head for the qwen3 target (eagle3.cpp): one decoder layer over [embedding; fused
    features], ``fc`` fusing the 3 target layers' inputs; embeddings and LM head are the target's."""
    rng = _Rng(seed)
    layers = list(target_layers)
    f = GGUFFile("eagle3")
    _common_keys(f, "tiny EAGLE-3 head (SpecChat tests)", 1)
    f.arch_keys(target_layers=layers, target_hidden_size=target_hidden, norm_before_residual=False)
    f.tensor("fc.weight", rng.w(N_EMBD, len(layers) * target_hidden))
    f.tensor("output_norm.weight", _ones(N_EMBD))
    f.tensor("blk.0.attn_norm.weight", _ones(N_EMBD))
    f.tensor("blk.0.attn_norm_2.weight", _ones(N_EMBD))
    f.tensor("blk.0.attn_q.weight", rng.w(HEAD_DIM * N_HEAD, 2 * N_EMBD))
    f.tensor("blk.0.attn_k.weight", rng.w(HEAD_DIM * N_HEAD, 2 * N_EMBD))
    f.tensor("blk.0.attn_v.weight", rng.w(HEAD_DIM * N_HEAD, 2 * N_EMBD))
    f.tensor("blk.0.attn_output.weight", rng.w(N_EMBD, HEAD_DIM * N_HEAD))
    f.tensor("blk.0.ffn_norm.weight", _ones(N_EMBD))
    _ffn(f, rng, 0, zero_out=False)
    return f.write(path, tok)


MARKOV_RANK = 32


def write_dflash(path: Path, tok: Tokenizer, *, seed: int, dspark: bool = False,
                 target_layers: Iterable[int] = (1, 3), block_size: int = 8) -> Path:
    """A DFlash drafter (dflash.cpp), or with ``dspark`` a DSpark one (plus the Markov head): one
    non-causal layer over a noise block, the target layers' inputs injected into its KV cache through
    ``fc``; embeddings and LM head are the target's."""
    rng = _Rng(seed)
    layers = list(target_layers)
    f = GGUFFile("dflash")
    _common_keys(f, f"tiny {'DSpark' if dspark else 'DFlash'} drafter (SpecChat tests)", 1)
    f.arch_keys(target_layers=layers, block_size=block_size)
    if dspark:
        f.arch_keys(sample_from_anchor=True, has_confidence_head=False)
    f.add("tokenizer.ggml.mask_token_id", tok.n_tokens - 1)
    f.tensor("fc.weight", rng.w(N_EMBD, len(layers) * N_EMBD))
    f.tensor("enc.output_norm.weight", _ones(N_EMBD))
    f.tensor("output_norm.weight", _ones(N_EMBD))
    if dspark:
        f.tensor("markov_w1.weight", rng.w(tok.n_tokens, MARKOV_RANK), qtype=Q8_0)
        f.tensor("markov_w2.weight", rng.w(tok.n_tokens, MARKOV_RANK), qtype=Q8_0)
    _qwen_attention(f, rng, 0, gated_q=False, zero_out=False)
    f.tensor("blk.0.ffn_norm.weight", _ones(N_EMBD))
    _ffn(f, rng, 0, zero_out=False)
    return f.write(path, tok)


# --- all of them ------------------------------------------------------------------------------

KINDS = ("draft-eagle3", "draft-mtp", "draft-mtp-sidecar", "draft-dflash", "draft-dspark")


def write_all(out: Path, source: Path, *, seed: int = 0) -> dict[str, TinyPair]:
    """Every kind's target and drafter under ``out`` (about 75 MB, 1-2 s); keyed by :data:`KINDS`
    (``draft-mtp``: the MTP-capable target alone; ``draft-mtp-sidecar``: a target and ``mtp-*.gguf``)."""
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_gguf(source)
    qwen3 = write_qwen3_target(out / "tiny-qwen3.gguf", tok, seed=seed)
    qwen35 = write_qwen35_mtp_target(out / "tiny-qwen35.gguf", tok, seed=seed + 1)
    return {
        "draft-eagle3": TinyPair("draft-eagle3", qwen3, write_eagle3(out / "tiny-eagle3.gguf", tok, seed=seed + 2)),
        "draft-mtp": TinyPair("draft-mtp", qwen35, None),
        "draft-mtp-sidecar": TinyPair("draft-mtp", qwen35,
                                      write_mtp_sidecar(out / "mtp-tiny-qwen35.gguf", tok, seed=seed + 3)),
        "draft-dflash": TinyPair("draft-dflash", qwen3, write_dflash(out / "tiny-dflash.gguf", tok, seed=seed + 4)),
        "draft-dspark": TinyPair("draft-dspark", qwen3,
                                 write_dflash(out / "tiny-dspark.gguf", tok, seed=seed + 5, dspark=True)),
    }


def _files(pairs: dict[str, TinyPair]) -> Iterator[str]:
    for name, p in pairs.items():
        yield f"{name}: -m {p.target}" + (f" -md {p.draft}" if p.draft else "") + f" --spec-type {p.spec_type}"


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.rsplit("\n\n", 1)[-1])
    src = Path(sys.argv[2]) if len(sys.argv) == 3 else \
        Path.home() / ".cache" / "specchat" / "test-models" / SOURCE_MODEL
    print("\n".join(_files(write_all(Path(sys.argv[1]), src))))
