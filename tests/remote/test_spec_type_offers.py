"""Which of llama-server's --spec-type values a chat's pair can use, from the two files' GGUF headers
(spec_type_offers over specchat.models.drafter_heads): usable ones "", the others one line saying why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.tiny_drafters import GGUFFile
from specchat.remote.llama_server import spec_type_offers

ALL = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-simple",
       "ngram-mod")
TOKENS = [f"<t{i}>" for i in range(40)]
TRUNK = ("token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight")


def gguf(path: Path, arch: str, tensors: tuple[str, ...] = (), tokens: list[str] = TOKENS, **keys: object) -> Path:
    f = GGUFFile(arch)
    f.add("tokenizer.ggml.model", "gpt2")
    f.add("tokenizer.ggml.tokens", tokens)
    for k, v in keys.items():
        name = k.replace("__", ".")
        f.add(name if name.startswith("tokenizer.") else f"{arch}.{name}", v)
    for t in tensors:
        f.tensor(t, np.zeros(32, dtype=np.float32))
    return f.write(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "qwen3": gguf(tmp_path / "qwen3.gguf", "qwen3", TRUNK, embedding_length=64, block_count=8),
        "qwen35-mtp": gguf(tmp_path / "qwen35.gguf", "qwen35", (*TRUNK, "blk.8.nextn.eh_proj.weight"),
                           embedding_length=64, block_count=9, nextn_predict_layers=1),
        "draft": gguf(tmp_path / "draft.gguf", "qwen3", TRUNK, embedding_length=32, block_count=2),
        "other-vocab": gguf(tmp_path / "other.gguf", "llama", TRUNK, tokens=[f"<o{i}>" for i in range(400)],
                            embedding_length=32, block_count=2),
        "eagle3": gguf(tmp_path / "eagle3.gguf", "eagle3", ("fc.weight",), embedding_length=64, block_count=1,
                       target_layers=[2, 4, 5], target_hidden_size=64),
        "eagle3-wide": gguf(tmp_path / "eagle3-wide.gguf", "eagle3", ("fc.weight",), embedding_length=64,
                            block_count=1, target_layers=[2, 4, 5], target_hidden_size=4096),
        "dflash": gguf(tmp_path / "dflash.gguf", "dflash", ("fc.weight",), embedding_length=64, block_count=1,
                       target_layers=[1, 4], tokenizer__ggml__mask_token_id=39),
        "dspark": gguf(tmp_path / "dspark.gguf", "dflash", ("fc.weight", "markov_w1.weight"), embedding_length=64,
                       block_count=1, target_layers=[1, 4], block_size=8, tokenizer__ggml__mask_token_id=39),
        "mtp": gguf(tmp_path / "mtp-qwen35.gguf", "qwen35", ("token_embd.weight", "blk.8.nextn.eh_proj.weight"),
                    embedding_length=64, block_count=9, nextn_predict_layers=1),
    }


def usable(offers: dict[str, str]) -> set[str]:
    return {k for k, why in offers.items() if not why}


def test_each_trained_head_is_offered_its_own_type_and_the_text_ones(files):
    text = {"none", "ngram-simple", "ngram-mod"}
    assert usable(spec_type_offers(ALL, files["qwen3"], files["eagle3"])) == text | {"draft-eagle3"}
    assert usable(spec_type_offers(ALL, files["qwen3"], files["dflash"])) == text | {"draft-dflash"}
    assert usable(spec_type_offers(ALL, files["qwen3"], files["dspark"])) == text | {"draft-dspark"}
    assert usable(spec_type_offers(ALL, files["qwen35-mtp"], files["mtp"])) == text | {"draft-mtp"}
    assert usable(spec_type_offers(ALL, files["qwen35-mtp"], None)) == text | {"draft-mtp"}
    assert usable(spec_type_offers(ALL, files["qwen3"], files["draft"])) == text | {"draft-simple"}


def test_a_head_of_another_kind_says_what_the_draft_is(files):
    offers = spec_type_offers(ALL, files["qwen3"], files["eagle3"])
    assert offers["draft-simple"] == "the draft is an EAGLE-3 head, which drafts with --spec-type draft-eagle3"
    assert offers["draft-dflash"] == "needs a DFlash drafter as the draft model; the draft is an EAGLE-3 head"
    assert "needs an MTP head (mtp-*.gguf) as the draft" in offers["draft-mtp"]
    assert "multi-token-prediction layers" in spec_type_offers(ALL, files["qwen3"], None)["draft-mtp"]


def test_a_head_of_the_right_kind_that_does_not_fit_names_the_field(files):
    offers = spec_type_offers(ALL, files["qwen3"], files["eagle3-wide"])
    assert "eagle3.target_hidden_size is 4096" in offers["draft-eagle3"]
    assert "the MTP head belongs to a qwen35 model" in spec_type_offers(ALL, files["qwen3"], files["mtp"])["draft-mtp"]
    assert "vocabulary size" in spec_type_offers(ALL, files["qwen3"], files["other-vocab"])["draft-simple"]


def test_an_mtp_target_with_an_ordinary_draft_is_told_to_drop_the_draft(files):
    why = spec_type_offers(ALL, files["qwen35-mtp"], files["draft"])["draft-mtp"]
    assert "take the draft out of the pair" in why


def test_unreadable_files_are_left_to_llama_server_and_unknown_types_want_their_drafter(tmp_path):
    offers = spec_type_offers((*ALL, "draft-foo"), tmp_path / "t.gguf", tmp_path / "d.gguf")
    assert offers["draft-simple"] == "" and offers["none"] == ""
    assert "multi-token" in offers["draft-mtp"] and offers["draft-eagle3"] and offers["draft-foo"]
    assert spec_type_offers(("draft-simple",), None, None) == {"draft-simple": "needs a draft model: choose one in the pair"}
