"""Will this pair fit?  Weights, both KV caches and compute buffers against free memory.

Everything comes from the GGUF headers (no model is loaded): the tensor table
gives the weight bytes per layer, the hyper-parameters give the KV cache size
at a context length.  The compute-buffer term follows llama.cpp's graph: the
attention scores of one micro-batch (unless flash attention, which llama.cpp
turns on by itself where it can), the feed-forward activations, and the logits.

On the CPU llama.cpp also *repacks* Q4_0, Q4_K and IQ4_NL matrices into an
interleaved layout for its SIMD kernels: a second copy next to the mapped file
(measured here: 596.5 MiB "CPU_REPACK" for the 1.5B Qwen, exactly its 2-D Q4_K
tensors other than the token embeddings).  The estimate counts it for
CPU-resident weights.

Before a file is downloaded only its size is known (the catalog).
:func:`estimate_from_size` turns a size into the same :class:`ModelMemory` with the
header-dependent terms taken from ratios measured on real headers, and
:func:`fit_sizes` gives the same kind of verdict as :func:`fit_pair` (it *is*
``fit_pair``), so the Models dialog and the header estimate never disagree by
construction: only by how far the ratios are from the real file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from gguf import GGMLQuantizationType

from specchat.errors import UserError

from .drafter_heads import GEMMA4_ASSISTANT_ARCH, drafter_kind
from .gguf_header import GGUFError, GGUFHeader, validate_file

GIB = 1024**3
# rows of logits a loaded model's context holds (llama.cpp's n_outputs_max), each n_vocab floats: the target's
# longest verify needs k_max + 1, and auto compares both models' choices over the prompt's last 64 positions
# (engine/generate.py: PROMPT_ROWS).  llama.cpp's default, n_batch rows, reserved 300 MB for a 152k vocabulary
OUTPUT_ROWS = 64
_LAYER = re.compile(r"^blk\.(\d+)\.")
REPACKED_TYPES = frozenset({GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_K, GGMLQuantizationType.IQ4_NL})
# bounds on the hyper-parameters the estimate multiplies: far above any real model (the
# largest have ~130 layers, 16k-wide embeddings, 260k vocabularies), low enough that a
# hostile header cannot make the arithmetic explode
MAX_LAYERS = 10_000
MAX_WIDTH = 1 << 20  # embedding, feed-forward and head sizes, head counts
MAX_VOCAB = 1 << 24
MAX_CTX = 1 << 24


class FitError(UserError, ValueError):
    """A request the estimate cannot answer (a context length out of range)."""


@dataclass(frozen=True, slots=True)
class ModelMemory:
    name: str
    weights: int  # bytes of all tensors
    per_layer: int  # weights of one repeating layer (average)
    n_layers: int
    kv_cache: int  # bytes at the requested context
    compute: int  # compute buffers and outputs
    repack: int = 0  # CPU only: the repacked copy of Q4_0/Q4_K/IQ4_NL matrices

    @property
    def total(self) -> int:
        """Bytes when the model runs on the CPU (repacked copies included)."""
        return self.weights + self.kv_cache + self.compute + self.repack

    @property
    def total_gpu(self) -> int:
        """Bytes when every layer is offloaded (no CPU repacking)."""
        return self.weights + self.kv_cache + self.compute

    def layer_bytes(self) -> int:
        """Memory one offloaded layer takes on the GPU: its weights and its share of the KV cache."""
        return self.per_layer + (self.kv_cache // self.n_layers if self.n_layers else 0)


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the estimate needs from a header, and nothing else: a few hundred bytes, so the
    catalog can keep it on disk per file (:mod:`specchat.models.catalog_fit`) instead of the
    header's megabytes.  :func:`estimate_facts` of these is :func:`estimate_model` of the header."""

    name: str
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    n_ff: int
    n_vocab: int
    weights: int  # bytes of all tensors (all parts of a split model)
    per_layer: int
    repack: int


def _trained_head(header: GGUFHeader) -> bool:
    try:
        kind = drafter_kind(header)
    except GGUFError:
        return False
    return kind is not None and kind.trained


def model_facts(header: GGUFHeader) -> ModelFacts:
    """The estimate's inputs from a header.  GGUFError (naming the file and the key) for a
    hyper-parameter of the wrong type or out of range."""
    n_layers = header.arch_int("block_count", 0, hi=MAX_LAYERS)
    n_embd = header.arch_int("embedding_length", 0, hi=MAX_WIDTH)
    n_head = max(header.arch_int("attention.head_count", 1, hi=MAX_WIDTH), 1)
    n_head_kv = header.arch_int("attention.head_count_kv", n_head, hi=MAX_WIDTH) or n_head
    head_k = header.arch_int("attention.key_length", n_embd // n_head, hi=MAX_WIDTH) or n_embd // n_head
    head_v = header.arch_int("attention.value_length", n_embd // n_head, hi=MAX_WIDTH) or n_embd // n_head
    n_ff = header.arch_int("feed_forward_length", 4 * n_embd, hi=MAX_WIDTH) or 4 * n_embd
    n_vocab = len(header.get_tokens()) or header.arch_int("vocab_size", 32000, hi=MAX_VOCAB) or 32000

    layers: dict[int, int] = {}
    repack = 0
    for t in header.tensors:
        m = _LAYER.match(t.name)
        if m:
            layers[int(m.group(1))] = layers.get(int(m.group(1)), 0) + t.n_bytes
        if len(t.shape) == 2 and t.name != "token_embd.weight" and t.type in REPACKED_TYPES:
            repack += t.n_bytes
    per_layer = sum(layers.values()) // len(layers) if layers else 0
    if _trained_head(header):
        # a trained head's block_count is its target's (an MTP sidecar keeps the target's numbering): its
        # weights and KV cache are the blocks it carries; Gemma 4's assistant reads the target's KV cache
        n_layers = 0 if header.architecture == GEMMA4_ASSISTANT_ARCH else len(layers)
    general_name = header.get("general.name")
    name = general_name[:200] if isinstance(general_name, str) and general_name else "model"
    return ModelFacts(name, n_layers, n_embd, n_head, n_head_kv, head_k, head_v, n_ff, n_vocab,
                      header.tensor_data_bytes, per_layer, repack)


def estimate_facts(facts: ModelFacts, *, n_ctx: int, n_ubatch: int = 512, n_outputs: int = OUTPUT_ROWS,
                   flash_attn: bool = True, kv_bytes_per_value: float = 2.0, name: str = "") -> ModelMemory:
    """The memory of one model at ``n_ctx`` tokens, from its facts; FitError for ``n_ctx`` outside 1..2^24."""
    if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or not 1 <= n_ctx <= MAX_CTX:
        raise FitError(f"context length {n_ctx!r:.20} is out of range: use 1 to {MAX_CTX:,} tokens")
    f = facts
    kv = int(f.n_layers * n_ctx * f.n_head_kv * (f.head_k + f.head_v) * kv_bytes_per_value)
    ub = min(n_ubatch, n_ctx)
    attention_scores = 0 if flash_attn else ub * n_ctx * f.n_head * 4
    activations = ub * (3 * f.n_ff + 4 * f.n_embd) * 4
    logits = n_outputs * f.n_vocab * 4
    compute = attention_scores + activations + logits
    return ModelMemory(name or f.name, f.weights, f.per_layer, f.n_layers, kv, compute, f.repack)


def estimate_model(header: GGUFHeader, *, n_ctx: int, n_ubatch: int = 512, n_outputs: int = OUTPUT_ROWS,
                   flash_attn: bool = True, kv_bytes_per_value: float = 2.0, name: str = "") -> ModelMemory:
    """The memory of one model at ``n_ctx`` tokens.  GGUFError (naming the file and the key) for a
    hyper-parameter of the wrong type or out of range; FitError for ``n_ctx`` outside 1..2^24."""
    if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or not 1 <= n_ctx <= MAX_CTX:
        raise FitError(f"context length {n_ctx!r:.20} is out of range: use 1 to {MAX_CTX:,} tokens")
    return estimate_facts(model_facts(header), n_ctx=n_ctx, n_ubatch=n_ubatch, n_outputs=n_outputs,
                          flash_attn=flash_attn, kv_bytes_per_value=kv_bytes_per_value, name=name)


@dataclass(frozen=True, slots=True)
class FitVerdict:
    fits: bool
    # -1: every layer on the GPU; N > 0: N target layers on it; 0: CPU only although there is a GPU;
    # None: CPU only without a GPU, or a size-only estimate that cannot count layers
    gpu_layers: int | None
    summary: str  # one line for the user
    models: tuple[ModelMemory, ...] = field(default_factory=tuple)
    available: int = 0
    device: str = "RAM"  # where the bulk goes: "VRAM" (all or part on the GPU) or "RAM"
    estimated: bool = False  # from file sizes alone (no header was read): a guess, not the estimate

    @property
    def needed(self) -> int:
        return sum(m.total for m in self.models)

    @property
    def where(self) -> str:
        """"gpu" (all of it), "partial" (part of the target on the GPU), "cpu", or "none" (does not fit)."""
        if not self.fits:
            return "none"
        if self.device == "VRAM":
            return "gpu" if self.gpu_layers == -1 else "partial"
        return "cpu"

    @property
    def label(self) -> str:
        """A few words for a table cell."""
        return {"gpu": "fits on the GPU", "partial": "partly on the GPU", "cpu": "CPU only",
                "none": "does not fit"}[self.where]


def _gb(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def fit_pair(models: list[ModelMemory], *, free_vram: int | None, free_ram: int,
             margin: float = 0.10) -> FitVerdict:
    """Where the pair fits: fully on the GPU, with N target layers on it, on the CPU, or not at all.

    ``margin`` keeps some of the free memory back for the driver, the app and the OS.
    """
    need = sum(m.total for m in models)
    parts = " + ".join(f"{m.name} {_gb(m.weights)} weights, {_gb(m.kv_cache)} KV" for m in models)
    if free_vram is not None:
        usable = int(free_vram * (1 - margin))
        need_gpu = sum(m.total_gpu for m in models)
        if need_gpu <= usable:
            return FitVerdict(True, -1, f"fits on the GPU: needs {_gb(need_gpu)} of {_gb(free_vram)} free ({parts})",
                              tuple(models), free_vram, "VRAM")
        # offload as many target layers (weights + their KV) as fit next to the target's compute
        # buffer; the draft, the embeddings and the other layers stay in RAM
        target = models[0]
        if not target.n_layers:  # a size-only estimate: no layer count, offload by bytes
            on_gpu = max(0, min(usable - target.compute, target.weights + target.kv_cache))
            ram_need = need - on_gpu - (target.compute if on_gpu else 0)
            if on_gpu > 0 and ram_need <= free_ram * (1 - margin):
                return FitVerdict(True, None, f"fits with part of the target on the GPU ({_gb(free_vram)} VRAM "
                                  f"free; about {_gb(ram_need)} in RAM)", tuple(models), free_vram, "VRAM")
        layer = target.layer_bytes()
        n = max(0, min(target.n_layers, (usable - target.compute) // layer if layer else 0))
        ram_need = need - n * layer - (target.compute if n else 0)
        if n > 0 and ram_need <= free_ram * (1 - margin):
            return FitVerdict(True, int(n), f"fits with {n} of {target.n_layers} target layers on the GPU "
                              f"({_gb(free_vram)} VRAM free; {_gb(ram_need)} in RAM)", tuple(models), free_vram,
                              "VRAM")
    if need <= free_ram * (1 - margin):
        where = "on the CPU" if free_vram is None else "on the CPU only (too little VRAM)"
        return FitVerdict(True, 0 if free_vram is not None else None,
                          f"fits {where}: needs {_gb(need)} of {_gb(free_ram)} free RAM ({parts})",
                          tuple(models), free_ram, "RAM")
    return FitVerdict(False, None, f"does not fit: needs {_gb(need)}, {_gb(free_ram)} RAM free"
                      + (f", {_gb(free_vram)} VRAM free" if free_vram is not None else "") + f" ({parts})",
                      tuple(models), free_ram, "RAM")


def free_memory() -> tuple[int | None, int]:
    """(free VRAM of GPU 0 from NVML, or None without an NVIDIA GPU; available RAM)."""
    import psutil

    ram = int(psutil.virtual_memory().available)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            vram = int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU, no NVML: CPU only
        vram = None
    return vram, ram


# --- split GGUFs (llama.cpp's gguf-split: NAME-00001-of-00003.gguf ...) -----------------------------
# Each part is a GGUF file of its own holding some of the tensors; the first also holds the
# metadata.  Every part has split.no (u16, 0-based), split.count (u16) and split.tensors.count.
# llama.cpp loads the model from the first part's path and finds the others beside it by the
# name (llama_split_path: "%s-%05d-of-%05d.gguf"), so they must sit in one directory.
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
MAX_SPLIT_PARTS = 1024  # the largest published models have a few dozen parts


def split_count(header: GGUFHeader) -> int:
    """``split.count`` of a header: 1 for a model in one file."""
    return header.get_int("split.count", 1, lo=0, hi=MAX_SPLIT_PARTS) or 1


def split_part_name(prefix: str, index: int, count: int) -> str:
    """The file name of part ``index`` (0-based) as llama.cpp builds it."""
    return f"{prefix}-{index + 1:05d}-of-{count:05d}.gguf"


def read_split(path: str | Path) -> list[GGUFHeader]:
    """The validated headers of every part of the model at ``path`` (one header for a model in one
    file).  GGUFError, one line, when ``path`` is not the first part, a part is missing or
    truncated, or a part does not belong to the set (another split.no or split.count)."""
    path = Path(path)
    first = validate_file(path)  # a file whose tensor data is missing does not "fit"
    count = split_count(first)
    if count == 1:
        return [first]
    m = SPLIT_NAME.match(path.name)
    if first.get_int("split.no", 0, lo=0, hi=MAX_SPLIT_PARTS) != 0 or m is None or int(m["count"]) != count:
        raise GGUFError(f"{path.name}: part of a model split in {count} files; use its first part "
                        f"(…-00001-of-{count:05d}.gguf)")
    headers = [first]
    for i in range(1, count):
        part = path.with_name(split_part_name(m["prefix"], i, count))
        if not part.exists():
            raise GGUFError(f"{path.name}: part {i + 1} of {count} is missing ({part.name} must be beside it)")
        h = validate_file(part)
        if split_count(h) != count or h.get_int("split.no", -1, lo=-1, hi=MAX_SPLIT_PARTS) != i:
            raise GGUFError(f"{part.name}: not part {i + 1} of {count} of {path.name} (its split keys differ)")
        headers.append(h)
    return headers


def join_split(headers: list[GGUFHeader]) -> GGUFHeader:
    """One header for the estimate: the first part's metadata with the tensors of all parts.
    (Its offsets and ``expected_file_size`` mean nothing: use it for :func:`model_facts` only.)"""
    if len(headers) == 1:
        return headers[0]
    return replace(headers[0], tensors=[t for h in headers for t in h.tensors])


def estimate_files(paths: list[Path], *, n_ctx: int, flash_attn: bool = True) -> list[ModelMemory]:
    """The memory of local model files, target first; a split model is counted with all its parts."""
    return [estimate_model(join_split(read_split(p)), n_ctx=n_ctx, flash_attn=flash_attn, name=Path(p).name)
            for p in paths]


# Size-only estimate (a catalog file not downloaded yet): weights = the file size; the other
# terms from ratios to it, measured with estimate_model on real headers at 4096 tokens and
# rounded so that a large model is over-estimated rather than under-estimated:
# - KV cache / size: 0.05 (Qwen2.5 7B), 0.075 (Qwen3 14B), 0.10 (Qwen2.5-Coder 0.5B, 1.5B),
#   0.11 (Llama 3 8B), 0.12 (Qwen3 8B): 0.12.  Tiny models have far more (SmolLM2 135M 0.96,
#   Gemma 3 270M 0.30), under 0.1 GiB in absolute terms.
# - compute buffers grow with the width, about the square root of the size: 16 MiB (135M),
#   33 MiB (270M), 44 MiB (0.5B), 73 MiB (1.5B), ~131 MiB (8B); 2412 bytes x sqrt(size) gives
#   23, 36, 51, 77, 160 MiB.
# - CPU repack / size, by the quantization in the file name: 0.56 for the 1.5B Q4_K_M, 0.6-0.7
#   for larger Q4_K_M files; only 0.06 for the 0.5B, whose 896-wide matrices cannot be Q4_K
#   (over-estimated here, on the safe side); Q4_0 and IQ4_NL files are repacked almost whole.
SIZE_KV_SHARE_AT_4K = 0.12
SIZE_COMPUTE_PER_SQRT_BYTE = 2412
SIZE_REPACK_SHARE = {"q4_0": 0.9, "iq4_nl": 0.9, "q4_k": 0.6}  # by the quantization in the file name
_QUANT = re.compile(r"(?i)(?:^|[^a-z0-9])(i?q\d+_[a-z0-9]+)")


def _repack_share(filename: str) -> float:
    for m in _QUANT.finditer(Path(filename).stem):
        q = m.group(1).lower()
        for prefix, share in SIZE_REPACK_SHARE.items():
            if q == prefix or q.startswith(prefix + "_"):
                return share
    return 0.0


def estimate_from_size(name: str, size: int, *, n_ctx: int = 4096) -> ModelMemory:
    """The memory of a GGUF file known only by name and size: weights = the file size, the KV cache,
    compute and CPU repack terms from the ratios above.  ``n_layers`` is 0: the layer count is
    unknown, so :func:`fit_pair` offloads it by bytes instead of by layers."""
    kv = int(size * SIZE_KV_SHARE_AT_4K * n_ctx / 4096)
    compute = int(SIZE_COMPUTE_PER_SQRT_BYTE * size**0.5)
    return ModelMemory(name, size, 0, 0, kv, compute, int(size * _repack_share(name)))


def fit_sizes(files: list[tuple[str, int]], *, free_vram: int | None, free_ram: int, n_ctx: int = 4096,
              margin: float = 0.10) -> FitVerdict:
    """:func:`fit_pair` for files known only by (file name, size in bytes), target first: the
    Models dialog's verdict for catalog pairs that are not downloaded yet."""
    verdict = fit_pair([estimate_from_size(n, s, n_ctx=n_ctx) for n, s in files], free_vram=free_vram,
                       free_ram=free_ram, margin=margin)
    return replace(verdict, estimated=True)
