"""Can this draft serve this target?  llama.cpp's rule, checked from GGUF metadata.

The rule (``common_speculative_are_compatible`` in llama.cpp): same tokenizer
model type; same add-BOS and add-EOS flags and the same BOS/EOS ids when set;
vocabulary sizes within 128 of each other; identical token text for every id
from 5 up to the smaller vocabulary.  A failed check names the first reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .drafter_heads import check_head, drafter_kind
from .gguf_header import GGUFHeader, StringArray, validate_file

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN = 5
TOKEN_ID_RANGE = (-(1 << 31), (1 << 32) - 1)  # written as u32, some converters use i32 (-1: none)


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    model: str
    tokens: Sequence[str]  # a StringArray from a header (compared as bytes), or any sequence
    add_bos: bool | None
    add_eos: bool | None
    bos_id: int | None
    eos_id: int | None

    @classmethod
    def from_header(cls, header: GGUFHeader) -> TokenizerInfo:
        """Raises GGUFError naming the file and the key for a field of the wrong type (llama.cpp
        refuses such a file too, when it loads it)."""
        lo, hi = TOKEN_ID_RANGE
        return cls(
            model=header.get_str("tokenizer.ggml.model", "", max_len=256),
            tokens=header.get_tokens(),
            add_bos=header.get_bool("tokenizer.ggml.add_bos_token"),
            add_eos=header.get_bool("tokenizer.ggml.add_eos_token"),
            bos_id=header.get_int("tokenizer.ggml.bos_token_id", lo=lo, hi=hi),
            eos_id=header.get_int("tokenizer.ggml.eos_token_id", lo=lo, hi=hi),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> TokenizerInfo:
        """From a local file, refusing one that is truncated (its tensor data must all be there)."""
        return cls.from_header(validate_file(path))


def _first_difference(a: Sequence[str], b: Sequence[str], start: int, stop: int) -> int | None:
    """The first id in ``start..stop-1`` whose token text differs, or None."""
    if isinstance(a, StringArray) and isinstance(b, StringArray):
        return a.first_difference(b, start, stop)  # raw bytes: the 151,936 Qwen tokens in 4 ms
    return next((i for i in range(start, stop) if a[i] != b[i]), None)


@dataclass(frozen=True, slots=True)
class PairCompatibility:
    compatible: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.compatible


def _flag(v: bool | None) -> str:
    return "unset" if v is None else str(v).lower()


def check_tokenizers(target: TokenizerInfo, draft: TokenizerInfo) -> PairCompatibility:
    def no(reason: str) -> PairCompatibility:
        return PairCompatibility(False, reason)

    if not target.tokens or not draft.tokens:
        return no("a model has no tokenizer in its GGUF metadata")
    if target.model != draft.model:
        return no(f"tokenizer type differs: '{target.model}' vs '{draft.model}'")
    if target.add_bos != draft.add_bos:
        return no(f"add-BOS flag differs: {_flag(target.add_bos)} vs {_flag(draft.add_bos)}")
    if target.add_eos != draft.add_eos:
        return no(f"add-EOS flag differs: {_flag(target.add_eos)} vs {_flag(draft.add_eos)}")
    if target.add_bos and target.bos_id != draft.bos_id:
        return no(f"BOS token differs: {target.bos_id} vs {draft.bos_id}")
    if target.add_eos and target.eos_id != draft.eos_id:
        return no(f"EOS token differs: {target.eos_id} vs {draft.eos_id}")
    nt, nd = len(target.tokens), len(draft.tokens)
    if abs(nt - nd) > MAX_VOCAB_SIZE_DIFFERENCE:
        return no(f"vocabulary sizes differ by {abs(nt - nd)} (> {MAX_VOCAB_SIZE_DIFFERENCE}): {nt} vs {nd}")
    i = _first_difference(target.tokens, draft.tokens, FIRST_COMPARED_TOKEN, min(nt, nd))
    if i is not None:
        return no(f"token {i} differs: {target.tokens[i]!r:.80} vs {draft.tokens[i]!r:.80}")
    return PairCompatibility(True, f"same tokenizer ({target.model}, {min(nt, nd)} tokens compared)")


def check_drafter(target: GGUFHeader, draft: GGUFHeader) -> PairCompatibility:
    """Can ``draft`` draft for ``target``?  A draft model shares the target's tokenizer
    (:func:`check_tokenizers`); a trained head (MTP, EAGLE-3, DFlash, DSpark) fits the target as
    llama.cpp checks it when the server starts the pair (:func:`.drafter_heads.check_head`)."""
    kind = drafter_kind(draft)
    if kind is not None and kind.trained:
        why = check_head(target, draft)
        return PairCompatibility(why is None, why or f"{kind.label} that fits the target ({kind.spec_type})")
    return check_tokenizers(TokenizerInfo.from_header(target), TokenizerInfo.from_header(draft))


def check_pair(target_path: str | Path, draft_path: str | Path) -> PairCompatibility:
    """Compare two local GGUF files (:func:`check_drafter`); raises GGUFError for an unreadable or
    truncated file (its tensor data must all be there)."""
    return check_drafter(validate_file(target_path), validate_file(draft_path))
