"""Reading GGUF headers: real files, tiny files written with the gguf package, and bad files."""

from __future__ import annotations

import io
import math
import os
import struct
import time
import tracemalloc

import gguf
import pytest
from gguf import GGMLQuantizationType, GGUFValueType

from helpers.gguf_samples import (
    TOKENS,
    gguf_bytes,
    gstr,
    header,
    kv,
    kv_array,
    kv_str,
    kv_u32,
    tensor,
    with_data,
    write_tiny,
)
from specchat.models.gguf_header import (
    GGUFError,
    GGUFHeader,
    NumberArray,
    StringArray,
    read_file_header,
    read_header,
    validate_file,
)


def test_reads_metadata_and_tensor_table_of_a_file_written_by_gguf(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    h = validate_file(path)
    assert h.architecture == "llama"
    assert h.get("tokenizer.ggml.tokens") == ["<unk>", "<s>", "</s>", "a", "b", "c", "ab"]
    assert h.get("tokenizer.ggml.add_bos_token") is True
    assert [t.name for t in h.tensors] == ["t0", "t1"]
    assert h.expected_file_size == path.stat().st_size


def test_real_model_header(smollm):
    h = validate_file(smollm)
    assert h.architecture == "llama"
    assert len(h.get("tokenizer.ggml.tokens")) == 49152
    assert h.expected_file_size == smollm.stat().st_size


def test_truncated_file_is_refused_with_one_line(tmp_path, smollm):
    cut = tmp_path / "cut.gguf"
    with smollm.open("rb") as src:
        cut.write_bytes(src.read(smollm.stat().st_size // 2))
    with pytest.raises(GGUFError) as err:
        validate_file(cut)
    assert "truncated" in str(err.value) and "\n" not in str(err.value)


def test_file_cut_inside_the_header(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    with pytest.raises(GGUFError, match="truncated"):
        read_header(io.BytesIO(data[:60]))


def test_text_file_named_gguf_is_refused(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("this is not a model\n")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        validate_file(fake)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(GGUFError, match="no such file"):
        validate_file(tmp_path / "nope.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(GGUFError, match="empty"):
        validate_file(tmp_path / "empty.gguf")


def test_a_zero_alignment_is_refused_with_one_line():
    # it used to escape as ZeroDivisionError
    key = b"general.alignment"
    header = (struct.pack("<IIQQ", gguf.GGUF_MAGIC, 3, 0, 1) + struct.pack("<Q", len(key)) + key
              + struct.pack("<II", gguf.GGUFValueType.UINT32, 0))
    with pytest.raises(GGUFError, match="alignment"):
        read_header(io.BytesIO(header))


# -- hostile headers: each ends as one GGUFError, one line, quickly ----------------------------

U64_MAX = (1 << 64) - 1


def refused(data: bytes, match: str, *, size: bool = True) -> str:
    """``data`` refused with a one-line GGUFError matching ``match`` within 2 s, with and without
    the size known (a local file passes its size, a bare stream does not)."""
    sizes = [len(data), None] if size else [None]
    message = ""
    for n in sizes:
        start = time.perf_counter()
        with pytest.raises(GGUFError, match=match) as err:
            read_header(io.BytesIO(data), size=n)
        assert time.perf_counter() - start < 2.0
        message = str(err.value)
        assert "\n" not in message and "internal" not in message
    return message


@pytest.mark.parametrize("length", [1 << 40, 1 << 62, U64_MAX, (16 << 20) + 1])
def test_a_huge_string_length_is_refused_before_allocating(length):
    value = kv(b"general.name", GGUFValueType.STRING, struct.pack("<Q", length) + b"abc")
    refused(header([value]), "truncated|bytes")
    key = struct.pack("<Q", length) + b"general.name"
    refused(header([key]), "truncated|bytes")


@pytest.mark.parametrize("itype", [GGUFValueType.UINT8, GGUFValueType.UINT64, GGUFValueType.STRING])
@pytest.mark.parametrize("count", [1 << 31, 1 << 60, U64_MAX, 1000])
def test_a_huge_array_count_is_refused_by_the_bytes_left(itype, count):
    data = header([kv_array("tokenizer.ggml.tokens", itype, count, b"\0" * 64)])
    refused(data, "elements|truncated")  # a bare stream reads up to its end (at most MAX_HEADER_BYTES)
    with pytest.raises(GGUFError, match="'tokenizer.ggml.tokens' claims .* elements, more than the file holds"):
        read_header(io.BytesIO(data), size=len(data))


def test_nested_arrays_are_refused_as_llama_cpp_does_without_recursion():
    # 100,000 levels of "array of one array": it used to recurse until RecursionError
    nested = struct.pack("<IQ", GGUFValueType.ARRAY, 1) * 100_000 + struct.pack("<IQ", GGUFValueType.UINT8, 1) + b"\1"
    refused(header([kv("deep", GGUFValueType.ARRAY, nested)]), "array of arrays")
    refused(header([kv_array("one.level", GGUFValueType.ARRAY, 1, struct.pack("<IQB", 0, 1, 1))]), "array of arrays")


@pytest.mark.parametrize("payload", [
    struct.pack("<II", GGUFValueType.UINT32, 0),
    struct.pack("<II", GGUFValueType.UINT32, 3),
    struct.pack("<II", GGUFValueType.UINT32, 1 << 31),
    struct.pack("<If", GGUFValueType.FLOAT32, 32.0),
    struct.pack("<IQ", GGUFValueType.UINT64, 32),
    struct.pack("<I", GGUFValueType.STRING) + gstr("32"),
    struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.UINT32, 1) + struct.pack("<I", 32),
], ids=["zero", "three", "2^31", "f32", "u64", "string", "array"])
def test_a_bad_alignment_is_refused_with_one_line(payload):
    # a zero alignment used to escape as ZeroDivisionError, a string one as TypeError
    refused(header([gstr("general.alignment") + payload]), "alignment")


def test_a_custom_alignment_pads_the_data_section():
    data = gguf_bytes(alignment=64, quantized=True)
    h = read_header(io.BytesIO(data), size=len(data))
    assert h.alignment == 64 and h.data_offset % 64 == 0 and [t.offset % 64 for t in h.tensors] == [0, 0, 0]


@pytest.mark.parametrize("ttype", [4, 5, 31, 36, 1000, (1 << 32) - 1], ids=lambda t: f"type{t}")
def test_an_unknown_tensor_type_is_refused_while_reading(ttype):
    # it used to pass here and fail later in TensorInfo.n_bytes with ValueError (import, fit)
    refused(with_data(header([], [tensor("w", [32], ttype)]), 4096), "unknown type")


@pytest.mark.parametrize(("shape", "match"), [
    ([2, 2, 2, 2, 2], "5 dimensions"),
    ([1 << 63], "negative"),
    ([1 << 32, 1 << 32], "too many elements"),
    ([31], "not a multiple"),  # a Q8_0 row must be whole 32-value blocks
], ids=["5 dims", "negative", "overflow", "partial block"])
def test_bad_tensor_shapes_are_refused(shape, match):
    refused(with_data(header([], [tensor("w", shape, GGMLQuantizationType.Q8_0)]), 4096), match)


def test_zero_sized_dimensions_are_allowed_as_in_gguf_cpp():
    data = with_data(header([], [tensor("empty", [0, 4])]), 0)
    h = read_header(io.BytesIO(data), size=len(data))
    assert h.tensors[0].n_bytes == 0 and h.expected_file_size == h.data_offset


@pytest.mark.parametrize(("data", "match"), [
    (header([kv_u32("a.b", 1), kv_u32("a.b", 2)]), "duplicate key 'a.b'"),
    (header([kv_u32("", 1)]), "empty"),
    (header([kv("a.b", 13, b"\0" * 8)]), "unknown value type 13"),
    (header([kv("a.b", 1 << 31, b"\0" * 8)]), "unknown value type"),
    (with_data(header([], [tensor("w", [8]), tensor("w", [8], offset=32)]), 64), "duplicate tensor name 'w'"),
    (with_data(header([], [tensor("x" * 64, [8])]), 64), "64 bytes"),
    (with_data(header([], [tensor("w", [8], offset=32)]), 64), "offset 32, expected 0"),
    (with_data(header([], [tensor("a", [8]), tensor("b", [8], offset=16)]), 64), "offset 16, expected 32"),
    (header([kv_u32("a.b", 1)], n_kv=1 << 40), "absurd counts"),
    (header([], n_tensors=U64_MAX), "absurd counts"),
    (header(version=1), "version 1"),
    (header(version=0x03000000), "version"),
], ids=["duplicate key", "empty key", "type 13", "type 2^31", "duplicate tensor", "long name", "misaligned",
        "overlapping", "kv count", "tensor count", "v1", "byte-swapped"])
def test_what_gguf_cpp_refuses_is_refused(data, match):
    refused(data, match)


def test_a_data_section_past_the_end_of_the_file_is_refused(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(header([], [tensor("w", [8])]))
    with pytest.raises(GGUFError, match="x.gguf: file ends before the tensor data"):
        validate_file(path)


def test_invalid_utf8_is_replaced_in_text_and_kept_as_bytes_in_tokens():
    tokens = kv_array("tokenizer.ggml.tokens", GGUFValueType.STRING, 2, gstr(b"ok") + gstr(b"\xff\xfe"))
    data = header([kv_str("general.architecture", "llama"), kv(b"general.name", GGUFValueType.STRING,
                                                                 gstr(b"bad \xc3"))])
    h = read_header(io.BytesIO(data))
    assert h.get("general.name") == "bad \ufffd"
    h = read_header(io.BytesIO(header([tokens])))
    assert h.get_tokens().raw(1) == b"\xff\xfe" and h.get_tokens()[1] == "\ufffd\ufffd"


def test_a_64_mib_array_is_kept_compact(tmp_path):
    # as a list of Python ints it took about 1 GB; now a numpy array over the file's bytes
    n = 16 << 20  # 16 Mi u32 values: 64 MiB
    path = tmp_path / "big.gguf"
    path.write_bytes(header([kv_array("big.values", GGUFValueType.UINT32, n, bytes(4 * n))]))
    tracemalloc.start()
    try:
        h = read_file_header(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    values = h.get("big.values")
    assert isinstance(values, NumberArray) and len(values) == n and values[n - 1] == 0
    assert peak < 160 << 20, f"peak {peak / 2**20:.0f} MiB for a 64 MiB array"


def test_a_string_array_is_a_lazy_sequence_that_compares_as_a_list():
    h = read_header(io.BytesIO(gguf_bytes()))
    tokens = h.get_tokens()
    assert isinstance(tokens, StringArray) and len(tokens) == 7 and tokens[-1] == "ab"
    assert tokens == list(TOKENS) and tokens[1:3] == ["<s>", "</s>"] and list(tokens) == list(TOKENS)
    assert tokens == StringArray.of(TOKENS) and tokens != StringArray.of(TOKENS[:-1])
    with pytest.raises(IndexError):
        tokens.raw(7)


def test_first_difference_compares_token_bytes():
    a = StringArray.of(["x"] * 5 + ["abc", "d", "ef"])
    assert a.first_difference(StringArray.of(["y"] * 5 + ["abc", "d", "ef"]), 5, 8) is None
    assert a.first_difference(StringArray.of(["y"] * 5 + ["ab", "cd", "ef"]), 5, 8) == 5  # same bytes, moved
    assert a.first_difference(StringArray.of(["x"] * 5 + ["abc", "d", "eg"]), 5, 8) == 7
    assert a.first_difference(StringArray.of(["x"] * 5 + ["abc"]), 5, 8) is None  # only the common ids


# -- typed accessors: a wrong type names the file and the key ----------------------------------


def accessor_header(**values: object) -> GGUFHeader:
    return GGUFHeader(3, {"general.architecture": "qwen2", **values}, source="x.gguf")


@pytest.mark.parametrize(("value", "expected"), [
    ("abc", "x.gguf: qwen2.block_count is 'abc', expected a whole number"),
    (1.5, "x.gguf: qwen2.block_count is 1.5, expected a whole number"),
    (True, "x.gguf: qwen2.block_count is True, expected a whole number"),
    (StringArray.of(["a"]), "x.gguf: qwen2.block_count is array of 1 strings, expected a whole number"),
    (NumberArray(GGUFValueType.FLOAT32, bytes(4)), "x.gguf: qwen2.block_count is array of 1 f32, expected a whole"),
    (1 << 40, "x.gguf: qwen2.block_count is 1099511627776, expected a whole number from 0 to 10,000"),
])
def test_arch_int_names_the_file_the_key_and_the_value(value, expected):
    with pytest.raises(GGUFError) as err:
        accessor_header(**{"qwen2.block_count": value}).arch_int("block_count", 0, hi=10_000)
    assert str(err.value).startswith(expected)


def test_typed_accessors():
    h = accessor_header(**{"a.i": 7, "a.f": 0.5, "a.inf": math.inf, "a.nan": math.nan, "a.s": "text", "a.b": True,
                           "qwen2.per_layer": NumberArray(GGUFValueType.INT32, struct.pack("<3i", 2, 8, 4))})
    assert (h.get_int("a.i", 0), h.get_int("missing"), h.get_float("a.i"), h.get_float("a.f")) == (7, None, 7.0, 0.5)
    assert (h.get_str("a.s"), h.get_bool("a.b"), h.get_bool("missing", False)) == ("text", True, False)
    assert h.arch_int("per_layer", 0) == 8  # per-layer values: the largest
    for call, match in [(lambda: h.get_float("a.inf"), "a.inf is inf, expected a finite number"),
                        (lambda: h.get_float("a.nan"), "a.nan is nan"), (lambda: h.get_float("a.s"), "a finite"),
                        (lambda: h.get_int("a.i", lo=8), "from 8"), (lambda: h.get_str("a.i"), "expected text"),
                        (lambda: h.get_str("a.s", max_len=2), "at most 2"), (lambda: h.get_bool("a.i"), "true or"),
                        (lambda: accessor_header(**{"tokenizer.ggml.tokens": 5}).get_tokens(), "array of strings")]:
        with pytest.raises(GGUFError, match=match):
            call()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_device_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GGUFError, match="not a regular file"):
        validate_file(fifo)  # opening it would wait for a writer forever
    with pytest.raises(GGUFError, match="is a directory"):
        validate_file(tmp_path)


def test_an_overlong_architecture_name_reads_as_unknown():
    h = GGUFHeader(3, {"general.architecture": "x" * 10_000, ("x" * 10_000) + ".block_count": "a"})
    assert h.architecture == "unknown" and h.arch_int("block_count", 7) == 7
