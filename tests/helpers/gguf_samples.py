"""GGUF bytes for the header tests: sound files written by the gguf package, and hand-built
headers whose every field the test chooses (the hostile ones)."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

TOKENS = ("<unk>", "<s>", "</s>", "a", "b", "c", "ab")


def write_gguf(path: Path, *, arch: str = "llama", tokens: Iterable[str] | None = TOKENS,
               extra: Mapping[str, tuple[object, GGUFValueType] | tuple[object, GGUFValueType, GGUFValueType] | None]
               | None = None, n_tensors: int = 2,
               quantized: bool = False, alignment: int | None = None) -> Path:
    """A complete small GGUF file written by gguf.GGUFWriter: a tokenizer, a few hyper-parameters,
    ``n_tensors`` F32 tensors (and a Q8_0 one when ``quantized``).  ``extra`` keys, as (value, type),
    (value, ARRAY, element type) replace or add to the standard ones; None removes one."""
    U32, BOOL, STR, ARRAY = GGUFValueType.UINT32, GGUFValueType.BOOL, GGUFValueType.STRING, GGUFValueType.ARRAY
    keys: dict[str, tuple[object, GGUFValueType] | tuple[object, GGUFValueType, GGUFValueType] | None] = {
        f"{arch}.context_length": (128, U32), f"{arch}.block_count": (2, U32),
        f"{arch}.embedding_length": (64, U32), f"{arch}.attention.head_count": (4, U32),
    }
    if tokens is not None:
        keys |= {"tokenizer.ggml.model": ("llama", STR), "tokenizer.ggml.tokens": (list(tokens), ARRAY),
                 "tokenizer.ggml.bos_token_id": (1, U32), "tokenizer.ggml.eos_token_id": (2, U32),
                 "tokenizer.ggml.add_bos_token": (True, BOOL)}
    keys |= dict(extra or {})
    w = gguf.GGUFWriter(str(path), arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, entry in keys.items():
        if entry is None:
            continue
        value, vtype = entry[0], entry[1]
        if len(entry) == 3:
            w.add_key_value(key, value, vtype, sub_type=entry[2])
        elif vtype == ARRAY:
            w.add_array(key, value)  # type: ignore[arg-type]
        else:
            w.add_key_value(key, value, vtype)
    for i in range(n_tensors):
        w.add_tensor(f"blk.{i % 2}.t{i}", np.arange(64 * (i + 1), dtype=np.float32))
    if quantized:  # two rows of one Q8_0 block (34 bytes) each: a 32 x 2 tensor
        w.add_tensor("blk.0.q", np.zeros((2, 34), dtype=np.uint8), raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_bytes(**kwargs: object) -> bytes:
    """:func:`write_gguf`'s file as bytes."""
    with tempfile.TemporaryDirectory() as d:
        return write_gguf(Path(d) / "x.gguf", **kwargs).read_bytes()  # type: ignore[arg-type]


# -- hand-built headers --------------------------------------------------------------------------


def gstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    """One key-value pair: the key, the type and the encoded value as given."""
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_u32(key: str, value: int) -> bytes:
    return kv(key, GGUFValueType.UINT32, struct.pack("<I", value))


def kv_str(key: str, value: str) -> bytes:
    return kv(key, GGUFValueType.STRING, gstr(value))


def kv_array(key: str, itype: int, count: int, payload: bytes) -> bytes:
    return kv(key, GGUFValueType.ARRAY, struct.pack("<IQ", itype, count) + payload)


def tensor(name: str | bytes, shape: Iterable[int], ttype: int = GGMLQuantizationType.F32, offset: int = 0) -> bytes:
    dims = list(shape)
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack(
        "<IQ", ttype, offset)


def header(kvs: Iterable[bytes] = (), tensors: Iterable[bytes] = (), *, version: int = 3,
           n_kv: int | None = None, n_tensors: int | None = None) -> bytes:
    """A header of the given pairs and tensor entries; the counts can be overridden to lie."""
    kvs, tensors = list(kvs), list(tensors)
    counts = struct.pack("<IIQQ", gguf.GGUF_MAGIC, version, len(tensors) if n_tensors is None else n_tensors,
                         len(kvs) if n_kv is None else n_kv)
    return counts + b"".join(kvs) + b"".join(tensors)


def with_data(head: bytes, data_bytes: int, alignment: int = 32) -> bytes:
    """``head`` padded to the alignment and followed by ``data_bytes`` zero bytes of tensor data."""
    pad = -len(head) % alignment
    return head + b"\0" * (pad + data_bytes)


def write_tiny(path, tokens=("<unk>", "<s>", "</s>", "a", "b", "c", "ab"), n_tensors=2):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(list(tokens))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_context_length(128)
    for i in range(n_tensors):
        w.add_tensor(f"t{i}", np.arange(64 * (i + 1), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

