"""The GPU kit (scripts/gpu_kit.py, its code in scripts/gpukit/): what can be proven without a GPU.

The fast tier builds its own tiny tokenizer; the real tier copies the real Qwen tokenizer from
the 0.5B test model's header, decodes a synthesised model through ``LoadedModel`` and runs the
whole ``run --cpu --shapes tiny`` path.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import gguf
import numpy as np
import pytest

import gpu_kit  # scripts/gpu_kit.py, the command line, put on sys.path by tests/conftest.py
import test_server  # scripts/test_server.py, likewise
from gpukit.build import set_build_status  # scripts/gpukit/, likewise
from gpukit.common import (
    KIT_LIMIT_BYTES,
    TEST_MODEL,
    TOKENIZER_FILE,
    build_dir,
    folder_size,
    tool_path,
    write_json,
)
from gpukit.cost_profile import build_profile, check_profile, robust_rsd, verify_curve
from gpukit.measure import timed_decode
from gpukit.models import (
    QWEN05B,
    QWEN7B,
    TOKEN_TYPE_UNUSED,
    Shape,
    Tokenizer,
    synthesise,
    tensor_plan,
    write_random_gguf,
    write_tokenizer_gguf,
)
from gpukit.pack import PREBUILT, pack_prebuilt, sdist_keeps, strip_sdist, unpack_prebuilt
from gpukit.pairs import (
    EDIT_ASK,
    EDIT_EVERY,
    NEWLINE,
    AgreementPairs,
    answer_lead,
    bigram_cycle,
    check_pairs,
    edit_suite,
    follow_share,
    greedy_path,
    make_pairs,
    pair_cycle,
    parse_alphas,
)
from specchat.models.gguf_header import validate_file

TINY = Shape("test-tiny", 2, 64, 2, 1, 128, None, tied=False)


def fake_tokenizer(tmp_path: Path) -> Tokenizer:
    """A gpt2-style tokenizer of 300 tokens, written and read back as the kit reads Qwen's."""
    src = tmp_path / "tok-src.gguf"
    w = gguf.GGUFWriter(str(src), "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([f"t{i}" for i in range(298)] + ["<|im_start|>", "<|im_end|>"])
    w.add_token_types([1] * 298 + [3, 3])
    w.add_token_merges(["t 1", "t 2"])
    w.add_eos_token_id(299)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    out = tmp_path / "tok.gguf"
    write_tokenizer_gguf(src, out)
    return Tokenizer.from_gguf(out)


def test_the_tokenizer_file_holds_every_tokenizer_key_and_no_tensor(tmp_path):
    tok = fake_tokenizer(tmp_path)
    h = validate_file(tmp_path / "tok.gguf")
    assert h.architecture == "qwen2"
    assert h.tensors == [] or len(h.tensors) == 0
    keys = {k for k, *_ in tok.fields}
    assert {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
            "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
            "tokenizer.chat_template"} <= keys
    assert tok.n_tokens == 300


def test_synthesised_gguf_has_the_shape_and_a_padded_vocabulary(tmp_path):
    tok = fake_tokenizer(tmp_path)
    shape = Shape("test-padded", 2, 64, 2, 1, 128, 320, tied=False)
    path = tmp_path / "m.gguf"
    n = write_random_gguf(path, shape, tok, pool_size=1 << 12)
    h = validate_file(path)  # SpecChat's own header reader accepts it, sizes included
    assert h.architecture == "qwen2"
    assert h.expected_file_size == path.stat().st_size
    assert h.get_int("qwen2.block_count") == 2 and h.get_int("qwen2.embedding_length") == 64
    assert h.get_int("qwen2.attention.head_count_kv") == 1
    tokens = h.get("tokenizer.ggml.tokens")
    assert len(tokens) == 320 and tokens[299] == "<|im_end|>" and tokens[300] == "[PAD300]"
    types = h.get("tokenizer.ggml.token_type")
    assert list(types[-20:]) == [TOKEN_TYPE_UNUSED] * 20
    names = [t.name for t in h.tensors]
    assert len(names) == n == 3 + 2 * 12
    assert "output.weight" in names and "blk.1.attn_k.bias" in names
    r = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in r.tensors}
    assert list(by_name["blk.0.attn_k.weight"].shape) == [64, 32]  # ggml order: (n_embd, head_dim * n_head_kv)
    assert list(by_name["token_embd.weight"].shape) == [64, 320]
    emb = np.asarray(by_name["token_embd.weight"].data, dtype=np.float32)
    assert np.isfinite(emb).all() and 0.005 < float(emb.std()) < 0.05  # small values keep activations finite
    assert np.all(np.asarray(by_name["output_norm.weight"].data) == 1.0)


def test_tied_shapes_have_no_output_matrix(tmp_path):
    tok = fake_tokenizer(tmp_path)
    shape = Shape("test-tied", 1, 64, 2, 1, 128, None, tied=True)
    write_random_gguf(tmp_path / "t.gguf", shape, tok, pool_size=1 << 12)
    assert "output.weight" not in [t.name for t in validate_file(tmp_path / "t.gguf").tensors]


def test_a_vocabulary_smaller_than_the_tokenizer_is_refused(tmp_path):
    tok = fake_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="cannot hold"):
        write_random_gguf(tmp_path / "x.gguf", Shape("s", 1, 64, 2, 1, 128, 10, tied=True), tok)


def test_the_real_shapes_match_the_qwen_configs():
    assert QWEN7B.head_dim == 128 and QWEN7B.head_dim * QWEN7B.n_head_kv == 512
    plan = dict((n, d) for n, d, _ in tensor_plan(QWEN7B, 152064))
    assert plan["blk.27.ffn_down.weight"] == (3584, 18944) and "output.weight" in plan
    params = sum(math.prod(d) for d in plan.values())
    assert 7.5e9 < params < 7.7e9  # Qwen2.5-7B: 7.61B parameters
    small = dict((n, d) for n, d, _ in tensor_plan(QWEN05B, 151936))
    assert "output.weight" not in small
    assert 0.48e9 < sum(math.prod(d) for d in small.values()) < 0.5e9  # Qwen2.5-0.5B: 0.49B


@pytest.mark.parametrize(("member", "kept"), [
    ("llama_cpp_python-0.3.36/llama_cpp/llama_cpp.py", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml.c", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/vendor/miniaudio/miniaudio.h", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama.cpp", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp", False),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf", False),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/server.cpp", True),  # one tree: llama-server too
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/tools/llama-bench/llama-bench.cpp", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/tools/ui/CMakeLists.txt", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/tools/ui/src/lib/app.ts", False),  # the web UI is off
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/scripts/ui-assets.cmake", True),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/scripts/compare-llama-bench.py", False),
    ("llama_cpp_python-0.3.36/vendor/llama.cpp/tools/mtmd/test-1.jpeg.webp", False),
    ("llama_cpp_python-0.3.36/.git/modules/vendor/llama.cpp/objects/pack/p.pack", False),
    ("llama_cpp_python-0.3.36/docs/index.md", False),
])
def test_the_stripped_sdist_keeps_what_a_cuda_build_reads(member, kept):
    assert sdist_keeps(member) is kept


def test_strip_sdist_writes_an_xz_of_the_kept_members(tmp_path):
    src = tmp_path / "s.tar.gz"
    with tarfile.open(src, "w:gz") as tar:
        for name in ("p/CMakeLists.txt", "p/vendor/llama.cpp/models/big.gguf", "p/vendor/llama.cpp/src/a.cpp"):
            data = name.encode() * 10
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "s.tar.xz"
    assert strip_sdist(src, out) == (2, 1)
    with tarfile.open(out, "r:xz") as tar:
        assert tar.getnames() == ["p/CMakeLists.txt", "p/vendor/llama.cpp/src/a.cpp"]
        assert tar.extractfile("p/CMakeLists.txt").read() == b"p/CMakeLists.txt" * 10


def measurements() -> dict:
    return {
        "llama_cpp_python": "0.3.36", "backend": "CUDA", "depth": 256, "k": 8, "n_ctx": 4096, "seed": 0,
        "verify_s": {str(n): [0.006 + 0.0004 * n, 0.0061 + 0.0004 * n, 0.0062 + 0.0004 * n] for n in range(1, 18)},
        "draft": {"decode_s": [0.0020, 0.0021], "greedy_choice_s": [0.0001, 0.0001]},
        "rounds": {"overhead_s": [0.0004, 0.0005, 0.0006], "draft_s": [0.02] * 3, "verify_s": [0.01] * 3},
        "plain": [{"ratio": 0.98}, {"ratio": 0.97}],
        "lookup_s": [3e-5, 4e-5, 5e-5],
    }


def test_the_profile_has_every_required_key_and_a_source_for_each_measured_number(tmp_path):
    p = build_profile(measurements(), hardware="NVIDIA H100 80GB HBM3", kind="measured-gpu",
                              shapes="qwen7b", date="2026-11-21")
    check_profile(p)
    assert p["name"] == "nvidia-h100-80gb-hbm3-qwen7b" and p["kind"] == "measured-gpu"
    assert p["verify_x"]["1"] == 1.0 and sorted(p["verify_x"], key=int) == [str(n) for n in range(1, 18)]
    assert p["verify_x"]["17"]["value"] == pytest.approx((0.006 + 0.0068) / 0.0064)  # the minimum of the repeats
    assert p["token_s"]["value"] == pytest.approx(0.0064)
    assert p["draft_x"]["value"] == pytest.approx(0.0021 / 0.0064)
    assert p["overhead_s"]["value"] == pytest.approx(0.0005)
    for key in ("token_s", "draft_x", "overhead_s", "lookup_s", "noise"):
        assert "NVIDIA H100 80GB HBM3" in p[key]["source"] or p[key]["source"].startswith("derived:")
    write_json(tmp_path / "p.json", p)
    assert json.loads((tmp_path / "p.json").read_text()) == p


def test_a_profile_timed_while_the_machine_was_busy_still_loads_and_says_what_was_measured(tmp_path):
    """CI on a loaded machine: every one-token draft decode of a tiny pair took 128 ms, 163 target tokens, and
    the profile the kit wrote then failed to load ('draft_x' must be a number from 0 to 100)."""
    from specchat.harness.simulate import load_profile

    m = measurements()
    m["draft"]["decode_s"] = [1.3, 1.4]  # 200 target tokens
    m["verify_s"]["17"] = [9.0, 9.1, 9.2]  # 1,400 target tokens for 17 rows

    p = build_profile(m, hardware="x", kind="measured-cpu", shapes="tiny", date="d")
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(p))
    profile = load_profile(str(path))

    assert profile.draft_x == 100.0 and profile.verify_x[17] == 1000.0
    assert "measured 2" in p["draft_x"]["source"] and "was busy" in p["verify_x"]["17"]["source"]
    assert profile.verify_x[16] < 2.0 and "was busy" not in p["verify_x"]["16"]["source"]  # the rest as timed


def test_the_verify_curve_never_falls_and_says_where_it_was_raised():
    curve = verify_curve({1: 0.010, 2: 0.009, 3: 0.012, 4: 0.011, 5: 0.015}, dict.fromkeys(range(1, 6), 3), "s")
    values = [curve[str(n)] if n == 1 else curve[str(n)]["value"] for n in range(1, 6)]
    assert values == pytest.approx([1.0, 1.0, 1.2, 1.2, 1.5])
    assert "raised to the n=1 value" in curve["2"]["source"] and "raised to the n=3 value" in curve["4"]["source"]
    assert "raised" not in curve["5"]["source"]


def test_a_profile_without_a_required_key_is_refused():
    p = build_profile(measurements(), hardware="x", kind="measured-gpu", shapes="qwen7b", date="d")
    del p["draft_x"]
    with pytest.raises(ValueError, match="draft_x"):
        check_profile(p)


def test_the_noise_estimate_ignores_a_rare_stall():
    assert robust_rsd([1.0, 1.01, 0.99, 1.0, 50.0]) < 0.05


def test_the_profile_noise_stays_within_the_schema_range_when_the_repeats_scatter():
    m = measurements()
    m["verify_s"]["1"] = [0.001, 0.009]  # two repeats, one stalled: 1.4826 * MAD / median > 1
    p = build_profile(m, hardware="x", kind="measured-cpu", shapes="tiny", date="d")
    assert p["noise"]["value"] == 1.0 and "capped" in p["noise"]["source"]


# -- real tier: the real Qwen tokenizer, llama.cpp ------------------------------------------

def test_the_real_qwen_tokenizer_is_copied_whole(qwen_draft, tmp_path):
    out = tmp_path / TOKENIZER_FILE
    tok = write_tokenizer_gguf(qwen_draft, out)
    src, copy = validate_file(qwen_draft), validate_file(out)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                "tokenizer.ggml.eos_token_id", "tokenizer.chat_template", "tokenizer.ggml.pre"):
        assert copy.get(key) == src.get(key), key
    assert tok.n_tokens == 151936 and out.stat().st_size < 8 << 20


def test_a_synthesised_quantised_model_loads_and_decodes(qwen_draft, tmp_path):
    from specchat.engine.runtime import LoadedModel, ModelOptions

    tok = Tokenizer.from_gguf(qwen_draft)
    path = synthesise(TINY, tok, tmp_path, threads=2, seed=3)
    with LoadedModel(path, ModelOptions(n_ctx=256, n_gpu_layers=0, n_threads=2), n_outputs=17) as m:
        assert m.n_vocab == 151936
        prompt = m.tokenize("Hello, world", add_special=False)
        m.decode(prompt, logits="last")
        assert np.isfinite(m.logits(-1)).all()
        assert timed_decode(m, 17) > 0 and len(m.tokens) == len(prompt)


@pytest.mark.slow
def test_run_on_the_cpu_writes_the_profile_measurements_and_simulate(qwen_draft, tmp_path, capsys):
    out = tmp_path / "out"
    rc = gpu_kit.main(["run", "--cpu", "--shapes", "tiny", "--skip-build", "--kit", str(tmp_path / "no-kit"),
                       "--site", str(tmp_path / "no-site"), "--work", str(tmp_path / "work"), "--out", str(out),
                       "--reps", "2", "--plain-tokens", "16", "--round-tokens", "24"])
    assert rc == 0
    (profile_path,) = out.glob("profile-*.json")
    profile = json.loads(profile_path.read_text())
    check_profile(profile)
    assert profile["kind"] == "measured-cpu" and profile_path.name == f"profile-{profile['name']}.json"
    from specchat.harness.simulate import load_profile

    assert load_profile(str(profile_path)).token_s == profile["token_s"]["value"]  # the simulator reads it
    m = json.loads((out / "measurements.json").read_text())
    assert sorted(m["verify_s"], key=int) == [str(n) for n in range(1, 18)]
    assert m["rounds"]["drafting_rounds"] > 0 and set(m["rounds"]["k"]) == {8}  # a fixed K, every round
    assert (out / "simulate.txt").read_text()
    assert "token_s" in capsys.readouterr().out


@pytest.mark.real_models
@pytest.mark.skipif(not os.environ.get("SPECCHAT_LLAMA_SDIST"), reason="SPECCHAT_LLAMA_SDIST names no sdist")
def test_the_kit_stays_under_its_size_limit(qwen_draft, tmp_path):
    sdist = Path(os.environ["SPECCHAT_LLAMA_SDIST"])
    kit = tmp_path / "kit"
    kit.mkdir()
    strip_sdist(sdist, kit / "s.tar.xz")
    write_tokenizer_gguf(qwen_draft, kit / TOKENIZER_FILE)
    assert folder_size(kit) < KIT_LIMIT_BYTES // 2  # the wheels are < 1 MiB more


# -- agreement pairs ----------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.9, 1.0])
def test_a_draft_bigram_is_a_permutation_equal_to_the_target_on_alpha_of_its_tokens(alpha):
    ids = np.arange(5, 4005)  # the normal tokens; 0-4 and 4005+ are specials
    nxt = bigram_cycle(ids, 4100, seed=1)
    assert sorted(nxt[ids]) == list(ids) and (nxt[:5] == -1).all() and (nxt[4005:] == -1).all()
    assert len(greedy_path(nxt, 5, 4001)) == 4001 and greedy_path(nxt, 5, 4001)[-1] == 5  # one cycle
    draft = follow_share(nxt, alpha, seed=7)
    assert sorted(draft[ids]) == list(ids)  # a bigram for every normal token, each next token once
    share = float(np.mean(draft[ids] == nxt[ids]))
    assert abs(share - alpha) <= 4 * math.sqrt(max(alpha * (1 - alpha), 1e-9) / len(ids)) + 1e-9


def test_bad_alphas_are_one_line():
    with pytest.raises(SystemExit, match="between 0 and 1"):
        parse_alphas("0.5,1.5")
    with pytest.raises(SystemExit, match="between 0 and 1"):
        parse_alphas("x")
    assert parse_alphas("0.9, 0.6,0.9") == [0.6, 0.9]


@pytest.fixture(scope="module")
def tiny_pairs(tmp_path_factory):
    """Tiny-shape agreement pairs with the real Qwen tokenizer (F16: seconds on two cores)."""
    model = Path(os.environ.get("SPECCHAT_TEST_MODELS", "")) / TEST_MODEL
    if not model.is_file():
        pytest.skip("the Qwen test model is not provisioned (scripts/test_models.py)")
    tok = Tokenizer.from_gguf(model)
    out = tmp_path_factory.mktemp("pairs")
    return make_pairs("tiny", tok, [0.5, 0.9], out, threads=2, quantized=False), tok


@pytest.mark.real_models
def test_every_answer_of_a_pair_is_a_text_of_whole_words_that_a_prompt_can_hold_token_for_token(qwen_draft, tmp_path):
    """The cycle starts at the newline every chat answer follows, through whole-word tokens: the code-edit prompt
    holds that answer as text, which the real tokenizer turns back into the answer's own tokens (a draft from the
    prompt is a token-for-token copy) except at the changed words."""
    import llama_cpp

    tok = Tokenizer.from_gguf(qwen_draft)
    pieces = tok.value("tokenizer.ggml.tokens")
    lead = answer_lead(tok, seed=1)
    nxt = pair_cycle(tok, tok.n_tokens, seed=1)
    answer = greedy_path(nxt, pieces.index(NEWLINE), 300)[1:]
    assert answer == lead[1:300] and all(pieces[t].startswith("\u0120") for t in answer)
    ids = np.flatnonzero(nxt >= 0)
    assert sorted(nxt[ids].tolist()) == ids.tolist()  # still a permutation of the normal tokens

    pairs = AgreementPairs(tmp_path / "t.gguf", {}, 1, "tiny")
    suite = edit_suite(pairs, tok, tmp_path / "edit.jsonl", tokens=256)
    [line] = suite.read_text().splitlines()
    text = json.loads(line)["messages"][0]["content"]
    assert text.startswith(EDIT_ASK)
    vocab = llama_cpp.Llama(str(qwen_draft), vocab_only=True, verbose=False)
    held = vocab.tokenize(text[len(EDIT_ASK):].encode(), add_bos=False, special=False)
    assert len(held) == 257  # one token per word: the answer's 256 tokens and the one after
    changed = sum(a != b for a, b in zip(held, answer, strict=False))
    assert 0 < changed <= 257 * 3 / EDIT_EVERY  # about one word in EDIT_EVERY, by chance


@pytest.mark.real_models
def test_the_target_follows_its_bigram_and_each_draft_agrees_at_its_alpha(tiny_pairs):
    pairs, tok = tiny_pairs
    n = 512

    got = check_pairs(pairs, tok, n=n, gpu=False)

    assert got["target"] == 1.0
    for alpha in (0.5, 0.9):  # within 4 standard errors of a binomial share (and a little for rounding)
        assert abs(got[f"draft {alpha:g}"] - alpha) <= 4 * math.sqrt(alpha * (1 - alpha) / n) + 0.01, got


@pytest.mark.real_models
def test_specchats_greedy_answer_is_the_same_in_every_mode_on_an_agreement_pair(tiny_pairs):
    from specchat.engine.events import Done, TokensEmitted
    from specchat.engine.pair import PairConfig, SpeculativePair
    from specchat.engine.runtime import ModelOptions
    from specchat.engine.settings import ControllerSettings, Mode

    pairs, _tok = tiny_pairs
    opts = ModelOptions(n_ctx=1024, n_gpu_layers=0)
    # no rails: forced draft mode drafts throughout, so its acceptance is measured on the whole answer.  A
    # tiny draft costs what its tiny target does, so no K pays and the rail stops it after 8 rounds
    config = PairConfig(target=pairs.target, draft=pairs.drafts[0.9], target_options=opts,
                        controller=ControllerSettings(cooldown_tokens=0))
    answers, counts = {}, {}
    with SpeculativePair(config) as pair:
        prompt = pair.target.tokenize("def fibonacci(n):", add_special=False)
        for mode in (Mode.BASELINE, Mode.DRAFT, Mode.LOOKUP, Mode.AUTO):
            pair.target.clear()
            if pair.draft is not None:
                pair.draft.clear()
            tokens, done = [], None
            for ev in pair.generate(prompt, mode=mode, max_tokens=96):
                if isinstance(ev, TokensEmitted):
                    tokens += ev.token_ids
                elif isinstance(ev, Done):
                    done = ev
            answers[mode], counts[mode] = tokens, done.stats.counts

    assert len(answers[Mode.BASELINE]) == 96
    assert all(answers[m] == answers[Mode.BASELINE] for m in answers), {m.value: a[:12] for m, a in answers.items()}
    draft = counts[Mode.DRAFT]
    # the draft ran, and was right at about alpha per token: accepted / (accepted + rejections), since a
    # round stops at its first rejection (accepted / drafted falls with K: 0.70 at the K the costs chose)
    assert draft.drafted > 20 and 0.75 <= draft.accepted / (draft.accepted + draft.rejections) <= 1.0, draft


# -- the side by side, proven on the CPU: tiny pairs, the test llama-server ---------------------

LLAMA_SERVER = test_server.cached_binary(test_server.build_root())  # read at collection (the XDG dirs move)


@pytest.mark.real_models
@pytest.mark.real_server
def test_measure_on_the_cpu_writes_one_report_of_specchat_beside_llama_server(qwen_draft, tmp_path, capsys):
    if LLAMA_SERVER is None:
        reason = "no llama-server built: run python scripts/test_server.py"
        pytest.fail(reason) if os.environ.get("CI") else pytest.skip(reason)
    out = tmp_path / "out"

    rc = gpu_kit.main(["measure", "--cpu", "--shape", "tiny", "--f16", "--alphas", "0.9", "--tokenizer", str(qwen_draft),
                       "--work", str(tmp_path / "pairs"), "--out", str(out), "--site", str(tmp_path / "no-site"),
                       "--llama-server", str(LLAMA_SERVER), "--llama-bench", str(tmp_path / "none"),
                       "--max-tokens", "24", "--tasks", "code", "--reps", "2", "--depth", "64", "--repeat", "2"])

    assert rc == 0
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["bench-a0.9.json", "bench-edit.json", "logs.tar.gz",
                                                                    "report.md", "results.json"]
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] is True and result["stage"] == "done"
    assert result["agreement"]["target"] == 1.0 and result["agreement"]["draft 0.9"] > 0.8
    runs = result["bench"]["0.9"]["runs"]
    labels = {r["mode"] for r in runs}
    assert labels == {"baseline", "draft", "lookup", "auto", "server", "server-2", "server-plain"}
    local = {r["prompt_id"]: r["token_ids"] for r in runs if r["mode"] == "baseline"}
    for r in runs:  # lossless everywhere: every contender writes the target's greedy answer
        assert r["token_ids"][:len(local[r["prompt_id"]])] == local[r["prompt_id"]][:len(r["token_ids"])], r["mode"]
    drafted = [r for r in runs if r["mode"] == "draft"]
    assert sum(r["drafted"] for r in drafted) > 0 and sum(r["accepted"] for r in drafted) > 0
    server = [r for r in runs if r["mode"] == "server"]
    assert all(r["tokens"] > 0 for r in server)
    # ngram-mod starts afresh for each repeat (its pool would copy the repeat before), the others run on
    pids = result["bench"]["0.9"]["server_pids"]
    assert {k: len(set(v)) for k, v in pids.items()} == {"draft-simple n_max 3": 1, "ngram-mod": 2, "plain": 1}
    assert {r["repeat"] for r in runs if r["mode"] == "server-2"} == {0, 1}
    costs = result["costs"]
    assert set(costs["target"]["steady_s"]) == set(costs["target"]["churn_s"]) >= {"1", "4", "16"}
    sampling = result["sampling"]["methods"]  # the draft's choice four ways, each in its own process
    assert sampling["host"]["per_token_s"] and sampling["greedy"]["same_tokens"], sampling
    assert sampling["top1prob"]["same_tokens"] and sampling["top1prob"]["p_error"] < 1e-4, sampling
    report = (out / "report.md").read_text()
    # on a CPU: draft-simple at its default n_max only (every server holds its own copy of the target) and
    # ngram-mod, llama.cpp's draft-free mode
    for needle in ("## alpha 0.9", "llama-server draft-simple (n_max 3)", "in llama.cpp's graph", "llama-server ngram-mod",
                   "llama-server plain", "SpecChat auto", "cycled / steady", "x SpecChat plain",
                   "## Code-edit prompts (the pair at alpha 0.9)", "## Issue 22's goals"):
        assert needle in report
    # the code-edit prompts: every contender writes the same answer, a copy of the prompt's text that prompt
    # lookup drafts from the prompt; each goal of issue 22 is judged, or says it was not run
    edit = result["edit"]["bench"]["runs"]
    assert {r["mode"] for r in edit} == labels
    local = {r["prompt_id"]: r["token_ids"] for r in edit if r["mode"] == "baseline"}
    for r in edit:
        assert r["token_ids"][:len(local[r["prompt_id"]])] == local[r["prompt_id"]][:len(r["token_ids"])], r["mode"]
    lookup = [r for r in edit if r["mode"] == "lookup"]
    assert sum(r["accepted"] for r in lookup) >= 12, lookup  # most of 2 x 24 tokens, copied from the prompt
    goals = report.split("## Issue 22's goals")[1]
    assert "alpha 0.9: draft, auto at least 1.30x SpecChat plain: " in goals and "alpha 0.8" in goals
    assert "- (not run)" in goals and "code edits: every speculative mode at least llama-server's ngram-mod" in goals


SCRIPTS = Path(gpu_kit.__file__).resolve().parent
_IMPORTS = """
import sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import gpu_kit, gpukit.build, gpukit.common, gpukit.cost_profile, gpukit.measure, gpukit.models, gpukit.pack
import gpukit.pairs
print(sorted(m for m in set(sys.modules) - before
             if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ("gpu_kit", "gpukit")))
"""


def test_the_command_line_and_its_package_import_the_standard_library_only():
    """``python3 scripts/gpu_kit.py`` runs on the GPU image before the carried site is on sys.path, and
    llama.cpp's library must load before numpy: nothing outside the standard library at import time."""
    res = subprocess.run([sys.executable, "-c", _IMPORTS, str(SCRIPTS)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert res.stdout.strip() == "[]", res.stdout


@pytest.mark.parametrize("command", ["pack", "build", "run", "pairs", "measure"])
def test_every_subcommand_answers_help_from_the_script_itself(command):
    res = subprocess.run([sys.executable, str(SCRIPTS / "gpu_kit.py"), command, "--help"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith(f"usage: gpu_kit.py {command}"), res.stderr


def test_build_wait_only_waits_for_the_detached_build_and_says_how_it_ended(tmp_path, capsys):
    site = tmp_path / "site"
    wait = ["build", "--site", str(site), "--kit", str(tmp_path / "no-kit"), "--wait", "0.1"]
    assert gpu_kit.main(wait) == 1  # nothing started here: it says so, and builds nothing
    assert "never started" in capsys.readouterr().out and not (tmp_path / "src").exists()
    set_build_status(site, state="running", pid=os.getpid(), started=0.0)
    assert gpu_kit.main(wait) == 3  # still running after the wait: call again
    set_build_status(site, state="running", pid=2 ** 22 + 12345)
    assert gpu_kit.main(wait) == 1 and "gone" in capsys.readouterr().out  # the machine went back
    set_build_status(site, state="done", seconds=203.0)
    assert gpu_kit.main(wait) == 0 and "build done in 203 s" in capsys.readouterr().out
    set_build_status(site, state="failed", error="the build failed (2)")
    assert gpu_kit.main(wait) == 1 and "the build failed (2)" in capsys.readouterr().out


def test_a_tree_built_here_travels_as_one_archive_and_is_laid_out_as_the_build_lays_it(tmp_path):
    """``build --cuda-from-index`` packs its tree for the GPU machine; ``build`` there unpacks it in place
    of compiling: the libraries and tools in the build's bin/, the bindings over them, links kept."""
    site = tmp_path / "here" / "site"
    bin_dir = build_dir(site) / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("libggml-cuda.so", "libggml-base.so", "libllama.so.0.5.0", "llama-server", "llama-bench",
                 "test-backend-ops", "libother.so"):
        (bin_dir / name).write_bytes(name.encode())
    (bin_dir / "libllama.so").symlink_to("libllama.so.0.5.0")
    (site / "llama_cpp").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("# bindings\n")
    (site / "llama_cpp" / "lib").symlink_to(bin_dir, target_is_directory=True)
    kit = tmp_path / "kit"
    kit.mkdir()
    packed = pack_prebuilt(site, kit)
    assert packed == kit / PREBUILT
    with tarfile.open(packed) as tar:
        names = sorted(tar.getnames())
    assert "bin/test-backend-ops" not in names and "bin/libother.so" not in names  # only what runs there
    assert {"bin/libggml-cuda.so", "bin/libllama.so", "bin/llama-server", "bin/llama-bench",
            "llama_cpp/__init__.py"} <= set(names) and "llama_cpp/lib" not in names

    there = tmp_path / "gpu" / "site"
    unpack_prebuilt(kit, there)
    lib = there / "llama_cpp" / "lib"
    assert (lib / "llama-server").read_bytes() == b"llama-server" and lib.resolve() == build_dir(there) / "bin"
    assert (lib / "libllama.so").is_symlink() and (lib / "libllama.so").read_bytes() == b"libllama.so.0.5.0"
    assert tool_path(there, "llama-bench").is_file()


def test_packing_without_a_cuda_build_says_so(tmp_path):
    site = tmp_path / "site"
    (build_dir(site) / "bin").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no libggml-cuda"):
        pack_prebuilt(site, tmp_path)


@pytest.mark.real_models
def test_a_measure_cut_short_still_leaves_what_it_measured(qwen_draft, tmp_path, monkeypatch):
    """A GPU call that runs out of time (or a stage that fails) returns the stages before it."""
    def out_of_time(*args, **kwargs):
        raise KeyboardInterrupt  # what the device call's timeout does to the process, near enough

    monkeypatch.setattr("gpukit.measure.measure_costs", out_of_time)  # where cmd_measure looks it up
    (tmp_path / "server").write_text("")  # never started: the run stops before the benches
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        gpu_kit.main(["measure", "--cpu", "--shape", "tiny", "--f16", "--alphas", "0.9", "--tokenizer", str(qwen_draft),
                      "--work", str(tmp_path / "pairs"), "--out", str(out), "--site", str(tmp_path / "no-site"),
                      "--llama-server", str(tmp_path / "server"), "--llama-bench", str(tmp_path / "none")])
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] is False and result["stage"] == "llama-bench"
    assert result["agreement"]["target"] == 1.0 and "costs" not in result


def test_a_fresh_site_is_on_the_path_once_the_carried_wheels_are_in_it(tmp_path, monkeypatch):
    """On the GPU machine the build call makes the site itself, after the command line put the site on sys.path
    only if it was there.  Unpacking then imports a carried wheel (platformdirs, as the CUDA runtime is looked
    for), which the GPU image's python does not have: the call died there, before anything was measured."""
    import gpukit.build
    import gpukit.pack

    here = tmp_path / "here" / "site"
    (build_dir(here) / "bin").mkdir(parents=True)
    for name in ("libggml-cuda.so", "llama-server"):
        (build_dir(here) / "bin" / name).write_bytes(name.encode())
    (here / "llama_cpp").mkdir(parents=True)
    (here / "llama_cpp" / "__init__.py").write_text("# bindings\n")
    kit = tmp_path / "kit"
    kit.mkdir()
    pack_prebuilt(here, kit)

    def install_wheels(kit: Path, site: Path) -> None:  # what pip --target leaves: a module only the site has
        site.mkdir(parents=True, exist_ok=True)
        (site / "carried_only_here.py").write_text("FROM = 'the carried wheels'\n")

    found = []

    def link_cuda_runtime(bin_dir: Path) -> list[str]:
        import carried_only_here  # noqa: PLC0415  (as link_cuda_runtime imports platformdirs)

        found.append(carried_only_here.FROM)
        return []

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(gpukit.build, "install_wheels", install_wheels)
    monkeypatch.setattr(gpukit.pack, "link_cuda_runtime", link_cuda_runtime)
    monkeypatch.setattr(gpukit.build, "preload_cuda_shim", lambda site: None)
    site = tmp_path / "gpu" / "site"
    assert gpu_kit.main(["build", "--kit", str(kit), "--site", str(site)]) == 0
    assert found == ["the carried wheels"] and (site / "llama_cpp" / "lib" / "llama-server").is_file()
    sys.modules.pop("carried_only_here", None)
