from __future__ import annotations

from dataclasses import replace

from specchat.models.compatibility import TokenizerInfo, check_pair, check_tokenizers

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
