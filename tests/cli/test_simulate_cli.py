"""``specchat bench --trace`` and ``specchat simulate``, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specchat.harness.simulate import shipped_profiles
from specchat.harness.trace import PromptTrace, Trace, load_trace


def specchat(*args: object, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0]


def small_trace(tmp_path):
    n = 30
    match = [min(4, n - 1 - i) if i % 5 else 0 for i in range(n - 1)]
    p = [[900] * 8 for _ in range(n - 1)]
    pt = PromptTrace("p1", "code", 20, 64, list(range(n)), True, match, p, p, [0] * (n - 1), [0] * (n - 1))
    path = tmp_path / "t.json"
    Trace("t.gguf", "d.gguf", 8, 3, [pt]).save(path)
    return path


def test_simulate_every_shipped_profile(tmp_path):
    out = tmp_path / "sim.json"
    proc = specchat("simulate", "--trace", small_trace(tmp_path), "--profile", "all", "--json", out)
    assert proc.returncode == 0, proc.stderr
    for name in shipped_profiles():
        assert f"profile {name}" in proc.stdout
    assert "SpecChat auto" in proc.stdout and "goal: auto >=" in proc.stdout
    docs = json.loads(out.read_text())
    assert len(docs) == len(shipped_profiles())
    assert {r["policy"] for r in docs[0]["rows"]} >= {"plain", "k1", "k8", "llama-default", "auto"}


def test_simulate_refuses_bad_input_in_one_line(tmp_path):
    trace = small_trace(tmp_path)
    one_line_error(specchat("simulate", "--trace", tmp_path / "none.json", "--profile", "all"), "no such trace")
    (tmp_path / "bad.json").write_text('{"format": "specchat-agreement-trace", "version": 1, "k_max": 4}')
    one_line_error(specchat("simulate", "--trace", tmp_path / "bad.json", "--profile", "all"), "bad.json")
    one_line_error(specchat("simulate", "--trace", trace, "--profile", "no-such-gpu"), "no shipped cost profile")
    one_line_error(specchat("simulate", "--trace", trace, "--profile", "all", "--noise", "3"), "between 0 and 1")
    # the app's own --profile (the user's profile folder) still works before the command word
    ok = specchat("--profile", tmp_path / "user", "simulate", "--trace", trace, "--profile", shipped_profiles()[0])
    assert ok.returncode == 0, ok.stderr


@pytest.mark.real_models
def test_bench_records_a_trace_and_a_profile_and_checks_the_simulator(smollm, tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(json.dumps({"id": f"p{i}", "task": t, "messages": [{"role": "user", "content": c}]})
                               for i, (t, c) in enumerate([("code", "Write hello world in C."),
                                                           ("chat", "Say hi.")])) + "\n")
    trace, profile = tmp_path / "trace.json", tmp_path / "cpu.json"
    proc = specchat("bench", "--target", smollm, "--draft", smollm, "--suite", suite, "--max-tokens", "16",
                    "--modes", "baseline,draft,auto", "--k-max", "4", "--trace", trace, "--trace-k-max", "4",
                    "--save-profile", profile)
    assert proc.returncode == 0, proc.stderr
    assert "simulator check" in proc.stdout and "agreement trace" in proc.stdout
    t = load_trace(trace)
    assert [p.id for p in t.prompts] == ["p0", "p1"] and t.k_max == 4
    for p in t.prompts:  # a model drafting for itself agrees with itself as far as the answer goes
        assert p.draft_match == [min(4, len(p.tokens) - 1 - i) for i in range(len(p.tokens) - 1)]
    sim = specchat("simulate", "--trace", trace, "--profile", profile)
    assert sim.returncode == 0, sim.stderr
    assert "(measured-cpu)" in sim.stdout and "goal: auto >= 0.97x plain per task" in sim.stdout


def test_simulate_takes_a_trained_drafters_costs_and_refuses_a_bad_file_in_one_line(tmp_path):
    costs = tmp_path / "dflash.json"
    costs.write_text(json.dumps({"specchat_drafter_costs": 1, "kind": "draft-dflash", "call_x": 0.15, "token_x": 0,
                                 "block": 16}))
    proc = specchat("simulate", "--agreement", "0.9", "--profile", "rtx3090-qwen32b-q4_k_m", "--drafter-costs", costs)
    assert proc.returncode == 0, proc.stderr
    assert "drafter draft-dflash: a call 0.15x + 0.000x a pass, blocks of up to 16" in proc.stdout
    costs.write_text('{"specchat_drafter_costs": 1, "kind": "draft-dflash", "call_x": NaN, "token_x": 0}')
    one_line_error(specchat("simulate", "--agreement", "0.9", "--profile", "all", "--drafter-costs", costs),
                   "dflash.json", "'call_x' must be a number from 0 to 100")
