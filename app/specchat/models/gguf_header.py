"""Read a GGUF file's header (metadata and tensor table) from any byte stream, safely.

Why not ``gguf.GGUFReader``: it memory-maps the whole file and builds a numpy
view per array element; on the 0.5B Qwen draft (151,936 tokens + 151,387
merges) opening it took 18.8 s here, and it cannot read a remote header over
HTTP range requests.  This reader walks the header once, takes the value types,
the magic and the quantisation block sizes from the ``gguf`` package, and reads
from a local file or any object with ``read(n)`` (see :mod:`specchat.models.remote`).

Hostile input.  Every malformed or hostile header ends as one :class:`GGUFError`
with a one-line message; nothing else leaves the reader.  The checks hold by
construction, before anything is allocated:

- every length and count is checked against the bytes left (the file size when
  known, passed as ``size``) and against :data:`MAX_HEADER_BYTES` for the whole
  header, so a claimed length never turns into a big allocation or a long loop;
- an array of ``n`` elements needs ``n`` times its smallest encoded element (1 byte
  for u8 and bool, 8 for a string's length, ...) before it is read;
- arrays are kept compact: numbers as one read-only numpy array over the raw bytes
  (:class:`NumberArray`), strings as one bytes blob plus offsets, decoded on access
  (:class:`StringArray`): the 151,936 Qwen tokens cost 3.8 MB, not a Python list;
- strings: a key at most :data:`MAX_KEY_BYTES`, a value at most :data:`MAX_STRING_BYTES`
  (chat templates are tens of KB).  Invalid UTF-8 is *replaced* (U+FFFD), not refused:
  llama.cpp keeps strings as raw bytes and loads such files, and we only show and
  compare them (token text is compared as raw bytes, so nothing is lost there).

The checks mirrored from llama.cpp's ``gguf_init_from_reader`` (ggml/src/gguf.cpp),
which parses the file natively after us, so we refuse at least what it refuses:

- magic ``GGUF``; version 2 or 3 (0, 1, > 3 and byte-swapped versions refused);
- tensor and key-value counts non-negative as int64 (here also at most 65,536 each);
- string lengths within the bytes left; keys non-empty and unique;
- value types known; arrays of arrays refused (gguf.cpp treats an array's element
  type ARRAY as invalid, so no nesting and no recursion);
- array element counts at most 2^30 and within the bytes left;
- ``general.alignment`` of type u32, a non-zero power of two (here also at most 1 MiB);
- tensor names shorter than GGML_MAX_NAME (64 bytes) and unique;
- at most GGML_MAX_DIMS (4) dimensions, none negative (0 is allowed, as in gguf.cpp),
  element count and byte size representable (< 2^63 elements, < 2^64 bytes);
- tensor type a known ggml type with a block size, first dimension a multiple of it;
- tensor offsets exactly where gguf.cpp expects them: each at the running sum of the
  previous tensors' sizes padded to the alignment (so aligned and non-overlapping);
- the data section (header end padded to the alignment) inside the file.

:func:`validate_file` adds llama.cpp's model-loader check that every tensor's data
lies inside the file.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

from specchat.errors import UserError

# metadata arrays we never need (the merges are 151,387 strings in the Qwen files): walked, not kept
SKIPPED_ARRAYS = frozenset({"tokenizer.ggml.merges"})

# the real headers here are 1.8 to 6.5 MB (Gemma 3's 262,144 tokens); reading one costs up to
# about 3 times its size in memory (buffer, blob, offsets), so this also bounds that
MAX_HEADER_BYTES = 128 << 20
MAX_KEY_BYTES = 64 << 10
MAX_STRING_BYTES = 16 << 20
MAX_TENSOR_NAME_BYTES = 63  # GGML_MAX_NAME (64) with its terminating NUL
MAX_ARRAY_ELEMENTS = 1 << 30  # GGUF_MAX_ARRAY_ELEMENTS in gguf.cpp
MAX_KV = 1 << 16  # real files have 20 to 60 keys
MAX_TENSORS = 1 << 16  # real files have hundreds; large MoE models a few thousand
MAX_ALIGNMENT = 1 << 20
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
MAX_ARCH_NAME = 64
INT64_MAX = (1 << 63) - 1
ALIGNMENT_KEY = "general.alignment"
TOKENS_KEY = "tokenizer.ggml.tokens"

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# numpy dtypes of the numeric GGUF types (bool kept as u8: gguf.cpp reads any non-zero byte as true)
_DTYPE = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "<u1", GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}
_SCALAR = {
    GGUFValueType.UINT8: struct.Struct("<B"), GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"), GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"), GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"), GGUFValueType.BOOL: struct.Struct("<B"),
    GGUFValueType.UINT64: struct.Struct("<Q"), GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
_TYPE_NAME = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16", GGUFValueType.INT16: "i16",
    GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32", GGUFValueType.FLOAT32: "f32",
    GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "str", GGUFValueType.ARRAY: "array",
    GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64", GGUFValueType.FLOAT64: "f64",
}
_INTEGER_TYPES = frozenset(_DTYPE) - {GGUFValueType.FLOAT32, GGUFValueType.FLOAT64, GGUFValueType.BOOL}
_VALUE_TYPES = {int(t): t for t in GGUFValueType}
_TENSOR_TYPES = {int(t): t for t in GGMLQuantizationType if GGML_QUANT_SIZES.get(t, (0, 0))[0] > 0}


class GGUFError(UserError, ValueError):
    """The file is not a readable GGUF file; the message is one line for the user."""


class ByteSource(Protocol):
    """What the reader needs of a stream: ``read(n)``, up to ``n`` bytes, b"" at the end
    (a binary file, or a :class:`specchat.models.remote.RangeReader`)."""

    def read(self, n: int, /) -> bytes: ...


# -- compact array values ---------------------------------------------------------------------


class NumberArray(Sequence[Any]):
    """A numeric metadata array: one read-only numpy array over the file's bytes.

    Items come back as Python ``int``, ``float`` or ``bool``; ``==`` compares with another
    NumberArray or a list/tuple and gives one bool (so a metadata dict compares as usual).
    """

    __slots__ = ("type", "_raw", "_values")

    def __init__(self, vtype: GGUFValueType, raw: bytes) -> None:
        self.type = vtype
        self._raw = raw
        self._values = np.frombuffer(raw, dtype=_DTYPE[vtype])  # over bytes: read-only, no copy

    @property
    def is_integer(self) -> bool:
        return self.type in _INTEGER_TYPES

    def numpy(self) -> np.ndarray:
        """The values as a read-only numpy array (no copy)."""
        return self._values

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return self.tolist()[i] if len(self) < 4096 else [self[j] for j in range(*i.indices(len(self)))]
        v = self._values[i].item()
        return bool(v) if self.type == GGUFValueType.BOOL else v

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def tolist(self) -> list[Any]:
        values = self._values.tolist()
        return [bool(v) for v in values] if self.type == GGUFValueType.BOOL else values

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NumberArray):
            return self.type == other.type and self._raw == other._raw
        if isinstance(other, list | tuple):
            return self.tolist() == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.type, self._raw))

    def __repr__(self) -> str:
        return f"<array of {len(self):,} {_TYPE_NAME[self.type]}>"


class StringArray(Sequence[str]):
    """A string metadata array (the token list), kept as the file encodes it: one bytes blob of
    (u64 length, bytes) entries and the offset of each entry, decoded on access (invalid UTF-8
    replaced).  ``raw(i)`` gives the bytes; :meth:`first_difference` compares two arrays as
    bytes, without decoding.  Reading it copies no string: the 151,936 Qwen tokens are one
    2.6 MB blob and 1.2 MB of offsets."""

    __slots__ = ("_blob", "_offs")

    def __init__(self, blob: bytes = b"", offs: np.ndarray | None = None) -> None:
        self._blob = blob
        # string i is blob[offs[i] + 8 : offs[i + 1]] (after its 8-byte length); offs[-1] == len(blob)
        self._offs = offs if offs is not None else np.zeros(1, dtype=np.uint64)

    @classmethod
    def of(cls, strings: Sequence[str | bytes]) -> StringArray:
        """A StringArray of ``strings`` (for tests and callers that build one)."""
        raw = [s.encode() if isinstance(s, str) else bytes(s) for s in strings]
        offs = np.zeros(len(raw) + 1, dtype=np.uint64)
        offs[1:] = np.cumsum([8 + len(r) for r in raw], dtype=np.uint64)
        return cls(b"".join(_U64.pack(len(r)) + r for r in raw), offs)

    def __len__(self) -> int:
        return len(self._offs) - 1

    def raw(self, i: int) -> bytes:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        i %= n
        return self._blob[int(self._offs[i]) + 8 : int(self._offs[i + 1])]

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw(i).decode("utf-8", errors="replace")

    def __iter__(self) -> Iterator[str]:
        blob, offs = self._blob, self._offs.tolist()
        for a, b in zip(offs, offs[1:], strict=False):
            yield blob[a + 8 : b].decode("utf-8", errors="replace")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringArray):
            return self._blob == other._blob and np.array_equal(self._offs, other._offs)
        if isinstance(other, list | tuple):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._blob)

    def __repr__(self) -> str:
        return f"<array of {len(self):,} strings>"

    def first_difference(self, other: StringArray, start: int, stop: int) -> int | None:
        """The first id in ``start..stop-1`` whose bytes differ, or None.  The equal case (the one
        that matters: a compatible pair) is two numpy comparisons and one bytes comparison."""
        stop = min(stop, len(self), len(other))
        if start >= stop:
            return None
        a, b = self._offs, other._offs
        a0, b0 = int(a[start]), int(b[start])
        if (np.array_equal(a[start : stop + 1] - a0, b[start : stop + 1] - b0)
                and self._blob[a0 : int(a[stop])] == other._blob[b0 : int(b[stop])]):
            return None
        return next(i for i in range(start, stop) if self.raw(i) != other.raw(i))


@dataclass(frozen=True, slots=True)
class SkippedArray:
    """An array in :data:`SKIPPED_ARRAYS`: checked and walked, only its length kept."""

    type: GGUFValueType
    count: int

    def __len__(self) -> int:
        return self.count


# -- the header ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type: int
    offset: int  # relative to the data section

    @property
    def n_bytes(self) -> int:
        ttype = _TENSOR_TYPES.get(self.type)
        if ttype is None:
            raise GGUFError(f"tensor '{self.name}' has unknown type {self.type}")
        block, size = GGML_QUANT_SIZES[ttype]
        return math.prod(self.shape) // block * size


def _show(value: object) -> str:
    """A metadata value in an error message: short, one line."""
    if isinstance(value, str):
        return repr(value[:40] + ("…" if len(value) > 40 else ""))
    if isinstance(value, NumberArray | StringArray | SkippedArray):
        return "an array" if isinstance(value, SkippedArray) else repr(value).strip("<>")
    return f"{value!r:.40}"


@dataclass(slots=True)
class GGUFHeader:
    version: int
    metadata: dict[str, object]
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0  # absolute offset of the tensor data section
    header_bytes: int = 0  # bytes read to get here
    alignment: int = DEFAULT_ALIGNMENT
    source: str = ""  # the file's name, put before the typed accessors' errors

    def get(self, key: str, default: object = None) -> object:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        """``general.architecture``, or "unknown" when absent or not a short name (llama.cpp
        knows architectures by names of a few letters; the name prefixes the keys looked up)."""
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) and 0 < len(arch) <= MAX_ARCH_NAME else "unknown"

    # -- typed accessors: a value of the wrong type or out of range is a GGUFError naming the key

    def _bad(self, key: str, value: object, expected: str) -> GGUFError:
        where = f"{self.source}: " if self.source else ""
        return GGUFError(f"{where}{key:.100} is {_show(value)}, expected {expected}")

    @overload
    def get_int(self, key: str, default: int, *, lo: int = ..., hi: int = ...) -> int: ...
    @overload
    def get_int(self, key: str, default: None = None, *, lo: int = ..., hi: int = ...) -> int | None: ...
    def get_int(self, key: str, default: int | None = None, *, lo: int = -INT64_MAX - 1,
                hi: int = (1 << 64) - 1) -> int | None:
        """An integer in ``lo..hi``; ``default`` when the key is absent."""
        v = self.metadata.get(key)
        if v is None:
            return default
        if not isinstance(v, int) or isinstance(v, bool):
            raise self._bad(key, v, "a whole number")
        if not lo <= v <= hi:
            raise self._bad(key, v, f"a whole number from {lo:,} to {hi:,}")
        return v

    def arch_int(self, key: str, default: int, *, lo: int = 0, hi: int = 1 << 20) -> int:
        """``<architecture>.<key>`` as an integer in ``lo..hi``.  A per-layer array (some hybrid
        models give head counts per layer) gives its largest value, an empty one ``default``."""
        full = f"{self.architecture}.{key}"
        v = self.metadata.get(full)
        if isinstance(v, NumberArray):
            if not v.is_integer:
                raise self._bad(full, v, "a whole number or an array of them")
            if not len(v):
                return default
            top = int(v.numpy().max())
            if not lo <= top <= hi or int(v.numpy().min()) < lo:
                raise self._bad(full, v, f"whole numbers from {lo:,} to {hi:,}")
            return top
        return self.get_int(full, default, lo=lo, hi=hi)

    @overload
    def get_float(self, key: str, default: float) -> float: ...
    @overload
    def get_float(self, key: str, default: None = None) -> float | None: ...
    def get_float(self, key: str, default: float | None = None) -> float | None:
        """A finite number (an integer counts); ``default`` when absent."""
        v = self.metadata.get(key)
        if v is None:
            return default
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise self._bad(key, v, "a finite number")
        return float(v)

    @overload
    def get_str(self, key: str, default: str, max_len: int = ...) -> str: ...
    @overload
    def get_str(self, key: str, default: None = None, max_len: int = ...) -> str | None: ...
    def get_str(self, key: str, default: str | None = None, max_len: int = MAX_STRING_BYTES) -> str | None:
        v = self.metadata.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self._bad(key, v, "text")
        if len(v) > max_len:
            raise self._bad(key, v, f"text of at most {max_len:,} characters")
        return v

    @overload
    def get_bool(self, key: str, default: bool) -> bool: ...
    @overload
    def get_bool(self, key: str, default: None = None) -> bool | None: ...
    def get_bool(self, key: str, default: bool | None = None) -> bool | None:
        v = self.metadata.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._bad(key, v, "true or false")
        return v

    def get_tokens(self) -> StringArray:
        """``tokenizer.ggml.tokens``; an empty array when the file has no token list."""
        v = self.metadata.get(TOKENS_KEY)
        if v is None:
            return StringArray()
        if not isinstance(v, StringArray):
            raise self._bad(TOKENS_KEY, v, "an array of strings")
        return v

    # -- the tensor data

    @property
    def tensor_data_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def expected_file_size(self) -> int:
        """Smallest size a complete file can have: data offset + the end of the last tensor."""
        if not self.tensors:
            return self.data_offset
        last = max(self.tensors, key=lambda t: t.offset)
        return self.data_offset + last.offset + last.n_bytes


# -- the reader -------------------------------------------------------------------------------


class _Stream:
    """Buffered forward reader that knows how far it may go.

    ``limit``: the bytes the header may span (the file size when known, never more than
    MAX_HEADER_BYTES).  Every read is checked against it first, so a hostile length fails
    before anything is allocated; a short read (a stream without a known size, or a file
    that shrank) fails the same way.
    """

    def __init__(self, raw: ByteSource, *, size: int | None, chunk: int = 1 << 20) -> None:
        self.raw, self.chunk, self.size = raw, chunk, size
        self.limit = MAX_HEADER_BYTES if size is None else min(size, MAX_HEADER_BYTES)
        self.buf, self.pos, self.base = b"", 0, 0  # base: file offset of buf[0]

    @property
    def consumed(self) -> int:
        return self.base + self.pos

    def left(self) -> int:
        return self.limit - self.consumed

    def _past_limit(self, n: int) -> GGUFError:
        if self.size is not None and self.consumed + n > self.size:
            return GGUFError("file ends inside the GGUF header (truncated?)")
        return GGUFError(f"GGUF header larger than {MAX_HEADER_BYTES >> 20} MiB (corrupt?)")

    def need(self, n: int) -> None:
        """Make ``n`` bytes available at ``pos``."""
        if n > self.left():
            raise self._past_limit(n)
        have = len(self.buf) - self.pos
        if have >= n:
            return
        parts = [self.buf[self.pos :]]
        while have < n:
            # big values come in pieces of at most 8 MiB, joined once: peak memory twice the value
            more = self.raw.read(min(max(n - have, self.chunk), 8 << 20))
            if not more:
                raise GGUFError("file ends inside the GGUF header (truncated?)")
            parts.append(more)
            have += len(more)
        self.base += self.pos
        self.buf, self.pos = b"".join(parts), 0

    def take(self, n: int) -> bytes:
        if len(self.buf) - self.pos >= n:  # the common case: a few bytes from the buffer
            out = self.buf[self.pos : self.pos + n]
            self.pos += n
            return out
        self.need(n)
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        if len(self.buf) - self.pos < 4:
            self.need(4)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self) -> int:
        if len(self.buf) - self.pos < 8:
            self.need(8)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def scalar(self, vtype: GGUFValueType) -> object:
        fmt = _SCALAR[vtype]
        if len(self.buf) - self.pos < fmt.size:
            self.need(fmt.size)
        (v,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return v != 0 if vtype == GGUFValueType.BOOL else v

    def string_bytes(self, max_len: int, what: str) -> bytes:
        n = self.u64()
        if n > max_len:
            raise GGUFError(f"corrupt GGUF header: {what} of {n:,} bytes (at most {max_len:,})")
        return self.take(n)

    def string(self, max_len: int, what: str) -> str:
        return self.string_bytes(max_len, what).decode("utf-8", errors="replace")

    def strings(self, count: int, keep: bool, what: str) -> StringArray | None:
        """``count`` strings as one StringArray, or walked and dropped.  The loop is inlined
        (local buffer and position) because the token list and merges are 300,000 strings,
        and it copies no string: the array keeps the encoded region whole (one copy per
        buffer refill)."""
        offs = array("Q") if keep else None
        parts: list[bytes] = []
        done = 0  # bytes of the region already in parts
        unpack, limit = _U64.unpack_from, self.limit
        buf, pos = self.buf, self.pos
        end, start = len(buf), pos  # start: where the region's part in this buffer begins
        for _ in range(count):
            if end - pos < 8:
                done, start = self._refill(parts, keep, done, start, pos, 8)
                buf, pos, end = self.buf, self.pos, len(self.buf)
            if offs is not None:
                offs.append(done + pos - start)
            (n,) = unpack(buf, pos)
            pos += 8
            if n > MAX_STRING_BYTES or self.base + pos + n > limit:
                self.pos = pos
                if n > MAX_STRING_BYTES:
                    raise GGUFError(f"corrupt GGUF header: a string of {n:,} bytes in {what}")
                raise self._past_limit(n)
            if end - pos < n:
                done, start = self._refill(parts, keep, done, start, pos, n)
                buf, pos, end = self.buf, self.pos, len(self.buf)
            pos += n
        self.pos = pos
        if offs is None:
            return None
        parts.append(buf[start:pos])
        blob = b"".join(parts)
        offs.append(len(blob))
        return StringArray(blob, np.frombuffer(offs, dtype=np.uint64))  # no copy: the array stays its base

    def _refill(self, parts: list[bytes], keep: bool, done: int, start: int, pos: int, n: int) -> tuple[int, int]:
        """:meth:`need` inside :meth:`strings`: the region read so far goes to ``parts`` first."""
        if keep:
            parts.append(self.buf[start:pos])
            done += pos - start
        self.pos = pos
        self.need(n)
        return done, self.pos


def _value_type(code: int, key: str) -> GGUFValueType:
    vt = _VALUE_TYPES.get(code)
    if vt is None:
        raise GGUFError(f"corrupt GGUF header: key '{key:.60}' has unknown value type {code}")
    return vt


def _array(s: _Stream, key: str) -> object:
    itype = _value_type(s.u32(), key)
    count = s.u64()
    if itype == GGUFValueType.ARRAY:  # gguf.cpp: an array's element type ARRAY is invalid
        raise GGUFError(f"corrupt GGUF header: key '{key:.60}' is an array of arrays")
    min_size = 8 if itype == GGUFValueType.STRING else _SCALAR[itype].size
    if count > MAX_ARRAY_ELEMENTS or count * min_size > s.left():
        raise GGUFError(f"corrupt GGUF header: key '{key:.60}' claims {count:,} elements, more than the file holds")
    skip = key in SKIPPED_ARRAYS
    if itype == GGUFValueType.STRING:
        kept = s.strings(count, keep=not skip, what=f"key '{key:.60}'")
        return SkippedArray(itype, count) if kept is None else kept
    raw = s.take(count * min_size)
    return SkippedArray(itype, count) if skip else NumberArray(itype, raw)


def _metadata(s: _Stream, n_kv: int) -> dict[str, object]:
    meta: dict[str, object] = {}
    for i in range(n_kv):
        key = s.string(MAX_KEY_BYTES, f"key {i}")
        if not key:
            raise GGUFError(f"corrupt GGUF header: key {i} is empty")
        if key in meta:
            raise GGUFError(f"corrupt GGUF header: duplicate key '{key:.60}'")
        vt = _value_type(s.u32(), key)
        if key == ALIGNMENT_KEY and vt != GGUFValueType.UINT32:  # gguf.cpp requires u32
            raise GGUFError(f"corrupt GGUF header: {ALIGNMENT_KEY} is of type {_TYPE_NAME[vt]}, not u32")
        if vt == GGUFValueType.STRING:
            meta[key] = s.string(MAX_STRING_BYTES, f"the value of '{key:.60}'")
        elif vt == GGUFValueType.ARRAY:
            meta[key] = _array(s, key)
        else:
            meta[key] = s.scalar(vt)
    return meta


def _alignment(meta: dict[str, object]) -> int:
    a = meta.get(ALIGNMENT_KEY, DEFAULT_ALIGNMENT)
    # u32 by the check in _metadata; 0 used to escape as ZeroDivisionError
    if not isinstance(a, int) or a < 1 or a & (a - 1) or a > MAX_ALIGNMENT:
        raise GGUFError(f"corrupt GGUF header: alignment {a!r:.20} is not a power of two up to {MAX_ALIGNMENT:,}")
    return a


def _tensor(s: _Stream, i: int, seen: set[str], expected_offset: int) -> TensorInfo:
    raw_name = s.string_bytes(MAX_KEY_BYTES, f"the name of tensor {i}")
    name = raw_name.decode("utf-8", errors="replace")
    if len(raw_name) > MAX_TENSOR_NAME_BYTES:
        raise GGUFError(f"corrupt GGUF header: tensor {i} has a name of {len(raw_name)} bytes (at most 63)")
    if name in seen:
        raise GGUFError(f"corrupt GGUF header: duplicate tensor name '{name}'")
    seen.add(name)
    n_dims = s.u32()
    if n_dims > MAX_DIMS:
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' has {n_dims:,} dimensions (at most {MAX_DIMS})")
    shape = tuple(s.u64() for _ in range(n_dims))
    if any(d > INT64_MAX for d in shape):  # gguf.cpp reads int64 and refuses negative sizes
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' has a negative dimension")
    n_elements = math.prod(shape)
    if n_elements >= INT64_MAX:
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' has too many elements")
    code = s.u32()
    ttype = _TENSOR_TYPES.get(code)
    if ttype is None:
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' has unknown type {code}")
    block, _ = GGML_QUANT_SIZES[ttype]
    if shape and shape[0] % block:
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' rows of {shape[0]:,} are not a multiple of "
                        f"{ttype.name}'s block of {block}")
    offset = s.u64()
    if offset != expected_offset:  # gguf.cpp: tensors follow each other, each padded to the alignment
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' at offset {offset:,}, expected {expected_offset:,}")
    info = TensorInfo(name, shape, int(ttype), offset)
    if info.n_bytes > (1 << 64) - 1:
        raise GGUFError(f"corrupt GGUF header: tensor '{name}' is too large")
    return info


def _parse(s: _Stream) -> GGUFHeader:
    try:
        magic = s.u32()
    except GGUFError:
        raise GGUFError("not a GGUF file (empty)" if s.consumed == 0 and not s.buf else "not a GGUF file") from None
    if magic != GGUF_MAGIC:
        raise GGUFError("not a GGUF file (bad magic)")
    version = s.u32()
    if version not in (2, 3):
        raise GGUFError(f"unsupported GGUF version {version}")
    n_tensors = s.u64()
    n_kv = s.u64()
    # a key-value pair takes at least 14 bytes, a tensor entry 25
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV or 14 * n_kv + 25 * n_tensors > s.left():
        raise GGUFError(f"corrupt GGUF header (absurd counts: {n_tensors:,} tensors, {n_kv:,} keys)")
    meta = _metadata(s, n_kv)
    alignment = _alignment(meta)
    tensors: list[TensorInfo] = []
    seen: set[str] = set()
    data_size = 0
    for i in range(n_tensors):
        t = _tensor(s, i, seen, data_size)
        tensors.append(t)
        data_size += -(-t.n_bytes // alignment) * alignment
    # gguf.cpp pads the data section's start only when there are tensors
    data_offset = -(-s.consumed // alignment) * alignment if tensors else s.consumed
    if tensors and s.size is not None and data_offset > s.size:
        raise GGUFError("file ends before the tensor data (truncated?)")
    return GGUFHeader(version, meta, tensors, data_offset, s.consumed, alignment)


def read_header(raw: ByteSource, *, size: int | None = None, source: str = "") -> GGUFHeader:
    """Read a header from ``raw``; ``size``: the file's size when known (every length in the
    header is checked against it), ``source``: the file's name for the typed accessors' errors.

    Raises GGUFError, one line, for anything that is not a sound GGUF header; errors of
    ``raw.read`` itself (OSError, a download error) pass through unchanged.
    """
    s = _Stream(raw, size=size)
    try:
        header = _parse(s)
    except GGUFError:
        raise
    except (struct.error, ValueError, OverflowError, MemoryError, RecursionError, IndexError, KeyError) as exc:
        # a safety net only: the checks above refuse every input the fuzz tests produce before this
        raise GGUFError(f"corrupt GGUF header (internal: {type(exc).__name__})") from None
    header.source = source
    return header


def read_file_header(path: str | Path) -> GGUFHeader:
    path = Path(path)
    mode = _stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise GGUFError(f"{path}: is a directory")
    if not stat.S_ISREG(mode):  # opening a FIFO would wait for a writer forever
        raise GGUFError(f"{path}: not a regular file")
    try:
        with path.open("rb") as f:
            return read_header(f, size=os.fstat(f.fileno()).st_size, source=path.name)
    except GGUFError as exc:
        raise GGUFError(f"{path.name}: {exc}") from None
    except OSError as exc:
        raise _os_error(path, exc) from None


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except OSError as exc:
        raise _os_error(path, exc) from None


def _os_error(path: Path, exc: OSError) -> GGUFError:
    if isinstance(exc, FileNotFoundError):
        return GGUFError(f"{path}: no such file")
    return GGUFError(f"{path}: cannot read ({exc.strerror or exc})")


def validate_file(path: str | Path) -> GGUFHeader:
    """Header readable and all tensor data present; raises GGUFError with one line otherwise."""
    path = Path(path)
    header = read_file_header(path)
    size = _stat(path).st_size
    if size < header.expected_file_size:
        raise GGUFError(
            f"{path.name}: truncated: {size:,} bytes on disk, the header needs {header.expected_file_size:,}"
        )
    return header
