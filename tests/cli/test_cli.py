"""The command-line contract of docs/ARCHITECTURE.md, run as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def specchat(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0]


def test_missing_model_file(tmp_path):
    proc = specchat("chat", "--target", tmp_path / "none.gguf", "hi")
    assert_one_line_error(proc, 2, "no such file")


def test_text_file_named_gguf(tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_text("hello")
    assert_one_line_error(specchat("chat", "--target", fake, "hi"), 2, "not a GGUF file")


def test_truncated_model(tmp_path, smollm):
    cut = tmp_path / "cut.gguf"
    with smollm.open("rb") as src:
        cut.write_bytes(src.read(20_000_000))
    assert_one_line_error(specchat("chat", "--target", cut, "hi"), 2, "truncated")


def test_bad_flag():
    assert_one_line_error(specchat("chat", "--target", "x.gguf", "--mode", "turbo", "hi"), 2, "invalid choice")
    assert_one_line_error(specchat("bench", "--target", "x.gguf", "--max-tokens", "0"), 2, "max-tokens")


@pytest.mark.real_models
def test_models_check_exit_codes(qwen_target, qwen_draft, gemma):
    ok = specchat("models", "check", qwen_target, qwen_draft)
    assert ok.returncode == 0 and ok.stdout.startswith("compatible")
    bad = specchat("models", "check", qwen_target, gemma, "--json")
    assert bad.returncode == 3
    assert json.loads(bad.stdout) == {"compatible": False, "reason": "tokenizer type differs: 'gpt2' vs 'llama'"}


@pytest.mark.real_models
def test_chat_refuses_an_incompatible_pair(qwen_target, smollm):
    proc = specchat("chat", "--target", qwen_target, "--draft", smollm, "hi")
    assert_one_line_error(proc, 3, "cannot draft for", "vocabulary sizes differ")


@pytest.mark.real_models
def test_chat_streams_an_answer_and_ends_with_stats(smollm):
    proc = specchat("chat", "--target", smollm, "--draft", smollm, "--mode", "draft", "--max-tokens", "24",
                    "Count from 1 to 5.")
    assert proc.returncode == 0, proc.stderr
    *answer, stats = proc.stdout.strip().splitlines()
    assert "3" in "\n".join(answer)
    assert stats.startswith("-- ") and "tok/s" in stats and "draft accepted" in stats and "stop:" in stats


@pytest.mark.real_models
def test_bench_prints_the_table_and_writes_every_field(smollm, tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        json.dumps({"id": "p1", "task": "code", "messages": [{"role": "user", "content": "Write hello world in C."}]})
        + "\n"
        + json.dumps({"id": "p2", "task": "chat", "messages": [{"role": "user", "content": "Say hi."}]})
        + "\n"
    )
    out = tmp_path / "bench.json"
    proc = specchat("bench", "--target", smollm, "--draft", smollm, "--suite", suite, "--max-tokens", "16",
                    "--repeat", "2", "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert "decode tok/s" in proc.stdout and "x plain" in proc.stdout
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    assert len(runs) == 2 * 2 * 4  # prompts x repeats x modes
    fields = {"mode", "task", "prompt_id", "tokens", "token_ids", "output", "decode_tok_s", "prefill_tok_s",
              "drafted", "accepted", "token_acceptance", "sequence_acceptance", "rounds", "decode_s", "draft_s",
              "verify_s", "overhead_s"}
    for run in runs:
        assert fields <= run.keys()
    assert {r["mode"] for r in runs} == {"baseline", "draft", "lookup", "auto"}
    base = next(r for r in runs if r["mode"] == "baseline")
    assert base["drafted"] == 0 and base["token_acceptance"] is None
    # greedy self-drafting reproduces the plain output exactly
    for r in runs:
        twin = next(b for b in runs if b["mode"] == "baseline" and b["prompt_id"] == r["prompt_id"])
        assert r["token_ids"] == twin["token_ids"]


@pytest.mark.real_models
def test_bench_says_whether_lookup_remembers_earlier_runs_and_first_sight_empties_it(smollm, tmp_path):
    """A repeat can copy the run before from prompt lookup's memory (as Regenerate does); the bench says so,
    and --first-sight measures every run as a first question.  Whether a copy pays is this machine's
    business (a loaded two-core CPU's 2-token verify can cost what it wins), so what is drafted is checked
    with a fake pair whose decodes cost the same on any machine (tests/harness/test_bench.py)."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "poem", "task": "chat",
                                 "messages": [{"role": "user", "content": "Write a short poem about the sea."}]}))

    def lookup_repeat(*flags) -> tuple[str, dict]:
        out = tmp_path / "bench.json"
        proc = specchat("bench", "--target", smollm, "--modes", "baseline,lookup", "--suite", suite,
                        "--max-tokens", "24", "--repeat", "2", "--json", out, *flags)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(out.read_text())
        assert doc["first_sight"] is bool(flags)
        return proc.stdout, next(r for r in doc["runs"] if r["mode"] == "lookup" and r["repeat"] == 1)

    stdout, kept = lookup_repeat()
    assert "lookup memory: kept across runs" in stdout and "--first-sight" in stdout  # said, not silent
    stdout, fresh = lookup_repeat("--first-sight")
    assert "lookup memory: emptied before every run" in stdout
    assert fresh["token_ids"] == kept["token_ids"] and len(fresh["token_ids"]) == 24  # the same answer


def test_bench_rejects_a_bad_suite(tmp_path, smollm):
    suite = tmp_path / "bad.jsonl"
    suite.write_text("{not json}\n")
    assert_one_line_error(specchat("bench", "--target", smollm, "--modes", "baseline", "--suite", suite), 2, "bad.jsonl:1")


def test_config_file_supplies_the_pair_and_the_draft_length(smollm, tmp_path):
    """A deployment's config.toml: target, draft, mode and K bounds without a single flag."""
    cfg = tmp_path / "deploy.toml"
    cfg.write_text(f'target = "{smollm}"\ndraft = "{smollm}"\ndefault_mode = "draft"\nk_min = 1\nk_max = 2\n'
                   "n_ctx = 1024\n")
    proc = specchat("--config", cfg, "chat", "--max-tokens", "24", "Count from 1 to 5.")
    assert proc.returncode == 0, proc.stderr
    stats = proc.stdout.strip().splitlines()[-1]
    assert "draft accepted" in stats  # the config's draft model, in the config's mode
    k = float(stats.split("mean K ")[1].split()[0].rstrip(","))
    assert 0 < k <= 2  # the config's k_max
    shown = specchat("--config", cfg, "config")
    assert 'k_max = 2' in shown.stdout and str(cfg) in shown.stdout


@pytest.mark.parametrize("text, needle", [
    ("k_max = 'lots'", "k_max: must be a whole number"),
    ("min_token_acceptance = 2", "min_token_acceptance: must be between 0 and 1"),
    ("version = 99", "written by a newer SpecChat (config version 99"),  # an unknown key is kept (test_config.py)
])
def test_a_bad_config_value_is_one_line_naming_the_key(tmp_path, text, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text + "\n")
    assert_one_line_error(specchat("--config", cfg, "chat", "hi"), 2, needle)


def test_a_missing_config_file_is_refused_not_ignored(tmp_path):
    assert_one_line_error(specchat("--config", tmp_path / "typo.toml", "config"), 2, "no such config file")


@pytest.mark.real_models
def test_an_installed_model_by_name_then_the_last_pair_used(smollm, tmp_path):
    """--pair NAME for an installed single model; afterwards 'chat' and 'bench' without a model flag
    use the last pair used, recorded in the profile's registry."""
    profile = tmp_path / "profile"
    imported = specchat("--profile", profile, "models", "import", smollm)
    assert imported.returncode == 0, imported.stderr
    name = smollm.name.removesuffix(".gguf")
    proc = specchat("--profile", profile, "chat", "--pair", name, "--max-tokens", "8", "Count from 1 to 5.")
    assert proc.returncode == 0, proc.stderr
    last = json.loads((profile / "data" / "registry.json").read_text())["last_pair"]
    assert last == {"target": str(smollm.resolve()), "draft": None}
    again = specchat("--profile", profile, "chat", "--max-tokens", "8", "Count from 1 to 5.")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[:-1] == proc.stdout.splitlines()[:-1]  # greedy: same model, same answer
    bench = specchat("--profile", profile, "bench", "--modes", "baseline", "--max-tokens", "4", "--repeat", "1")
    assert bench.returncode == 0, bench.stderr
    assert bench.stdout.startswith(f"target {smollm.name};")
