"""Which trained drafter a GGUF file is, and whether it fits a target, from the two headers alone.

llama-server drafts with trained heads (``--spec-type draft-eagle3 | draft-mtp | draft-dflash |
draft-dspark``) besides a plain draft model (``draft-simple``).  :func:`drafter_kind` tells the kinds
apart by the names the vendored llama.cpp uses (llama-cpp-python 0.3.36, llama.cpp b11312; file:line
below are in its source tree), and :func:`check_head` says in one line why a head cannot serve a
target, mirroring what llama.cpp reads and checks when it starts the pair, so that SpecChat refuses
before a download or a load what llama.cpp would refuse (or abort on, or silently not draft with).

The kinds (``general.architecture``, src/llama-arch.cpp:145-146, 60):

- ``eagle3``: an EAGLE-3 head (src/models/eagle3.cpp).  llama-server never infers it from the file
  (common/preset.cpp:371): it needs ``--spec-type draft-eagle3``.
- ``dflash``: a DFlash drafter, or a DSpark one when it carries the Markov head ``markov_w1.weight``
  (common/speculative.cpp:2287-2300, ``common_speculative_types_from_gguf``; src/models/dflash.cpp:125).
- an MTP head: a multi-token-prediction sidecar (``mtp-*.gguf``, conversion/qwen.py:340-367): the
  target's own architecture with ``<arch>.nextn_predict_layers`` > 0 (src/llama-arch.cpp:226, read at
  src/llama-model.cpp:1329) and no trunk layers (``blk.0.attn_norm.weight`` absent, the test
  src/models/qwen35.cpp:36 makes); or Gemma 4's ``gemma4-assistant`` (src/models/gemma4-assistant.cpp).
- an ordinary model: a draft for ``draft-simple``; with ``blk.<block_count-1>.nextn.eh_proj.weight``
  it is also an MTP-capable target (``draft-mtp`` with no draft file: speculative.cpp:2288-2292
  infers MTP from exactly that tensor, and the target's own NextN layers draft, speculative.cpp:2557-2566).

What llama.cpp checks when the server starts the pair (and what :func:`check_head` mirrors):

- draft-simple: ``common_speculative_are_compatible`` (speculative.cpp:67-130): vocabulary type,
  BOS/EOS, sizes within 128 (``SPEC_VOCAB_MAX_SIZE_DIFFERENCE``, :30), token text from id 5 (:31).
  A failure throws in the drafter's constructor (:242-248); llama-server logs it and serves
  *without drafting* (tools/server/server-context.cpp:1241-1248).
- draft-eagle3: ``<arch>.target_layers`` must exist with exactly 3 ids (eagle3.cpp:6-11; else the
  draft load fails and the server exits) and ``<arch>.target_hidden_size`` (eagle3.cpp:19, required);
  each id at most the target's layer count (speculative.cpp:541-548: a larger one aborts the
  server); the drafter feeds the encoder rows of 3 x the *target's* hidden size (speculative.cpp:507-509)
  while ``fc`` takes 3 x ``target_hidden_size`` (eagle3.cpp:19-22, 58), and any other width is refused
  at every draft (src/llama-context.cpp:1481); a head without ``token_embd``/``output`` uses the
  target's (eagle3.cpp:164-171, 296-303), so its hidden size is the target's (else ggml aborts on the
  first matrix product).  The vocabulary is not compared at all: a head converted for another
  tokenizer loads and drafts tokens of the wrong ids (its converter copies the target's tokenizer,
  conversion/llama.py:107-111).
- draft-dflash / draft-dspark: ``<arch>.target_layers`` (dflash.cpp:36-38, required); each id below
  the target's layer count (llama-context.cpp:1240 asserts ``<= n_layer``, and no graph exposes the
  input of layer ``n_layer``: llama-graph.cpp:1384 asserts); the features are ids x the target's hidden
  size (speculative.cpp:975-977) against ids x the drafter's (dflash.cpp:40), so the two hidden sizes
  are equal; the noise block is the mask token (``tokenizer.ggml.mask_token_id``, speculative.cpp:997,
  1209); DSpark reads ``dflash.block_size`` (dflash.cpp:311-314 asserts).  The vocabulary is not
  compared (the converter copies the target's tokenizer, conversion/qwen.py:668-701).
- EAGLE-3 and DFlash read the target's layer inputs (``t_layer_inp``); only the architectures of
  :data:`LAYER_INPUT_ARCHITECTURES` set them, any other target aborts at its first decode
  (llama-graph.cpp:1384, ``layer input tensor is null``).
- draft-mtp: the head's output width equals the target's (speculative.cpp:1375-1377, a
  ``GGML_ASSERT``: the server aborts); the MTP graph is the head's architecture's own
  (``LLM_GRAPH_TYPE_DECODER_MTP``: only :data:`MTP_ARCHITECTURES` have one), run on the hidden state
  of the target it was converted from; Gemma 4's assistant requires ``embedding_length_out`` (the
  target's hidden size) to differ from its own (gemma4-assistant.cpp:29-31).

Qt-free; imports only the header reader and the error type.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from specchat.errors import one_line
from specchat.models.gguf_header import GGUFError, GGUFHeader, NumberArray, StringArray

EAGLE3_ARCH = "eagle3"  # src/llama-arch.cpp:145
DFLASH_ARCH = "dflash"  # src/llama-arch.cpp:146
GEMMA4_ASSISTANT_ARCH = "gemma4-assistant"  # src/llama-arch.cpp:60
DSPARK_TENSOR = "markov_w1.weight"  # src/llama-arch.cpp:705; common/speculative.cpp:2298
TRUNK_TENSOR = "blk.0.attn_norm.weight"  # absent in an MTP sidecar (src/models/qwen35.cpp:36)
MASK_KEY = "tokenizer.ggml.mask_token_id"  # gguf-py/gguf/constants.py:338
TOKENS_KEY = "tokenizer.ggml.tokens"
EAGLE3_TARGET_LAYERS = 3  # src/models/eagle3.cpp:9; common/speculative.cpp:502
MAX_VOCAB_SIZE_DIFFERENCE = 128  # common/speculative.cpp:30 (draft-simple)
FIRST_COMPARED_TOKEN = 5  # common/speculative.cpp:31 (draft-simple)

# Architectures whose graph exposes every layer's input (``res->t_layer_inp[il]`` in src/models/*.cpp,
# mapped to names through llama_model_mapping, src/llama-model.cpp:40-350): EAGLE-3 and DFlash
# targets.  Any other target aborts at its first decode with them (src/llama-graph.cpp:1384).
LAYER_INPUT_ARCHITECTURES = frozenset({
    "bailingmoe3", "deepseek4", "gemma4", "gpt-oss", "hunyuan_vl", "lfm2", "llama", "mimo2", "minimax-01",
    "minimax-m2", "muse-glimmer", "nanbeige", "nemotron_h", "qwen3", "qwen35", "qwen35moe", "qwen3moe",
    "qwen3next", "qwen4exp",
})
# Architectures with an MTP draft graph (``LLM_GRAPH_TYPE_DECODER_MTP`` in src/models/*.cpp); their
# NextN layers, in the target or in a sidecar, are what draft-mtp runs.
MTP_ARCHITECTURES = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "glm5-next",
    "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35",
})
# MTP heads of an architecture of their own, and the target architecture each belongs to
MTP_HEAD_TARGETS = {GEMMA4_ASSISTANT_ARCH: "gemma4"}
NOT_MODELS = frozenset({"clip", "unknown"})  # a projector, or no architecture: nothing to draft with


class DrafterKind(StrEnum):
    """What a GGUF file can be to speculative decoding; ``spec_type`` is llama-server's name for it."""

    DRAFT = "draft"  # an ordinary model: a draft model for draft-simple
    MTP_TARGET = "mtp-target"  # an ordinary model with its own MTP layers (also a draft-simple draft)
    MTP_HEAD = "mtp"  # an MTP head alone: mtp-*.gguf sidecar, Gemma 4's assistant
    EAGLE3 = "eagle3"
    DFLASH = "dflash"
    DSPARK = "dspark"

    @property
    def spec_type(self) -> str:
        return _SPEC_TYPES[self]

    @property
    def trained(self) -> bool:
        """A trained head that only drafts (it cannot answer alone)."""
        return self not in (DrafterKind.DRAFT, DrafterKind.MTP_TARGET)

    @property
    def label(self) -> str:
        return _LABELS[self]


_SPEC_TYPES = {
    DrafterKind.DRAFT: "draft-simple", DrafterKind.MTP_TARGET: "draft-mtp", DrafterKind.MTP_HEAD: "draft-mtp",
    DrafterKind.EAGLE3: "draft-eagle3", DrafterKind.DFLASH: "draft-dflash", DrafterKind.DSPARK: "draft-dspark",
}
_LABELS = {
    DrafterKind.DRAFT: "a draft model", DrafterKind.MTP_TARGET: "a model with MTP layers",
    DrafterKind.MTP_HEAD: "an MTP head", DrafterKind.EAGLE3: "an EAGLE-3 head",
    DrafterKind.DFLASH: "a DFlash drafter", DrafterKind.DSPARK: "a DSpark drafter",
}


def drafter_kind(header: GGUFHeader) -> DrafterKind | None:
    """The kind of model ``header`` describes; None for a file that is no language model (a projector,
    no ``general.architecture``).  Raises GGUFError for a key of the wrong type."""
    arch = header.architecture
    if arch in NOT_MODELS:
        return None
    if arch == EAGLE3_ARCH:
        return DrafterKind.EAGLE3
    names = {t.name for t in header.tensors}
    if arch == DFLASH_ARCH:
        return DrafterKind.DSPARK if DSPARK_TENSOR in names else DrafterKind.DFLASH
    if arch in MTP_HEAD_TARGETS:
        return DrafterKind.MTP_HEAD
    if header.arch_int("nextn_predict_layers", 0) > 0:
        if TRUNK_TENSOR not in names:
            return DrafterKind.MTP_HEAD
        last = header.arch_int("block_count", 0) - 1
        if f"blk.{last}.nextn.eh_proj.weight" in names:
            return DrafterKind.MTP_TARGET
    return DrafterKind.DRAFT


def check_head(target: GGUFHeader, drafter: GGUFHeader) -> str | None:
    """None when ``drafter`` can draft for ``target`` with its kind's ``--spec-type``; else one line naming
    the field that disagrees (and both values).  A field of the wrong type is such a line too."""
    try:
        return _check(target, drafter)
    except GGUFError as exc:
        return one_line(str(exc))


def check_mtp_target(target: GGUFHeader) -> str | None:
    """None when ``target`` drafts for itself with ``--spec-type draft-mtp`` and no draft file."""
    try:
        kind = drafter_kind(target)
    except GGUFError as exc:
        return one_line(str(exc))
    if kind is not DrafterKind.MTP_TARGET:
        return (f"the target has no multi-token-prediction layers ({_key(target, 'nextn_predict_layers')} "
                "and its NextN tensors)")
    if target.architecture not in MTP_ARCHITECTURES:
        return f"llama.cpp has no multi-token-prediction graph for the target's architecture {target.architecture}"
    return None


# --- the checks -------------------------------------------------------------------------------


def _check(target: GGUFHeader, drafter: GGUFHeader) -> str | None:
    tkind = drafter_kind(target)
    if tkind is None or tkind.trained:
        what = tkind.label if tkind is not None else f"no language model ({target.architecture})"
        return f"the target is {what}, not a model that answers (general.architecture: {target.architecture})"
    kind = drafter_kind(drafter)
    if kind is None:
        return f"the draft is no language model (general.architecture: {drafter.architecture})"
    if kind in (DrafterKind.DRAFT, DrafterKind.MTP_TARGET):
        return _draft_vocabulary(target, drafter)
    checks = {DrafterKind.EAGLE3: _eagle3, DrafterKind.DFLASH: _dflash, DrafterKind.DSPARK: _dflash,
              DrafterKind.MTP_HEAD: _mtp_head}[kind]
    return checks(target, drafter) or _same_vocabulary(target, drafter)


def _eagle3(target: GGUFHeader, head: GGUFHeader) -> str | None:
    layers = _int_list(head, _key(head, "target_layers"))
    if layers is None:
        return f"{_key(head, 'target_layers')} is missing: not an EAGLE-3 head llama.cpp can load"
    if len(layers) != EAGLE3_TARGET_LAYERS:
        return (f"{_key(head, 'target_layers')} has {len(layers)} entries; llama.cpp needs exactly "
                f"{EAGLE3_TARGET_LAYERS} (eagle3.cpp:9)")
    hidden = head.get_int(_key(head, "target_hidden_size"), lo=1, hi=1 << 20)
    if hidden is None:
        return f"{_key(head, 'target_hidden_size')} is missing: not an EAGLE-3 head llama.cpp can load"
    t_embd = _embd(target)
    if hidden != t_embd:
        return (f"{_key(head, 'target_hidden_size')} is {hidden}, but the target's hidden size "
                f"({_key(target, 'embedding_length')}) is {t_embd}")
    n_layer = _trunk_layers(target)
    for i in layers:
        if not 0 <= i <= n_layer:
            return (f"{_key(head, 'target_layers')} reads layer {i}, but the target has {n_layer} layers "
                    f"({_key(target, 'block_count')})")
    if any(i < n_layer for i in layers) and target.architecture not in LAYER_INPUT_ARCHITECTURES:
        return _no_layer_inputs(target, "EAGLE-3")
    return _borrowed_embeddings(target, head, "EAGLE-3 head")


def _dflash(target: GGUFHeader, head: GGUFHeader) -> str | None:
    layers = _int_list(head, _key(head, "target_layers"))
    if not layers:
        return f"{_key(head, 'target_layers')} is missing: not a DFlash drafter llama.cpp can load"
    n_layer = _trunk_layers(target)
    for i in layers:
        if not 0 <= i < n_layer:
            return (f"{_key(head, 'target_layers')} reads layer {i}, but the target has {n_layer} layers "
                    f"({_key(target, 'block_count')})")
    t_embd, h_embd = _embd(target), _embd(head)
    if t_embd != h_embd:
        return (f"the drafter's hidden size ({_key(head, 'embedding_length')}) is {h_embd}, the target's "
                f"({_key(target, 'embedding_length')}) {t_embd}: DFlash drafters share the target's")
    if target.architecture not in LAYER_INPUT_ARCHITECTURES:
        return _no_layer_inputs(target, "DFlash")
    mask = head.get_int(MASK_KEY, lo=-(1 << 31), hi=(1 << 32) - 1)
    n_tokens = len(head.get_tokens())
    if mask is None or not 0 <= mask < n_tokens:
        return f"{MASK_KEY} is {'missing' if mask is None else mask}: DFlash drafts blocks of the mask token"
    if head.get_int(_key(head, "block_size"), lo=1, hi=1 << 16) is None and drafter_kind(head) is DrafterKind.DSPARK:
        return f"{_key(head, 'block_size')} is missing: the DSpark head needs its trained block size"
    return None


def _mtp_head(target: GGUFHeader, head: GGUFHeader) -> str | None:
    belongs = MTP_HEAD_TARGETS.get(head.architecture, head.architecture)
    if target.architecture != belongs:
        return (f"the MTP head belongs to a {belongs} model, the target is {target.architecture} "
                "(general.architecture)")
    if head.architecture == belongs and belongs not in MTP_ARCHITECTURES:
        return f"llama.cpp has no multi-token-prediction graph for {belongs}"
    h_out = head.arch_int("embedding_length_out", 0) or _embd(head)
    t_out = target.arch_int("embedding_length_out", 0) or _embd(target)
    if h_out != t_out:
        key = _key(head, "embedding_length_out" if head.arch_int("embedding_length_out", 0) else "embedding_length")
        return (f"{key} is {h_out}, but the target's hidden size ({_key(target, 'embedding_length')}) is "
                f"{t_out}: llama.cpp aborts on it (speculative.cpp:1376)")
    return None


def _borrowed_embeddings(target: GGUFHeader, head: GGUFHeader, what: str) -> str | None:
    """A head without token_embd / output uses the target's, at the target's hidden size."""
    names = {t.name for t in head.tensors}
    if "token_embd.weight" in names and "output.weight" in names:
        return None
    t_embd, h_embd = _embd(target), _embd(head)
    if t_embd != h_embd:
        return (f"the {what}'s hidden size ({_key(head, 'embedding_length')}) is {h_embd}, the target's "
                f"({_key(target, 'embedding_length')}) {t_embd}, and it uses the target's embeddings")
    return None


def _no_layer_inputs(target: GGUFHeader, what: str) -> str:
    return (f"the target's architecture {target.architecture} does not expose its layers' inputs, which {what} "
            "reads, in this llama.cpp (general.architecture)")


def _same_vocabulary(target: GGUFHeader, head: GGUFHeader) -> str | None:
    """A trained head drafts token ids of its own vocabulary: it must be the target's, token for token."""
    t, h = target.get_tokens(), head.get_tokens()
    if not h:
        return f"the head has no tokenizer ({TOKENS_KEY})"
    if len(t) != len(h):
        return f"vocabulary size ({TOKENS_KEY}): the head has {len(h):,} tokens, the target {len(t):,}"
    i = _first_difference(t, h, 0)
    if i is not None:
        return f"{TOKENS_KEY}: token {i} differs ({t[i]!r:.40} in the target, {h[i]!r:.40} in the head)"
    return None


def _draft_vocabulary(target: GGUFHeader, draft: GGUFHeader) -> str | None:
    """draft-simple: llama.cpp's size and token rule (common_speculative_are_compatible)."""
    t, d = target.get_tokens(), draft.get_tokens()
    if not t or not d:
        return f"a model has no tokenizer ({TOKENS_KEY})"
    if abs(len(t) - len(d)) > MAX_VOCAB_SIZE_DIFFERENCE:
        return (f"vocabulary size ({TOKENS_KEY}): the draft has {len(d):,} tokens, the target {len(t):,} "
                f"(llama.cpp allows {MAX_VOCAB_SIZE_DIFFERENCE} apart)")
    i = _first_difference(t, d, FIRST_COMPARED_TOKEN)
    if i is not None:
        return f"{TOKENS_KEY}: token {i} differs ({t[i]!r:.40} in the target, {d[i]!r:.40} in the draft)"
    return None


# --- header fields ------------------------------------------------------------------------------


def _key(header: GGUFHeader, name: str) -> str:
    return f"{header.architecture}.{name}"


def _embd(header: GGUFHeader) -> int:
    return header.arch_int("embedding_length", 0)


def _trunk_layers(header: GGUFHeader) -> int:
    """The layers a target runs per token: ``block_count`` less its NextN layers (llama-hparams.cpp:348)."""
    return header.arch_int("block_count", 0) - header.arch_int("nextn_predict_layers", 0)


def _int_list(header: GGUFHeader, key: str) -> list[int] | None:
    v = header.get(key)
    if v is None:
        return None
    if isinstance(v, NumberArray) and v.is_integer:
        return [int(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    raise GGUFError(f"{header.source + ': ' if header.source else ''}{key} is not a list of layer numbers")


def _first_difference(a: Sequence[str], b: Sequence[str], start: int) -> int | None:
    stop = min(len(a), len(b))
    if isinstance(a, StringArray) and isinstance(b, StringArray):
        return a.first_difference(b, start, stop)
    return next((i for i in range(start, stop) if a[i] != b[i]), None)
