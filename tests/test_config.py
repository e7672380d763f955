"""The TOML settings file: defaults, round trip, and one-line errors that name the key."""

import pytest

from specchat.config import AppConfig, ConfigError


def test_defaults_without_a_file(tmp_path):
    c = AppConfig(tmp_path / "config.toml")
    assert c["n_ctx"] == 4096 and c["default_mode"] == "auto"
    assert c.controller().min_token_acceptance == 0.5


def test_saved_values_come_back(tmp_path):
    path = tmp_path / "config.toml"
    c = AppConfig(path)
    c.set("n_ctx", 8192)
    c.set("min_token_acceptance", 0.6)
    c.set("default_mode", "lookup")
    c.save()
    again = AppConfig(path)
    assert again["n_ctx"] == 8192 and again["default_mode"] == "lookup"
    assert again.controller().min_token_acceptance == 0.6
    assert "threads" not in path.read_text()  # defaults are not written


@pytest.mark.parametrize("text, needle", [
    ("n_ctx = 'big'", "n_ctx: must be a whole number"),
    ("p_min = 1.5", "p_min: must be between 0 and 1"),
    ("default_mode = 'turbo'", "default_mode: must be one of auto, draft, lookup, off"),
    ("colour = 1", "unknown key 'colour'"),
    ("n_ctx = ", "not valid TOML"),
])
def test_bad_values_name_the_key(tmp_path, text, needle):
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        AppConfig(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_k_min_above_k_max_is_refused(tmp_path):
    c = AppConfig(tmp_path / "config.toml")
    c.set("k_min", 9)
    c.set("k_max", 4)
    with pytest.raises(ConfigError, match="k_min/k_max"):
        c.controller()


def test_the_documented_example_is_the_schema_and_loads_as_the_defaults(tmp_path):
    """docs/config.example.toml is generated from the schema: regenerate it when a setting changes."""
    from pathlib import Path

    from specchat.config import SCHEMA, example_toml

    doc = Path(__file__).resolve().parents[1] / "docs" / "config.example.toml"
    assert doc.read_text(encoding="utf-8") == example_toml() + "\n", \
        "run: python -m specchat config --example > docs/config.example.toml"
    loaded = AppConfig(doc)
    assert loaded.values == {s.key: s.default for s in SCHEMA}


def test_model_paths_expand_home_and_resolve_next_to_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / "deploy" / "config.toml"
    path.parent.mkdir()
    path.write_text('target = "models/big.gguf"\ndraft = "~/small.gguf"\n')
    c = AppConfig(path)
    assert c.model_path("target") == tmp_path / "deploy" / "models" / "big.gguf"
    assert c.model_path("draft") == tmp_path / "small.gguf"
    assert AppConfig(tmp_path / "none.toml").model_path("target") is None
