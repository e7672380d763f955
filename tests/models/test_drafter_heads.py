"""Trained drafters told apart from their GGUF headers, and checked against a target as llama.cpp
checks them when it starts the pair (specchat.models.drafter_heads).  Every header is written here,
as GGUF bytes, and read back with SpecChat's reader."""

from __future__ import annotations

import io

import numpy as np
import pytest

from helpers.tiny_drafters import GGUFFile
from specchat.models.drafter_heads import (
    LAYER_INPUT_ARCHITECTURES,
    MTP_ARCHITECTURES,
    DrafterKind,
    check_head,
    check_mtp_target,
    drafter_kind,
)
from specchat.models.gguf_header import GGUFHeader, read_header

TOKENS = [f"<t{i}>" for i in range(40)]


def header(arch: str, *, tensors: tuple[str, ...] = (), tokens: list[str] | None = TOKENS,
           **keys: object) -> GGUFHeader:
    """A GGUF file of ``arch`` with ``keys`` (``__`` for a dot; ``general__x`` and ``tokenizer__x`` stay
    as they are, anything else is prefixed with the architecture) and one 32-float tensor per name."""
    f = GGUFFile(arch)
    if tokens is not None:
        f.add("tokenizer.ggml.model", "gpt2")
        f.add("tokenizer.ggml.tokens", tokens)
    for k, v in keys.items():
        if v is None:
            continue
        name = k.replace("__", ".")
        f.add(name if name.startswith(("general.", "tokenizer.")) else f"{arch}.{name}", v)
    for t in tensors:
        f.tensor(t, np.zeros(32, dtype=np.float32))
    data = b"".join(f.chunks())
    return read_header(io.BytesIO(data), size=len(data), source=f"{arch}.gguf")


TRUNK = ("token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight")


def target(arch: str = "qwen3", *, embd: int = 64, layers: int = 8, nextn: int = 0, tokens: list[str] = TOKENS,
           **keys: object) -> GGUFHeader:
    tensors = TRUNK + ((f"blk.{layers + nextn - 1}.nextn.eh_proj.weight",) if nextn else ())
    return header(arch, tensors=tensors, tokens=tokens, embedding_length=embd, block_count=layers + nextn,
                  nextn_predict_layers=nextn or None, **keys)


def eagle3(*, layers: list[int] | None = None, hidden: int | None = 64, embd: int = 64,
           own_embeddings: bool = False, tokens: list[str] = TOKENS) -> GGUFHeader:
    tensors = ("fc.weight", "output_norm.weight", "blk.0.attn_norm_2.weight")
    if own_embeddings:
        tensors += ("token_embd.weight", "output.weight")
    return header("eagle3", tensors=tensors, tokens=tokens, embedding_length=embd, block_count=1,
                  target_layers=[2, 4, 5] if layers is None else layers, target_hidden_size=hidden)


def dflash(*, layers: list[int] | None = None, embd: int = 64, mask: int | None = 39, dspark: bool = False,
           block_size: int | None = 16, tokens: list[str] = TOKENS) -> GGUFHeader:
    tensors = ("fc.weight", "enc.output_norm.weight", "blk.0.attn_norm.weight")
    if dspark:
        tensors += ("markov_w1.weight", "markov_w2.weight")
    return header("dflash", tensors=tensors, tokens=tokens, embedding_length=embd, block_count=1,
                  target_layers=[1, 3, 7] if layers is None else layers, block_size=block_size,
                  tokenizer__ggml__mask_token_id=mask)


def mtp_sidecar(arch: str = "qwen35", *, embd: int = 64, tokens: list[str] = TOKENS) -> GGUFHeader:
    return header(arch, tensors=("token_embd.weight", "output_norm.weight", "blk.8.nextn.eh_proj.weight"),
                  tokens=tokens, embedding_length=embd, block_count=9, nextn_predict_layers=1)


# --- the kinds ----------------------------------------------------------------------------------


def test_each_kind_is_told_by_the_names_llama_cpp_uses():
    assert drafter_kind(eagle3()) is DrafterKind.EAGLE3
    assert drafter_kind(dflash()) is DrafterKind.DFLASH
    assert drafter_kind(dflash(dspark=True)) is DrafterKind.DSPARK  # the Markov head makes it DSpark
    assert drafter_kind(mtp_sidecar()) is DrafterKind.MTP_HEAD  # NextN layers and no trunk
    assert drafter_kind(header("gemma4-assistant", embedding_length=64)) is DrafterKind.MTP_HEAD
    assert drafter_kind(target("qwen35", nextn=1)) is DrafterKind.MTP_TARGET
    assert drafter_kind(target()) is DrafterKind.DRAFT
    # a NextN key without the NextN tensors (what llama.cpp infers MTP from) is an ordinary model
    assert drafter_kind(header("qwen35", tensors=TRUNK, block_count=9, nextn_predict_layers=1)) is DrafterKind.DRAFT


def test_a_projector_or_a_file_without_architecture_is_no_drafter():
    assert drafter_kind(header("clip")) is None
    f = header("llama")
    f.metadata.pop("general.architecture")
    assert drafter_kind(f) is None


def test_each_kind_names_its_spec_type():
    assert {k: k.spec_type for k in DrafterKind} == {
        DrafterKind.DRAFT: "draft-simple", DrafterKind.MTP_TARGET: "draft-mtp", DrafterKind.MTP_HEAD: "draft-mtp",
        DrafterKind.EAGLE3: "draft-eagle3", DrafterKind.DFLASH: "draft-dflash", DrafterKind.DSPARK: "draft-dspark"}
    assert not DrafterKind.DRAFT.trained and DrafterKind.EAGLE3.trained


# --- heads that fit -----------------------------------------------------------------------------


def test_heads_made_for_the_target_fit():
    t = target()
    assert check_head(t, eagle3()) is None
    assert check_head(t, eagle3(layers=[2, 4, 8])) is None  # layer n_layer: the target's final hidden state
    assert check_head(t, dflash()) is None
    assert check_head(t, dflash(dspark=True)) is None
    assert check_head(target("qwen35", nextn=1), mtp_sidecar()) is None
    assert check_head(target("qwen35"), mtp_sidecar()) is None  # a target converted without its MTP layers
    assert check_head(t, target(embd=32, layers=2)) is None  # a draft model: only the vocabulary counts
    assert check_mtp_target(target("qwen35", nextn=1)) is None


def test_gemma4s_assistant_belongs_to_a_gemma4_target_of_its_output_width():
    assistant = header("gemma4-assistant", embedding_length=32, embedding_length_out=64)
    assert check_head(target("gemma4", embd=64), assistant) is None
    assert "gemma4" in check_head(target("qwen35", embd=64), assistant)
    line = check_head(target("gemma4", embd=128), assistant)
    assert "gemma4-assistant.embedding_length_out is 64" in line and "128" in line


# --- heads that do not: one line naming the field -----------------------------------------------


@pytest.mark.parametrize(("drafter", "tgt", "field"), [
    (lambda: eagle3(hidden=4096), target, "eagle3.target_hidden_size is 4096"),
    (lambda: eagle3(layers=[2, 4]), target, "eagle3.target_layers has 2 entries"),
    (lambda: eagle3(layers=[2, 4, 9]), target, "eagle3.target_layers reads layer 9"),
    (lambda: eagle3(hidden=None), target, "eagle3.target_hidden_size is missing"),
    (lambda: eagle3(embd=32), target, "eagle3.embedding_length) is 32"),
    (lambda: eagle3(), lambda: target("qwen2"), "architecture qwen2 does not expose"),
    (lambda: eagle3(tokens=TOKENS[:30]), target, "vocabulary size (tokenizer.ggml.tokens): the head has 30"),
    (lambda: eagle3(tokens=[*TOKENS[:3], "x", *TOKENS[4:]]), target, "token 3 differs"),
    (lambda: dflash(embd=32), target, "dflash.embedding_length) is 32"),
    (lambda: dflash(layers=[1, 8]), target, "dflash.target_layers reads layer 8"),  # == n_layer: no input
    (lambda: dflash(layers=[]), target, "dflash.target_layers is missing"),
    (lambda: dflash(mask=None), target, "tokenizer.ggml.mask_token_id is missing"),
    (lambda: dflash(mask=40), target, "tokenizer.ggml.mask_token_id is 40"),
    (lambda: dflash(dspark=True, block_size=None), target, "dflash.block_size is missing"),
    (lambda: dflash(), lambda: target("qwen2"), "architecture qwen2 does not expose"),
    (mtp_sidecar, lambda: target("qwen3"), "the MTP head belongs to a qwen35 model, the target is qwen3"),
    (lambda: mtp_sidecar(embd=32), lambda: target("qwen35", nextn=1), "qwen35.embedding_length is 32"),
    (lambda: mtp_sidecar(tokens=TOKENS[:39]), lambda: target("qwen35"), "the head has 39 tokens, the target 40"),
    (lambda: mtp_sidecar("glm4"), lambda: target("glm4"), "no multi-token-prediction graph for glm4"),
    (lambda: target(tokens=TOKENS[:3] + ["x"] * 37), target, "token 5 differs"),
    (lambda: target(tokens=[f"<t{i}>" for i in range(300)]), target, "the draft has 300 tokens"),
    (target, eagle3, "the target is an EAGLE-3 head"),
])
def test_a_head_that_does_not_fit_is_one_line_naming_the_field(drafter, tgt, field):
    line = check_head(tgt(), drafter())
    assert line is not None and field in line, line
    assert "\n" not in line and len(line) < 300


def test_a_draft_models_first_five_tokens_may_differ_as_llama_cpp_allows():
    assert check_head(target(), target(tokens=["a", "b", *TOKENS[2:]])) is None
    assert check_head(target(), target(tokens=[*TOKENS, *(f"<x{i}>" for i in range(128))])) is None


def test_a_field_of_the_wrong_type_is_the_line():
    bad = header("eagle3", tensors=("fc.weight",), embedding_length=64, target_layers=[1, 2, 3],
                 target_hidden_size="wide")
    line = check_head(target(), bad)
    assert line is not None and "eagle3.target_hidden_size" in line and "whole number" in line


def test_a_target_without_mtp_layers_says_so():
    assert "multi-token-prediction layers" in check_mtp_target(target("qwen35"))
    assert "no multi-token-prediction graph for the target's architecture glm4" in check_mtp_target(
        target("glm4", nextn=1))


def test_the_architecture_lists_hold_the_tiny_targets_and_the_real_mtp_models():
    assert {"qwen3", "qwen35", "llama", "gemma4"} <= LAYER_INPUT_ARCHITECTURES and "qwen2" not in LAYER_INPUT_ARCHITECTURES
    assert {"qwen35", "qwen35moe", "deepseek2", "glm4moe"} <= MTP_ARCHITECTURES
