"""Agreement pairs (``pairs [--check]``): a target and drafts that agree with it on a chosen share alpha."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .common import TOKENIZER_FILE, test_model_path, write_json
from .models import SHAPES, RandomPool, Shape, Tokenizer, add_shape, quantize, tensor_plan, write_header

# --------------------------------------------------------------------------------------------
# agreement pairs: true costs and a chosen acceptance
# --------------------------------------------------------------------------------------------
#
# Random weights give true costs but no acceptance.  In an agreement pair every layer's output
# projections (attn_output, ffn_down) are zero, so the residual stream is the token's embedding
# whatever the context, and each model is a fixed bigram: its greedy next(t) is the row of
# output.weight closest to t's embedding, and row s is ``logit / n_embd`` times the embedding of
# the token before s on one random cycle over the tokenizer's normal tokens.  The draft has its
# own embeddings and follows the target's cycle on a random share alpha of tokens and goes
# elsewhere on the rest, so any lossless engine (SpecChat, llama-server) accepts each drafted
# token with probability alpha.  Every matrix is full size: a decode costs what the real shape
# costs.  The text is meaningless; special tokens are never produced (their rows are zero).

PAIR_LOGIT = 30.0  # the right next token's logit; the others are ~N(0, logit / sqrt(n_embd))
TOKEN_TYPE_NORMAL = 1  # gguf.TokenType.NORMAL

# Every chat answer starts after the same token, as the chat template's generation prompt ends with a newline
# (Qwen's "<|im_start|>assistant\n"), and a bigram's next token depends on that token alone: every answer is
# the cycle from the newline.  The cycle runs through COPY_WORDS whole-word tokens first (a space and lowercase
# letters, which the tokenizer splits back into the same tokens), so that a prompt can hold the answer as text:
# the code-edit prompts (edit_suite) hold it with a few words changed, and an engine that drafts from the
# prompt (prompt lookup, llama-server's ngram-mod) copies it as it would copy code it is asked to edit.
NEWLINE, WORD = "\u010a", re.compile("\u0120[a-z]{3,12}")  # byte-level BPE pieces: "\n" and " word"
COPY_WORDS = 1024


def normal_ids(tokenizer: Tokenizer) -> Any:
    """The ids of the tokenizer's ordinary tokens (the cycle runs over these only)."""
    import numpy as np

    types = tokenizer.value("tokenizer.ggml.token_type")
    if types is None:
        return np.arange(tokenizer.n_tokens)
    return np.flatnonzero(np.asarray(types) == TOKEN_TYPE_NORMAL)


def answer_lead(tokenizer: Tokenizer, seed: int) -> list[int]:
    """Where the pairs' cycle starts: the newline every answer follows, then :data:`COPY_WORDS` whole-word
    tokens in a random order (none for a tokenizer without byte-level pieces)."""
    import numpy as np

    tokens = tokenizer.value("tokenizer.ggml.tokens")
    normal = normal_ids(tokenizer)
    if NEWLINE not in tokens or tokens.index(NEWLINE) not in set(normal.tolist()):
        return []
    words = [int(i) for i in normal if WORD.fullmatch(tokens[i])]
    picked = np.random.default_rng(seed).choice(words, size=min(COPY_WORDS, len(words)), replace=False)
    return [tokens.index(NEWLINE), *map(int, picked)]


def pair_cycle(tokenizer: Tokenizer, n_vocab: int, seed: int) -> Any:
    """The pairs' target bigram: one random cycle over the normal tokens that starts with :func:`answer_lead`."""
    return bigram_cycle(normal_ids(tokenizer), n_vocab, seed, lead=answer_lead(tokenizer, seed))


def bigram_cycle(ids: Any, n_vocab: int, seed: int, lead: Sequence[int] = ()) -> Any:
    """next[t] for every id below ``n_vocab``: one random cycle over ``ids`` that goes through ``lead`` (ids of
    ``ids``) in its order; -1 elsewhere."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(ids)
    if len(lead):
        first = np.asarray(lead, dtype=order.dtype)
        order = np.concatenate([first, order[~np.isin(order, first)]])
    nxt = np.full(n_vocab, -1, dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def follow_share(nxt: Any, alpha: float, seed: int) -> Any:
    """A bigram equal to ``nxt`` on a random ``alpha`` share of its tokens and different on all others."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = nxt.copy()
    ids = np.flatnonzero(nxt >= 0)
    off = ids[rng.random(len(ids)) >= alpha]
    if len(off) == 1:  # one token cannot be shuffled: send it to another one
        out[off] = nxt[ids[(np.searchsorted(ids, off[0]) + 1) % len(ids)]]
    elif len(off) > 1:
        out[off] = np.roll(nxt[off], 1)  # each one goes where another one's target goes: never its own
    return out


def write_bigram_gguf(path: Path, shape: Shape, tokenizer: Tokenizer, nxt: Any, *, seed: int,
                      logit: float = PAIR_LOGIT) -> None:
    """A Qwen2 GGUF of ``shape`` whose greedy next token after t is ``nxt[t]`` (F16, one tensor at a time)."""
    import gguf
    import numpy as np

    n_vocab = shape.n_vocab or tokenizer.n_tokens
    e = shape.n_embd
    plan = tensor_plan(shape, n_vocab)
    if shape.tied:  # the bigram needs its own output matrix; a tied decode reads one of the same size
        plan.insert(2, ("output.weight", (n_vocab, e), True))
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n_vocab, e), dtype=np.float32).astype(np.float16)
    out = np.zeros((n_vocab, e), dtype=np.float16)
    have = np.flatnonzero(nxt[:n_vocab] >= 0)
    out[nxt[have]] = (emb[have].astype(np.float32) * (logit / e)).astype(np.float16)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), "qwen2")
    writer.add_name(f"{shape.name} agreement model (bigram, zeroed output projections, SpecChat GPU kit)")
    add_shape(writer, shape, tokenizer, n_vocab)
    write_header(writer, plan)
    pool = RandomPool(1 << 22, seed + 7)
    for name, dims, matrix in plan:
        n = int(np.prod(dims))
        if name == "token_embd.weight":
            data = emb
        elif name == "output.weight":
            data = out
        elif name.endswith(("attn_output.weight", "ffn_down.weight")):
            data = np.zeros(dims, dtype=np.float16)
        elif name.endswith("norm.weight"):
            data = np.ones(n, dtype=np.float32)
        else:
            data = pool.take(n, np.float16 if matrix else np.float32)
        writer.write_tensor_data(np.asarray(data).reshape(dims))
    writer.close()
    tmp.replace(path)


@dataclass(frozen=True)
class AgreementPairs:
    """What ``pairs`` made: the target, one draft per alpha, and the bigrams' seeds (pairs.json)."""

    target: Path
    drafts: dict[float, Path]
    cycle_seed: int
    shape: str

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "drafts": {f"{a:g}": str(p) for a, p in self.drafts.items()},
                "cycle_seed": self.cycle_seed, "shape": self.shape}


def make_model(shape: Shape, tokenizer: Tokenizer, nxt: Any, out: Path, name: str, *, seed: int,
               threads: int, quantized: bool) -> Path:
    """``out/<name>-q4_k_m.gguf`` (or F16 with ``quantized=False``), made once (a marker names its inputs)."""
    path = out / f"{name}-{'q4_k_m' if quantized else 'f16'}.gguf"
    marker = path.with_suffix(".json")
    import hashlib

    want = json.dumps({"shape": asdict(shape), "tokens": tokenizer.n_tokens, "seed": seed,
                       "bigram": hashlib.sha256(nxt.tobytes()).hexdigest()}, sort_keys=True)
    if path.exists() and marker.exists() and marker.read_text() == want:
        return path
    f16 = out / f"{name}-f16.gguf"
    t0 = time.perf_counter()
    write_bigram_gguf(f16, shape, tokenizer, nxt, seed=seed)
    t1 = time.perf_counter()
    if quantized:
        quantize(f16, path, threads=threads)
        f16.unlink()
    marker.write_text(want)
    print(f"  {path.name}: {path.stat().st_size / 1e9:.2f} GB (written {t1 - t0:.1f} s, "
          f"quantized {time.perf_counter() - t1:.1f} s)", flush=True)
    return path


def make_pairs(shapes: str, tokenizer: Tokenizer, alphas: Sequence[float], out: Path, *, threads: int,
               cycle_seed: int = 1, quantized: bool = True) -> AgreementPairs:
    target_shape, draft_shape = SHAPES[shapes]
    out.mkdir(parents=True, exist_ok=True)
    n_vocab = max(target_shape.n_vocab or tokenizer.n_tokens, draft_shape.n_vocab or tokenizer.n_tokens)
    nxt = pair_cycle(tokenizer, n_vocab, cycle_seed)
    target = make_model(target_shape, tokenizer, nxt, out, f"agree-{target_shape.name}", seed=11,
                        threads=threads, quantized=quantized)
    drafts = {}
    for alpha in alphas:
        dn = follow_share(nxt, alpha, seed=int(round(alpha * 1000)) + cycle_seed)
        drafts[alpha] = make_model(draft_shape, tokenizer, dn, out,
                                   f"agree-{draft_shape.name}-a{int(round(alpha * 100))}", seed=21,
                                   threads=threads, quantized=quantized)
    pairs = AgreementPairs(target, drafts, cycle_seed, shapes)
    write_json(out / "pairs.json", pairs.to_json())
    return pairs


def greedy_path(nxt: Any, start: int, n: int) -> list[int]:
    path = [start]
    for _ in range(n - 1):
        path.append(int(nxt[path[-1]]))
    return path


def agreement(model_path: Path, path: Sequence[int], wanted: Sequence[int], *, gpu: bool) -> float:
    """The share of ``path``'s positions at which the model's greedy next token is ``wanted``'s.

    A bigram's choice does not depend on the context, so the whole path is one decode."""
    from specchat.engine.runtime import LoadedModel, ModelOptions

    n = len(path)
    model = LoadedModel(model_path, ModelOptions(n_ctx=max(512, n + 8), n_gpu_layers=-1 if gpu else 0,
                                                 n_batch=n, n_ubatch=n), n_outputs=n)
    try:
        model.decode(list(path), logits="all")
        return sum(int(model.logits(i).argmax()) == w for i, w in enumerate(wanted)) / n
    finally:
        model.close()


def check_pairs(pairs: AgreementPairs, tokenizer: Tokenizer, *, n: int = 512, gpu: bool = False) -> dict[str, float]:
    """Measured, on the target's own greedy path from a normal token: how often the target follows its
    bigram, and how often each draft's greedy choice is the target's (its token acceptance)."""
    target_shape, draft_shape = SHAPES[pairs.shape]
    n_vocab = max(target_shape.n_vocab or tokenizer.n_tokens, draft_shape.n_vocab or tokenizer.n_tokens)
    nxt = pair_cycle(tokenizer, n_vocab, pairs.cycle_seed)
    start = int(normal_ids(tokenizer)[len(normal_ids(tokenizer)) // 2])
    path = greedy_path(nxt, start, n + 1)
    got = {"target": agreement(pairs.target, path[:-1], path[1:], gpu=gpu)}
    for alpha, draft in pairs.drafts.items():
        got[f"draft {alpha:g}"] = agreement(draft, path[:-1], path[1:], gpu=gpu)
    return got


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------

def tokenizer_file(args: argparse.Namespace) -> Path:
    if args.tokenizer is not None:
        return args.tokenizer
    kit_file = args.kit / TOKENIZER_FILE
    if kit_file.is_file():
        return kit_file
    source = test_model_path()
    if source is None or not source.is_file():
        raise SystemExit(f"{kit_file}: missing: run 'python scripts/gpu_kit.py pack' first, or give --tokenizer FILE")
    return source


def cmd_pairs(args: argparse.Namespace) -> int:
    alphas = parse_alphas(args.alphas)
    tokenizer = Tokenizer.from_gguf(tokenizer_file(args))
    t0 = time.perf_counter()
    print(f"agreement pairs ({args.shape}) for alpha {', '.join(f'{a:g}' for a in alphas)} in {args.out}", flush=True)
    pairs = make_pairs(args.shape, tokenizer, alphas, args.out, threads=args.threads, quantized=not args.f16)
    print(f"made in {time.perf_counter() - t0:.0f} s: {args.out / 'pairs.json'}", flush=True)
    if args.check:
        got = check_pairs(pairs, tokenizer, gpu=not args.cpu)
        write_json(args.out / "check.json", got)
        for what, share in got.items():
            print(f"  {what}: follows the target's bigram on {share:.1%} of 512 tokens", flush=True)
    return 0


def parse_alphas(text: str) -> list[float]:
    try:
        alphas = sorted({float(a) for a in text.split(",") if a.strip()})
    except ValueError:
        raise SystemExit(f"--alphas {text!r}: give shares between 0 and 1, e.g. 0.6,0.8,0.9") from None
    if not alphas or not all(0.0 <= a <= 1.0 for a in alphas):
        raise SystemExit(f"--alphas {text!r}: give shares between 0 and 1, e.g. 0.6,0.8,0.9")
    return alphas


# --------------------------------------------------------------------------------------------
# code-edit prompts: the answer is a copy of the prompt's text with a few words changed
# --------------------------------------------------------------------------------------------

EDIT_EVERY = 16  # one word in this many is changed between the prompt's text and the answer (edit_suite)
EDIT_ASK = "Apply the change to the text below and write all of it out again, nothing else:\n\n"


def edit_suite(pairs: AgreementPairs, tokenizer: Tokenizer, path: Path, *, tokens: int, prompts: int = 1) -> Path:
    """A bench suite (JSONL, ``specchat bench --suite``) of code-edit prompts for ``pairs``: each holds, as
    text, the answer every prompt gets (the cycle from the newline: :data:`COPY_WORDS`) with one word in
    :data:`EDIT_EVERY` changed, as a file to edit holds the code its answer repeats.  Prompt lookup and
    llama-server's ngram-mod copy it up to each change; a draft model drafts at its alpha as anywhere."""
    import numpy as np

    target_shape, draft_shape = SHAPES[pairs.shape]
    n_vocab = max(target_shape.n_vocab or tokenizer.n_tokens, draft_shape.n_vocab or tokenizer.n_tokens)
    lead = answer_lead(tokenizer, pairs.cycle_seed)
    if len(lead) <= tokens + 1:
        raise SystemExit(f"code-edit prompts need a tokenizer with {tokens + 2} whole-word tokens and a newline "
                         f"(byte-level BPE, as Qwen's); this one has {max(len(lead) - 1, 0)}")
    pieces = tokenizer.value("tokenizer.ggml.tokens")
    nxt = pair_cycle(tokenizer, n_vocab, pairs.cycle_seed)
    answer = greedy_path(nxt, lead[0], tokens + 2)[1:]
    if answer != lead[1:tokens + 2]:
        raise SystemExit("the pairs' cycle does not start with its whole-word lead: make the pairs again")
    words = [pieces[i][1:] for i in answer]
    spare = [pieces[i][1:] for i in lead[tokens + 2:]]  # words no answer writes
    rng = np.random.default_rng(pairs.cycle_seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for n in range(prompts):
        old = [spare[int(rng.integers(len(spare)))] if rng.random() < 1 / EDIT_EVERY else w for w in words]
        lines.append(json.dumps({"id": f"edit-{n + 1}", "task": "edit",
                                 "messages": [{"role": "user", "content": EDIT_ASK + " " + " ".join(old)}]}))
    path.write_text("\n".join(lines) + "\n")
    return path
