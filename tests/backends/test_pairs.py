"""Which pair, and how it is loaded: one loader for the window and the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.gguf_samples import write_tiny
from specchat.backends.pairs import PairError, default_pair, fit_problem, pair_config, resolve_pair
from specchat.config import AppConfig, ConfigError
from specchat.models.catalog import load_catalog
from specchat.models.registry import Registry
from specchat.profile import Profile

QWEN = next(p for p in load_catalog(Path("/nonexistent")) if p.id == "qwen2.5-coder-1.5b")


@pytest.fixture
def profile(tmp_path) -> Profile:
    return Profile.at(tmp_path / "profile")


@pytest.fixture
def ggufs(tmp_path) -> list[Path]:
    (tmp_path / "m").mkdir()
    return [write_tiny(tmp_path / "m" / f"model-{i}.gguf", n_tensors=i + 1) for i in range(3)]


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "QT_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[var] = str(tmp_path / "xdg" / var.lower())
    return env


def specchat(tmp_path: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specchat", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=clean_env(tmp_path))


def one_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- pair_config ---------------------------------------------------------------------------


def test_pair_config_takes_the_settings_and_the_profile(profile, ggufs, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("n_ctx = 2048\ngpu_layers = 10\ndraft_gpu_layers = 0\nthreads = 3\nk_min = 2\nk_max = 5\n"
                   "min_token_acceptance = 0.4\n")
    pc = pair_config(AppConfig(cfg), profile, ggufs[0], ggufs[1])
    assert (pc.target, pc.draft) == (ggufs[0], ggufs[1])
    t, d = pc.target_options, pc.draft_options
    assert (t.n_ctx, t.n_gpu_layers, t.n_threads) == (2048, 10, 3)
    assert (d.n_ctx, d.n_gpu_layers, d.n_threads) == (2048, 0, 3)
    assert (pc.controller.k_min, pc.controller.k_max, pc.controller.min_token_acceptance) == (2, 5, 0.4)
    assert pc.calibration_cache == profile.calibration_cache


def test_overrides_win_and_are_checked_like_the_config(profile, ggufs, tmp_path):
    config = AppConfig(tmp_path / "none.toml")
    pc = pair_config(config, profile, ggufs[0], None, n_ctx=1024, threads=None, gpu_layers=0, k_max=1)
    assert (pc.target_options.n_ctx, pc.target_options.n_gpu_layers, pc.target_options.n_threads) == (1024, 0, 0)
    assert (pc.controller.k_min, pc.controller.k_max) == (1, 1) and pc.draft is None
    with pytest.raises(ConfigError, match="k_max: must be between 1 and 32"):
        pair_config(config, profile, ggufs[0], None, k_max=40)
    with pytest.raises(TypeError):
        pair_config(config, profile, ggufs[0], None, ctx=1024)


def test_a_missing_file_is_one_line(profile, tmp_path, ggufs):
    config = AppConfig(tmp_path / "none.toml")
    with pytest.raises(PairError) as err:
        pair_config(config, profile, ggufs[0], tmp_path / "gone.gguf")
    assert str(err.value) == f"{tmp_path / 'gone.gguf'}: no such file"


# -- the fit check before loading ------------------------------------------------------------


def test_fit_problem_says_why_in_one_line(profile, ggufs, tmp_path):
    pc = pair_config(AppConfig(tmp_path / "none.toml"), profile, ggufs[0], ggufs[1])
    assert fit_problem(pc, free=(None, 1 << 30)) is None
    problem = fit_problem(pc, free=(None, 100))
    assert problem.startswith("model-0.gguf + model-1.gguf: does not fit: needs ") and "\n" not in problem
    assert fit_problem(pc, free=(1 << 30, 100)) is None  # the GPU holds it


def test_fit_problem_ignores_vram_when_asked_for_the_cpu(profile, ggufs, tmp_path):
    config = AppConfig(tmp_path / "none.toml").replaced({"gpu_layers": 0, "draft_gpu_layers": 0})
    pc = pair_config(config, profile, ggufs[0], ggufs[1])
    assert fit_problem(pc, free=(1 << 30, 100)) is not None


def test_fit_problem_leaves_a_bad_file_to_the_loader(profile, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_text("hello")
    pc = pair_config(AppConfig(tmp_path / "none.toml"), profile, fake)
    assert fit_problem(pc, free=(None, 100)) is None


# -- --pair ID and the default pair ----------------------------------------------------------


def pulled(profile: Profile, target: Path, draft: Path | None) -> None:
    """What 'specchat models pull qwen2.5-coder-1.5b' leaves in the registry."""
    reg = Registry(profile.registry)
    reg.add(target, source=QWEN.target.ref)
    if draft is not None:
        reg.add(draft, source=QWEN.drafts[0].ref)


def test_a_pulled_catalog_pair_is_found_by_its_id(profile, ggufs):
    pulled(profile, ggufs[0], ggufs[1])
    Registry(profile.registry).add(ggufs[2], source="other/repo/x.gguf")
    assert resolve_pair("qwen2.5-coder-1.5b", profile) == (ggufs[0].resolve(), ggufs[1].resolve())


def test_a_pair_not_downloaded_says_how_to_get_it(profile, ggufs):
    with pytest.raises(PairError) as err:
        resolve_pair("qwen2.5-coder-1.5b", profile)
    assert str(err.value) == "pair 'qwen2.5-coder-1.5b' is not downloaded: run 'specchat models pull qwen2.5-coder-1.5b'"
    pulled(profile, ggufs[0], None)
    with pytest.raises(PairError, match="its draft model is not downloaded: run 'specchat models pull"):
        resolve_pair("qwen2.5-coder-1.5b", profile)


def test_a_pulled_file_changed_on_disk_counts_as_not_downloaded(profile, ggufs):
    pulled(profile, ggufs[0], ggufs[1])
    with ggufs[0].open("ab") as f:
        f.write(b"\0")
    with pytest.raises(PairError, match="is not downloaded"):
        resolve_pair("qwen2.5-coder-1.5b", profile)


def test_an_installed_model_by_name_is_a_single_model(profile, ggufs):
    Registry(profile.registry).add(ggufs[2])
    assert resolve_pair("model-2", profile) == (ggufs[2].resolve(), None)
    with pytest.raises(PairError) as err:
        resolve_pair("nothing-like-it", profile)
    assert str(err.value) == "no pair or installed model 'nothing-like-it' (see 'specchat models list')"


def test_a_name_shared_by_two_models_is_ambiguous(profile, tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        Registry(profile.registry).add(write_tiny(tmp_path / d / "same.gguf"))
    with pytest.raises(PairError, match="'same' names 2 installed models .*: give the file with --target"):
        resolve_pair("same", profile)


def test_default_pair_is_the_config_then_the_last_pair(profile, ggufs, tmp_path):
    none = AppConfig(tmp_path / "none.toml")
    assert default_pair(none, profile) is None
    Registry(profile.registry).set_last_pair(ggufs[0], ggufs[1])
    assert default_pair(none, profile) == (ggufs[0].resolve(), ggufs[1].resolve())
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'target = "{ggufs[2]}"\n')
    assert default_pair(AppConfig(cfg), profile) == (ggufs[2], None)


# -- the command line ------------------------------------------------------------------------


def test_chat_without_any_model_says_how_to_give_one(tmp_path):
    p = tmp_path / "p"
    line = one_line(specchat(tmp_path, "--profile", p, "chat", "hi"))
    assert line == ("specchat: no model given: --pair ID, --target FILE, or set target in "
                    f"{p / 'config.toml'}")
    assert one_line(specchat(tmp_path, "--profile", p, "bench", "--modes", "baseline")).startswith(
        "specchat: no model given")


def test_chat_with_a_pair_not_downloaded(tmp_path):
    line = one_line(specchat(tmp_path, "--profile", tmp_path / "p", "chat", "--pair", "qwen2.5-coder-1.5b", "hi"))
    assert line == ("specchat: pair 'qwen2.5-coder-1.5b' is not downloaded: "
                    "run 'specchat models pull qwen2.5-coder-1.5b'")


def test_pair_and_target_are_exclusive(tmp_path, ggufs):
    line = one_line(specchat(tmp_path, "chat", "--pair", "x", "--target", ggufs[0], "hi"))
    assert "not allowed with argument --pair" in line


def test_flags_are_checked_like_the_config(tmp_path, ggufs):
    assert "argument --k-max: must be between 1 and 32 (got 40)" in one_line(
        specchat(tmp_path, "chat", "--target", ggufs[0], "--k-max", "40", "hi"))
    assert "argument --ctx: not a whole number: big" in one_line(
        specchat(tmp_path, "chat", "--target", ggufs[0], "--ctx", "big", "hi"))


def test_a_pair_that_cannot_fit_is_refused_before_loading(tmp_path, ggufs, monkeypatch, capsys):
    import specchat.models.fit
    from specchat.cli import main

    monkeypatch.setattr(specchat.models.fit, "free_memory", lambda: (None, 100))
    rc = main(["chat", "--target", str(ggufs[0]), "hi"], profile=Profile.at(tmp_path / "p"))
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("specchat: model-0.gguf: does not fit: needs ")
    assert err.strip().endswith("(--no-fit-check loads it anyway)") and len(err.strip().splitlines()) == 1
    rc = main(["chat", "--target", str(ggufs[0]), "--no-fit-check", "hi"], profile=Profile.at(tmp_path / "p"))
    err = capsys.readouterr().err
    assert rc == 2 and "does not fit" not in err  # went on to load: llama.cpp refuses the toy file


def test_bench_draft_mode_needs_a_draft(tmp_path, ggufs):
    line = one_line(specchat(tmp_path, "bench", "--target", ggufs[0], "--modes", "draft"))
    assert line == "specchat: mode 'draft' needs a draft model: --draft FILE, or a pair with one"


def test_a_bad_config_in_a_profile_is_one_line_naming_the_file(tmp_path):
    p = tmp_path / "p"
    p.mkdir()
    (p / "config.toml").write_text("k_min = 6\nk_max = 3\n")
    line = one_line(specchat(tmp_path, "--profile", p, "chat", "hi"))
    assert line == f"specchat: {p / 'config.toml'}: k_min (6) must not be above k_max (3)"
    (p / "config.toml").write_bytes(b"theme = '\xff'\n")
    assert one_line(specchat(tmp_path, "--profile", p, "config")) == \
        f"specchat: {p / 'config.toml'}: not valid UTF-8 (byte 9); save it as UTF-8"
