"""Pair compatibility from remote GGUF headers, read with range requests from a local hub."""

from __future__ import annotations

import pytest
from huggingface_hub import hf_hub_url

import test_models
from specchat.models.gguf_header import GGUFError, read_file_header
from specchat.models.hub import DownloadError, HubFile
from specchat.models.remote import MAX_CHUNK, RangeReader, check_remote_pair, read_remote_header

MiB = 1 << 20


def test_the_qwen_pair_is_accepted_from_headers_alone(hub, hub_files):
    target, draft = hub_files["qwen-1.5b"], hub_files["qwen-0.5b"]

    verdict, transferred = check_remote_pair(target, draft)

    assert verdict.compatible, verdict.reason
    assert transferred == hub.total_sent()  # the count is what actually crossed the wire
    for name in ("qwen-1.5b", "qwen-0.5b"):
        file = hub_files[name]
        size = test_models.MODELS[name].size
        assert hub.sent(file.repo_id, file.filename) < 0.02 * size  # ~7 MiB of 491 MB and 1.1 GB


def test_gemma_and_smollm_are_refused_with_the_first_reason(hub, hub_files):
    target = hub_files["qwen-1.5b"]

    gemma, _ = check_remote_pair(target, hub_files["gemma-270m"])
    smollm, _ = check_remote_pair(target, hub_files["smollm2-135m"])

    assert not gemma and gemma.reason == "tokenizer type differs: 'gpt2' vs 'llama'"
    assert not smollm and smollm.reason == "vocabulary sizes differ by 102784 (> 128): 151936 vs 49152"


def test_the_remote_header_is_the_local_header_for_a_few_megabytes(hub, hub_files, qwen_target):
    header, transferred = read_remote_header(hub_files["qwen-1.5b"])

    local = read_file_header(qwen_target)
    assert header.metadata == local.metadata and header.tensors == local.tensors
    assert header.data_offset == local.data_offset
    # reads past the header's end by less than one (largest) chunk
    assert local.header_bytes <= transferred < local.header_bytes + MAX_CHUNK
    ranges = [r.range for r in hub.gets(*_id(hub_files["qwen-1.5b"]))]
    assert ranges[:3] == [f"bytes=0-{MiB - 1}", f"bytes={MiB}-{3 * MiB - 1}", f"bytes={3 * MiB}-{7 * MiB - 1}"]


def test_range_reader_returns_the_exact_bytes_in_growing_ranges(hub, hub_files, smollm):
    file = hub_files["smollm2-135m"]
    reader = RangeReader(hf_hub_url(file.repo_id, file.filename), size=test_models.MODELS["smollm2-135m"].size)

    got = b""
    for n in (10, 1, MiB, 3 * MiB, 5):  # odd sizes across chunk borders
        while len(piece := reader.read(n)) < n:
            n -= len(piece)
            got += piece
        got += piece

    with smollm.open("rb") as f:
        expected = f.read(len(got))
    assert got == expected
    assert reader.bytes_fetched == hub.total_sent() >= len(got)
    assert [r.range for r in hub.requests] == [f"bytes=0-{MiB - 1}", f"bytes={MiB}-{3 * MiB - 1}",
                                               f"bytes={3 * MiB}-{7 * MiB - 1}"]


def test_range_reader_ends_cleanly_at_the_end_of_the_file(hub, tmp_path):
    small = tmp_path / "small.bin"
    small.write_bytes(bytes(range(256)) * 10)
    hub.add_file("test/small", "small.bin", small)
    try:
        reader = RangeReader(hf_hub_url("test/small", "small.bin"))  # size unknown: the server says when
        assert reader.read(100_000) == small.read_bytes()
        assert reader.read(10) == b"" and reader.read(10) == b""
    finally:
        del hub.files[("test/small", "small.bin")]


def test_a_file_that_is_not_gguf_is_named(hub, tmp_path):
    text = tmp_path / "README.md"
    text.write_text("# not a model\n" * 100)
    hub.add_file("test/readme", "README.md", text)
    try:
        with pytest.raises(GGUFError, match=r"^test/readme/README.md: not a GGUF file \(bad magic\)$"):
            read_remote_header(HubFile("test/readme", "README.md"))
    finally:
        del hub.files[("test/readme", "README.md")]


def test_a_gated_remote_header_says_how_to_log_in(hub, hub_files):
    file = hub_files["qwen-0.5b"]
    hub.gate(file.repo_id)

    with pytest.raises(DownloadError) as gated:
        check_remote_pair(hub_files["qwen-1.5b"], file)

    message = str(gated.value)
    assert "\n" not in message and "gated" in message and "hf auth login" in message and "HF_TOKEN" in message


def _id(file: HubFile) -> tuple[str, str]:
    return file.repo_id, file.filename
