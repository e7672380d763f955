"""The draft's greedy choice on the host or in llama.cpp's graph ("backend sampling"): same tokens? faster?

Issue 22 asks for the draft's argmax on the GPU where that measures faster.  llama-cpp-python
0.3.36 binds llama.cpp's backend sampling (``llama_set_sampler``, ``llama_get_sampled_*``;
[EXPERIMENTAL] in llama.h).  This measures, on one model and one machine, a draft's per-token
cost (a 1-token decode and its greedy choice) four ways:

- ``host``: the loop's way: the row of logits read and ``sampling.greedy_choice`` (argmax, and
  whether the top probability clears a p_min of 0.6);
- ``greedy``: a greedy chain in the graph; only the token is read.  llama.cpp still copies the
  full row as "sampled logits", and the chain gives no probability (no p_min stop);
- ``top1prob``: greedy plus a sampler of this script's whose graph part keeps only the top
  token's softmax probability and logit, so one float of each crosses instead of the row:
  the token and an honest p_min test;
- ``dist-topk1``: llama.cpp's own samplers only: ``dist`` (full softmax) then ``top_k(1)``; the
  token is the one candidate, its probability read from the full probs.

Each way runs in a child process: a sampler llama.cpp rejects aborts the process (``[dist,
greedy]`` does, at its first decode), and only that row is lost.  Measured on this project's
2-core CPU (Qwen2.5-Coder 0.5B Q4_K_M, 64 tokens, interleaved): host 14.44 ms a token, greedy
14.67-14.74, top1prob 14.86, dist-topk1 15.97; the tokens were identical and top1prob's
probabilities within 1e-7 of a float64 softmax.  On a CPU the graph's argmax runs on one thread
and saves nothing; what it could save on a GPU is the row's copy (600 KB at Qwen's vocabulary)
and the host argmax, which the H100 notes put at 0.03 ms of a 1.14 ms draft decode.

    python scripts/backend_sampling.py --model DRAFT.gguf [--gpu-layers -1] [--json OUT]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp as L  # before numpy (the numpy-first crash on CUDA); sorted so, too
import numpy as np

METHODS = ("host", "greedy", "top1prob", "dist-topk1")
PROMPT = b"def fibonacci(n):\n    "
P_MIN = 0.6
CHECKED = 16  # tokens whose top probability is compared with a float64 softmax


def _ggml() -> ctypes.CDLL:
    lib = Path(L.__file__).parent / "lib"
    name = next((p for p in lib.glob("*ggml-base*") if p.suffix in (".so", ".dylib", ".dll")), None)
    if name is None:
        raise SystemExit(f"{lib}: no ggml-base library")
    g = ctypes.CDLL(str(name))
    vp = ctypes.c_void_p
    for fn, args in (("ggml_soft_max", [vp, vp]), ("ggml_get_rows", [vp, vp, vp]),
                     ("ggml_reshape_2d", [vp, vp, ctypes.c_int64, ctypes.c_int64]), ("ggml_argmax", [vp, vp])):
        getattr(g, fn).argtypes = args
        getattr(g, fn).restype = vp
    g.ggml_nelements.argtypes = [vp]
    g.ggml_nelements.restype = ctypes.c_int64
    return g


class _Top1Prob:
    """A sampler whose graph part keeps the greedy token's probability and logit (one float each)."""

    def __init__(self) -> None:
        g = _ggml()

        @L.llama_sampler_i_name
        def name(_smpl):  # type: ignore[no-untyped-def]
            return b"top1prob"

        @L.llama_sampler_i_apply
        def apply(_smpl, _cur_p):  # type: ignore[no-untyped-def]  # the host path: never taken in the graph
            return None

        @L.llama_sampler_i_backend_init
        def backend_init(_smpl, _buft, _n):  # type: ignore[no-untyped-def]
            return True

        @L.llama_sampler_i_backend_apply
        def backend_apply(_smpl, gctx, _gf, data_p):  # type: ignore[no-untyped-def]
            d = data_p.contents
            n = g.ggml_nelements(d.logits)
            rows = g.ggml_reshape_2d(gctx, d.logits, 1, n)
            idx = d.sampled if d.sampled else g.ggml_argmax(gctx, rows)
            d.probs = g.ggml_get_rows(gctx, g.ggml_reshape_2d(gctx, g.ggml_soft_max(gctx, d.logits), 1, n), idx)
            d.logits = g.ggml_get_rows(gctx, rows, idx)

        self._callbacks = (name, apply, backend_init, backend_apply)  # kept alive with the interface
        self.iface = L.llama_sampler_i()
        self.iface.name, self.iface.apply = name, apply
        self.iface.backend_init, self.iface.backend_apply = backend_init, backend_apply


def _chain(method: str, keep: list) -> object | None:
    if method == "host":
        return None
    ch = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    if method == "dist-topk1":
        L.llama_sampler_chain_add(ch, L.llama_sampler_init_dist(1234))
        L.llama_sampler_chain_add(ch, L.llama_sampler_init_top_k(1))
    else:
        L.llama_sampler_chain_add(ch, L.llama_sampler_init_greedy())
        if method == "top1prob":
            t1 = _Top1Prob()
            keep.append(t1)
            L.llama_sampler_chain_add(ch, L.llama_sampler_init(ctypes.byref(t1.iface), None))
    keep.append(ch)
    return ch


def child(args: argparse.Namespace) -> dict:
    """One method on one model: its tokens, per-token seconds per repeat, top probabilities."""
    from specchat.engine.sampling import greedy_choice  # after llama_cpp, like every entry point

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 999 if args.gpu_layers < 0 else args.gpu_layers
    model = L.llama_model_load_from_file(str(args.model).encode(), mp)
    if not model:
        raise SystemExit(f"{args.model}: llama.cpp could not load it")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    buf = (L.llama_token * 64)()
    prompt = list(buf[:L.llama_tokenize(vocab, PROMPT, len(PROMPT), buf, 64, True, False)])
    keep: list = []
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch = 1024, 512
    cp.n_threads = cp.n_threads_batch = max(1, args.threads)
    chain = _chain(args.method, keep)
    if chain is not None:  # attached when the context is made (llama_context_params.samplers)
        seqs = (L.llama_sampler_seq_config * 1)()
        seqs[0].seq_id, seqs[0].sampler = 0, ctypes.cast(chain, ctypes.c_void_p)
        keep.append(seqs)
        cp.samplers, cp.n_samplers = ctypes.cast(seqs, ctypes.POINTER(L.llama_sampler_seq_config)), 1
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("llama.cpp could not make a context")
    batch = L.llama_batch_init(512, 0, 1)

    def decode(toks: list[int], pos: int) -> None:
        batch.n_tokens = len(toks)
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, pos + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(toks) - 1
        if L.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    def pick() -> int:
        if args.method == "host":
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            return greedy_choice(logits, P_MIN)[0]
        if args.method == "dist-topk1":
            tok = int(L.llama_get_sampled_candidates_ith(ctx, -1)[0])
            _ = L.llama_get_sampled_probs_ith(ctx, -1)[tok] >= P_MIN
            return tok
        tok = int(L.llama_get_sampled_token_ith(ctx, -1))
        if args.method == "top1prob":
            _ = L.llama_get_sampled_probs_ith(ctx, -1)[0] >= P_MIN
        return tok

    def top_p(tok: int) -> float:
        if args.method == "host":
            x = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).astype(np.float64)
            return float(1.0 / np.exp(x - x.max()).sum())
        if args.method == "top1prob":
            return float(L.llama_get_sampled_probs_ith(ctx, -1)[0])
        if args.method == "dist-topk1":
            return float(L.llama_get_sampled_probs_ith(ctx, -1)[tok])
        return float("nan")  # a greedy chain gives no probability

    tokens: list[int] = []
    probs: list[float] = []
    per_token: list[float] = []
    for rep in range(args.reps + 1):  # the first run warms up and records the probabilities
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        decode(prompt, 0)
        pos, out = len(prompt), []
        t0 = time.perf_counter()
        tok = pick()
        for _ in range(args.tokens):
            out.append(tok)
            if rep == 0 and len(probs) < CHECKED:
                probs.append(top_p(tok))
            decode([tok], pos)
            pos += 1
            tok = pick()
        if rep:
            per_token.append((time.perf_counter() - t0) / args.tokens)
        if tokens and out != tokens:
            raise SystemExit(f"{args.method}: the tokens changed between repeats")
        tokens = out
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    if chain is not None:
        L.llama_sampler_free(chain)  # the context never frees it; the chain frees its samplers
    L.llama_model_free(model)
    return {"method": args.method, "tokens": tokens, "per_token_s": per_token, "p_top": probs}


def measure(model: Path, *, gpu_layers: int, tokens: int = 64, reps: int = 4, threads: int = 0,
            timeout: float = 300) -> dict:
    """Every method in its own child process; a method that fails is reported with its last line."""
    threads = threads or (os.cpu_count() or 1)
    rows: dict[str, dict] = {}
    for method in METHODS:
        cmd = [sys.executable, __file__, "--model", str(model), "--gpu-layers", str(gpu_layers), "--tokens",
               str(tokens), "--reps", str(reps), "--threads", str(threads), "--method", method]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            rows[method] = {"error": f"still running after {timeout:.0f} s"}
            continue
        last = (proc.stdout.strip().splitlines() or [""])[-1]
        if proc.returncode != 0 or not last.startswith("{"):
            from specchat.errors import exit_description

            tail = (proc.stderr.strip().splitlines() or [""])[-1]
            rows[method] = {"error": f"it {exit_description(proc.returncode)}: {tail[:200]}"}
            continue
        rows[method] = json.loads(last)
    host = rows.get("host", {})
    for row in rows.values():
        if "tokens" in row and "tokens" in host:
            row["same_tokens"] = row["tokens"] == host["tokens"]
            pairs = [(a, b) for a, b in zip(row["p_top"], host["p_top"], strict=False) if a == a]
            row["p_error"] = max((abs(a - b) for a, b in pairs), default=None)
    return {"model": model.name, "gpu_layers": gpu_layers, "tokens": tokens, "reps": reps, "methods": rows}


def table(result: dict) -> str:
    lines = ["| method | ms a draft token (median) | x host | same tokens | top probability |", "|---|---|---|---|---|"]
    rows = result["methods"]
    host = statistics.median(rows["host"]["per_token_s"]) if "per_token_s" in rows.get("host", {}) else None
    for method in METHODS:
        row = rows.get(method, {})
        if "error" in row:
            lines.append(f"| {method} | failed: {row['error']} | | | |")
            continue
        ms = statistics.median(row["per_token_s"])
        err = row.get("p_error")
        p = "none (no p_min stop)" if err is None else f"within {err:.1e} of a float64 softmax"
        lines.append(f"| {method} | {ms * 1e3:.3f} | {ms / host:.3f} | {row.get('same_tokens')} | {p} |"
                     if host else f"| {method} | {ms * 1e3:.3f} | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--gpu-layers", type=int, default=-1, help="-1: all (default), 0: none")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    ap.add_argument("--method", choices=METHODS, help="one method, in this process (JSON on stdout)")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    if not args.model.is_file():
        print(f"{args.model}: no such model file", file=sys.stderr)
        return 2
    if args.method:
        args.threads = args.threads or (os.cpu_count() or 1)
        print(json.dumps(child(args)))
        return 0
    result = measure(args.model, gpu_layers=args.gpu_layers, tokens=args.tokens, reps=args.reps,
                     threads=args.threads)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
