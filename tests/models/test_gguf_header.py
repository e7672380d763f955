"""Reading GGUF headers: real files, tiny files written with the gguf package, and bad files."""

from __future__ import annotations

import io
import struct

import gguf
import numpy as np
import pytest

from specchat.models.gguf_header import GGUFError, read_header, validate_file


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
