from __future__ import annotations

from dataclasses import replace

import pytest
from gguf import GGUFValueType

from helpers.gguf_samples import write_gguf
from specchat.models.compatibility import TokenizerInfo, check_pair, check_tokenizers
from specchat.models.gguf_header import GGUFError

BASE = TokenizerInfo("gpt2", tuple(f"tok{i}" for i in range(1000)), False, False, 1, 2)


def test_the_qwen_pair_shares_one_tokenizer(qwen_target, qwen_draft):
    verdict = check_pair(qwen_target, qwen_draft)
    assert verdict.compatible, verdict.reason


def test_gemma_and_smollm_are_refused_as_drafts_for_qwen(qwen_target, gemma, smollm):
    g = check_pair(qwen_target, gemma)
    s = check_pair(qwen_target, smollm)
    assert not g and g.reason == "tokenizer type differs: 'gpt2' vs 'llama'"
    assert not s and s.reason == "vocabulary sizes differ by 102784 (> 128): 151936 vs 49152"


def test_first_differing_token_is_named():
    tokens = list(BASE.tokens)
    tokens[139] = "ation"
    other = replace(BASE, tokens=tuple(tokens))
    target = replace(BASE, tokens=tuple(t if i != 139 else "<start_of_image>" for i, t in enumerate(BASE.tokens)))
    verdict = check_tokenizers(target, other)
    assert verdict.reason == "token 139 differs: '<start_of_image>' vs 'ation'"


def test_ids_below_5_and_a_padding_tail_within_128_are_allowed():
    tokens = list(BASE.tokens)
    tokens[0] = "<pad>"
    draft = replace(BASE, tokens=tuple(tokens[:-100]))
    assert check_tokenizers(BASE, draft)
    assert not check_tokenizers(BASE, replace(BASE, tokens=BASE.tokens[:-129]))


def test_flags_and_special_ids():
    assert check_tokenizers(BASE, replace(BASE, add_bos=True)).reason == "add-BOS flag differs: false vs true"
    bos = replace(BASE, add_bos=True)
    assert check_tokenizers(bos, replace(bos, bos_id=7)).reason == "BOS token differs: 1 vs 7"
    # BOS ids only matter when BOS is added
    assert check_tokenizers(BASE, replace(BASE, bos_id=7))


# -- files with tokenizer fields of the wrong type: one GGUFError naming the file and the key ---


@pytest.mark.parametrize(("key", "entry", "expected"), [
    ("tokenizer.ggml.tokens", ([1, 2, 3], GGUFValueType.ARRAY),
     "draft.gguf: tokenizer.ggml.tokens is array of 3 i32, expected an array of strings"),
    ("tokenizer.ggml.tokens", ("abc", GGUFValueType.STRING), "tokenizer.ggml.tokens is 'abc', expected an array"),
    ("tokenizer.ggml.add_bos_token", ("yes", GGUFValueType.STRING),
     "draft.gguf: tokenizer.ggml.add_bos_token is 'yes', expected true or false"),
    ("tokenizer.ggml.add_eos_token", (1, GGUFValueType.UINT8), "add_eos_token is 1, expected true or false"),
    ("tokenizer.ggml.bos_token_id", ("1", GGUFValueType.STRING), "bos_token_id is '1', expected a whole number"),
    ("tokenizer.ggml.eos_token_id", (2.0, GGUFValueType.FLOAT32), "eos_token_id is 2.0, expected a whole number"),
    ("tokenizer.ggml.model", (["llama"], GGUFValueType.ARRAY), "tokenizer.ggml.model is array of 1 strings, expected"),
], ids=["tokens ints", "tokens text", "add_bos text", "add_eos int", "bos text", "eos float", "model array"])
def test_tokenizer_fields_of_the_wrong_type_are_one_line_errors(tmp_path, key, entry, expected):
    target = write_gguf(tmp_path / "target.gguf")
    draft = write_gguf(tmp_path / "draft.gguf", extra={key: entry})
    with pytest.raises(GGUFError) as err:
        check_pair(target, draft)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_pairs_of_files_compare_their_token_bytes(tmp_path):
    tokens = [f"tok{i}" for i in range(300)]
    target = write_gguf(tmp_path / "target.gguf", tokens=tokens)
    assert check_pair(target, write_gguf(tmp_path / "same.gguf", tokens=tokens[:250]))
    other = tokens[:200] + ["changed"] + tokens[201:]
    verdict = check_pair(target, write_gguf(tmp_path / "other.gguf", tokens=other))
    assert verdict.reason == "token 200 differs: 'tok200' vs 'changed'"
    # id 0..4 may differ (llama.cpp's rule), and a file without a token list is refused
    assert check_pair(target, write_gguf(tmp_path / "low.gguf", tokens=["x"] * 5 + tokens[5:]))
    assert not check_pair(target, write_gguf(tmp_path / "none.gguf", tokens=None))
