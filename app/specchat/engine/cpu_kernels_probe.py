"""The child process of :mod:`.cpu_kernels`: ``specchat --probe-cpu-kernels on|noamx|off DIR``.

It writes a tiny llama-architecture model (one layer, 256 wide: every matrix a multiple of the
256-element K-quant block and of the 32-row tiles), quantizes it with llama.cpp's own quantizer to
the types llama.cpp's extra CPU kernels take (Q4_0, Q8_0 and Q4_K_M's Q4_K/Q6_K), loads each with
the extra buffer types on (``noamx``: on, with AMX's tile permission refused first, engine/amx_off.py)
or off, and decodes a 32-token batch (the tile path: a one-token decode
takes another) and then one token.  Each step is a JSON line on stdout, flushed before the next,
so the parent learns which buffer types were in use even when the decode kills this process.

Run only as a child: a kernel that faults here must not take the app with it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

N_EMBD, N_FF, N_VOCAB, N_HEAD = 256, 512, 256, 4
BATCH = 32
# llama_ftype values (llama.h): the quantized types whose kernels llama.cpp swaps for AMX / repacked ones
FTYPES = (("q4_0", 2), ("q8_0", 7), ("q4_k_m", 15))


def say(**message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def write_model(path: Path) -> None:
    """A loadable F32 llama model with random weights and a 256-token SentencePiece vocabulary."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([2, 3, 3] + [1] * (N_VOCAB - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    w.add_tensor("token_embd.weight", matrix(N_VOCAB, N_EMBD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", matrix(N_VOCAB, N_EMBD))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{name}.weight", matrix(N_EMBD, N_EMBD))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", matrix(N_FF, N_EMBD))
    w.add_tensor("blk.0.ffn_up.weight", matrix(N_FF, N_EMBD))
    w.add_tensor("blk.0.ffn_down.weight", matrix(N_EMBD, N_FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: Path, dst: Path, ftype: int) -> None:
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to ftype {ftype} failed ({rc})")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("on", "noamx", "off"):
        print("usage: specchat --probe-cpu-kernels on|noamx|off DIR", file=sys.stderr)
        return 2
    extra, work = argv[0] != "off", Path(argv[1])
    try:
        from specchat.engine import amx_off
        from specchat.engine.runtime import LoadedModel, ModelOptions

        if argv[0] == "noamx" and not amx_off.deny():
            raise RuntimeError("AMX's tile permission cannot be refused here")

        work.mkdir(parents=True, exist_ok=True)
        f32 = work / "probe-f32.gguf"
        if not f32.exists():
            write_model(f32)
        options = ModelOptions(n_ctx=128, n_gpu_layers=0, n_threads=2, n_batch=64, n_ubatch=64, extra_buffers=extra)
        for name, ftype in FTYPES:
            path = work / f"probe-{name}.gguf"
            if not path.exists():
                quantize(f32, path, ftype)
            with LoadedModel(path, options) as model:
                say(loaded=name, buffers=[b for b in model.buffer_types if b not in ("CPU", "CPU_Mapped")])
                model.decode(list(range(3, 3 + BATCH)))
                model.decode([3 + BATCH])
                say(decoded=name)
    except Exception as exc:  # an answer, not a crash: the parent tells the two apart
        say(error=f"{type(exc).__name__}: {exc}")
        return 1
    say(ok=True)
    return 0
