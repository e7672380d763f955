"""The TOML settings file: defaults, round trip, and one-line errors that name the key and the file."""

import subprocess
import sys
import tomllib
from pathlib import Path

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
    ("default_mode = 'turbo'", "default_mode: must be one of auto, draft, lookup, baseline"),
    ("version = 'two'", "version: must be a whole number from 1"),  # an unknown key is kept: below
    ("version = 0", "version: must be a whole number from 1"),
    ("n_ctx = ", "not valid TOML"),
    ("p_min = nan", "p_min: must be a finite number"),
    ("min_token_acceptance = inf", "min_token_acceptance: must be a finite number"),
    ("fallback_warning_share = -inf", "fallback_warning_share: must be a finite number"),
    ("k_min = 6\nk_max = 3", "k_min (6) must not be above k_max (3)"),
    ("k_min = 9", "k_min (9) must not be above k_max (8)"),  # the other one from the defaults
])
def test_bad_values_name_the_key_and_the_file(tmp_path, text, needle):
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        AppConfig(path)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"{path}: ")


def test_invalid_utf8_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b'theme = "dark"\n# caf\xe9\n')
    with pytest.raises(ConfigError) as err:
        AppConfig(path)
    assert str(err.value) == f"{path}: not valid UTF-8 (byte 20); save it as UTF-8"


def test_a_byte_order_mark_is_fine(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b'\xef\xbb\xbftheme = "dark"\n')
    assert AppConfig(path)["theme"] == "dark"


def test_legacy_off_is_read_as_baseline_and_written_as_baseline(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('default_mode = "off"\n')
    c = AppConfig(path)
    assert c["default_mode"] == "baseline"
    c.apply({"theme": "dark"})
    assert 'default_mode = "baseline"' in path.read_text() and '"off"' not in path.read_text()


def test_k_min_above_k_max_is_refused(tmp_path):
    c = AppConfig(tmp_path / "config.toml")
    c.set("k_min", 9)
    c.set("k_max", 4)
    with pytest.raises(ConfigError, match=r"k_min \(9\) must not be above k_max \(4\)"):
        c.controller()


# -- a candidate is checked whole; nothing is applied unless all of it is good ------------------


def test_replaced_checks_every_key_and_the_rules_and_leaves_the_config_alone(tmp_path):
    c = AppConfig(tmp_path / "config.toml")
    before = dict(c.values)
    new = c.replaced({"k_min": 3, "k_max": 5, "theme": "dark"})
    assert (new["k_min"], new["k_max"], new["theme"]) == (3, 5, "dark")
    assert c.values == before
    for values, needle in [({"k_min": 9, "k_max": 4}, "k_min (9) must not be above k_max (4)"),
                           ({"k_min": 2, "p_min": float("nan")}, "p_min: must be a finite number"),
                           ({"n_ctx": float("inf")}, "n_ctx: must be a whole number"),
                           ({"n_ctx": 8192, "colour": 1}, "unknown key 'colour'"),
                           ({"default_mode": "turbo"}, "default_mode: must be one of")]:
        with pytest.raises(ConfigError) as err:
            c.replaced(values)
        assert needle in str(err.value) and "\n" not in str(err.value)
        assert c.values == before
    assert not (tmp_path / "config.toml").exists()


def test_apply_is_all_or_nothing(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("n_ctx = 2048\n")
    c = AppConfig(path)
    before, on_disk = dict(c.values), path.read_bytes()
    with pytest.raises(ConfigError):
        c.apply({"n_ctx": 8192, "theme": "dark", "k_min": 9, "k_max": 2})
    assert c.values == before and path.read_bytes() == on_disk
    c.apply({"n_ctx": 8192, "theme": "dark"})
    assert c["n_ctx"] == 8192 and AppConfig(path)["theme"] == "dark"


@pytest.mark.parametrize("damage, needle", [
    (b'theme = "dark"\nn_ctx = [oops\n', "not valid TOML"),
    (b"p_min = nan\n", "p_min: must be a finite number"),
    (b"k_min = 7\nk_max = 2\n", "k_min (7) must not be above k_max (2)"),
    (b"# caf\xe9\n", "not valid UTF-8"),
])
def test_a_save_over_a_config_damaged_since_moves_it_aside_first(tmp_path, damage, needle, caplog):
    path = tmp_path / "config.toml"
    c = AppConfig(path)
    c.apply({"theme": "dark"})
    path.write_bytes(damage)  # the user edits it by hand meanwhile
    c.apply({"n_ctx": 8192})
    [aside] = tmp_path.glob("config.toml.corrupt-*")
    assert aside.read_bytes() == damage  # the hand edit is kept, under a name that says why
    [message] = [r.getMessage() for r in caplog.records if r.name == "specchat"]
    assert message.startswith(f"{path}: ") and needle in message and str(aside) in message
    again = AppConfig(path)
    assert (again["theme"], again["n_ctx"]) == ("dark", 8192)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_config_far_larger_than_any_settings_file_is_refused_unread(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        AppConfig(path)


BAD_FILES = {
    "invalid UTF-8": (b'theme = "dark"\n# caf\xe9\n', "not valid UTF-8 (byte 20)"),
    "NaN": (b"p_min = nan\n", "p_min: must be a finite number"),
    "infinity": (b"min_sequence_acceptance = inf\n", "min_sequence_acceptance: must be a finite number"),
    "a rule between keys": (b"k_min = 6\nk_max = 3\n", "k_min (6) must not be above k_max (3)"),
    "a float for a whole number": (b"n_ctx = 4096.0\n", "n_ctx: must be a whole number"),
}


@pytest.mark.parametrize("what", list(BAD_FILES))
@pytest.mark.parametrize("command", [["chat", "hi"], ["bench"], ["config"], ["models", "list"]])
def test_a_bad_config_stops_every_command_with_one_line_and_is_left_alone(tmp_path, capsys, what, command):
    from specchat.cli import main
    from specchat.profile import Profile

    content, needle = BAD_FILES[what]
    profile = Profile.at(tmp_path / "p")
    profile.config_file.parent.mkdir(parents=True)
    profile.config_file.write_bytes(content)
    assert main(command, profile=profile) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"specchat: {profile.config_file}: ") and needle in err, err
    assert profile.config_file.read_bytes() == content
    assert sorted(p.name for p in profile.config_file.parent.iterdir()) == ["config.toml"]  # nothing written


def test_the_entry_point_says_the_same_for_a_bad_config(tmp_path, capsys):
    from specchat.__main__ import main

    (tmp_path / "config.toml").write_bytes(b"k_min = 6\nk_max = 3\n")
    assert main(["--profile", str(tmp_path), "chat", "hi"]) == 2
    assert capsys.readouterr().err == f"specchat: {tmp_path / 'config.toml'}: k_min (6) must not be above k_max (3)\n"


def test_save_merges_with_what_another_process_wrote(tmp_path):
    path = tmp_path / "config.toml"
    window, terminal = AppConfig(path), AppConfig(path)
    terminal.apply({"n_ctx": 8192})
    window.apply({"theme": "dark"})  # opened before the terminal's change: keeps it
    again = AppConfig(path)
    assert again["n_ctx"] == 8192 and again["theme"] == "dark"
    assert window["n_ctx"] == 8192  # and now sees it


def test_two_processes_saving_at_once_lose_nothing(tmp_path):
    """Each save re-reads, merges and renames a temp file of its own, under the lock."""
    path = tmp_path / "config.toml"
    script = (
        "import sys\nfrom pathlib import Path\nfrom specchat.config import AppConfig\n"
        "key, base, path = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])\n"
        "for i in range(1, 41):\n"
        "    AppConfig(path).apply({key: base + i})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, key, str(base), str(path)], stderr=subprocess.PIPE,
                              text=True) for key, base in (("n_ctx", 1000), ("threads", 0))]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    c = AppConfig(path)
    assert (c["n_ctx"], c["threads"]) == (1040, 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "config.toml.lock"]


def test_the_documented_example_is_the_schema_and_loads_as_the_defaults(tmp_path):
    """docs/config.example.toml is generated from the schema: regenerate it when a setting changes."""

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


# -- a change says which keys changed; the schema says which of them reload the pair ---------------


def _another_value(s):
    """A valid value of setting ``s`` other than its default."""
    if s.choices:
        return next(c for c in s.choices if c != s.default)
    if isinstance(s.default, str):
        return "elsewhere.gguf"
    if isinstance(s.default, bool):
        return not s.default
    if isinstance(s.default, int):
        return s.default + 1 if s.hi is None or s.default + 1 <= s.hi else s.default - 1
    return (s.default + s.hi) / 2


def test_the_api_settings_default_to_the_servers_port_on_this_machine_only(tmp_path):
    """The window serves on ``specchat serve``'s port, on 127.0.0.1 unless the user says otherwise; a port
    outside 1-65535 or a switch that is not true/false is refused naming the key."""
    from specchat.serve.http import DEFAULT_PORT

    c = AppConfig(tmp_path / "config.toml")
    assert c["api_port"] == DEFAULT_PORT and c["api_everywhere"] is False
    (tmp_path / "bad.toml").write_text("api_port = 70000\n")
    with pytest.raises(ConfigError, match="api_port: must be between 1 and 65535"):
        AppConfig(tmp_path / "bad.toml")
    (tmp_path / "bad.toml").write_text("api_everywhere = 1\n")
    with pytest.raises(ConfigError, match="api_everywhere: must be true or false"):
        AppConfig(tmp_path / "bad.toml")
    c.apply({"api_port": 9000, "api_everywhere": True})
    again = AppConfig(tmp_path / "config.toml")
    assert again["api_port"] == 9000 and again["api_everywhere"] is True


def test_a_change_names_exactly_the_keys_that_changed(tmp_path):
    c = AppConfig(tmp_path / "config.toml")
    change = c.change_to(c.replaced({"theme": "dark", "n_ctx": 4096, "min_token_acceptance": 0.3, "k_max": 6}))
    assert change.keys == {"theme", "min_token_acceptance", "k_max"}  # n_ctx is 4096 already
    assert change.old is c and change.new["theme"] == "dark" and change.reloads_pair  # k_max: the calibration's sizes
    assert not c.change_to(c.replaced({"min_token_acceptance": 0.3})).reloads_pair  # a live threshold
    assert not c.change_to(c.replaced({"theme": "dark"})).reloads_pair
    assert not c.change_to(c.replaced({"n_ctx": 4096}))  # nothing changed: no keys, false


def test_reloads_pair_is_declared_on_exactly_the_keys_the_pair_is_loaded_with(tmp_path):
    """The flag in the schema is the truth about pair_config(): a key that goes into how the pair
    is loaded reloads it, any other key (theme, default mode, ...) leaves the loaded pair alone."""
    from specchat.backends.pairs import pair_config
    from specchat.config import SCHEMA
    from specchat.profile import Profile

    profile = Profile.at(tmp_path / "p")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.touch()
    draft.touch()
    base = AppConfig(tmp_path / "config.toml")
    loaded = pair_config(base, profile, target, draft)
    assert any(s.reloads_pair for s in SCHEMA) and not all(s.reloads_pair for s in SCHEMA)
    for s in SCHEMA:
        changed = base.replaced({s.key: _another_value(s)})
        assert (pair_config(changed, profile, target, draft).opens != loaded.opens) == s.reloads_pair, s.key
        assert base.change_to(changed).reloads_pair == s.reloads_pair


# -- a version, migrations, and the keys this SpecChat does not know -----------------------------------


def test_a_save_writes_the_version_and_a_file_without_one_is_migrated_from_version_1(tmp_path):
    from specchat.config import CONFIG_VERSION, MIGRATIONS

    assert CONFIG_VERSION == len(MIGRATIONS) + 1 >= 2
    path = tmp_path / "config.toml"
    path.write_text('default_mode = "off"\nn_ctx = 2048\n')  # version 1: no version line, plain was "off"
    c = AppConfig(path)
    assert c["default_mode"] == "baseline" and c["n_ctx"] == 2048
    assert path.read_text() == 'default_mode = "off"\nn_ctx = 2048\n'  # reading never writes
    c.apply({"theme": "dark"})
    doc = tomllib.loads(path.read_text())
    assert doc == {"version": CONFIG_VERSION, "default_mode": "baseline", "n_ctx": 2048, "theme": "dark"}
    path.write_text(f'version = {CONFIG_VERSION}\ndefault_mode = "off"\n')  # "off" is not a version 2 value
    with pytest.raises(ConfigError, match="default_mode: must be one of"):
        AppConfig(path)


def test_a_config_from_a_newer_specchat_is_refused_in_one_line_and_never_touched(tmp_path, capsys):
    from specchat.cli import main
    from specchat.config import CONFIG_VERSION
    from specchat.profile import Profile

    profile = Profile.at(tmp_path / "p")
    path = profile.config_file
    path.parent.mkdir(parents=True)
    content = f'version = {CONFIG_VERSION + 1}\nn_ctx = 8192\nnew_in_v3 = "x"\n'.encode()
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        AppConfig(path)
    assert str(err.value).startswith(f"{path}: written by a newer SpecChat (config version {CONFIG_VERSION + 1}")
    assert "\n" not in str(err.value)
    assert main(["config"], profile=profile) == 2
    out = capsys.readouterr().err
    assert out.count("\n") == 1 and out.startswith(f"specchat: {path}: written by a newer SpecChat")
    # a window opened before the newer SpecChat wrote it: its save is refused, the file is left alone
    path.write_text("n_ctx = 2048\n")
    window = AppConfig(path)
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="written by a newer SpecChat"):
        window.apply({"theme": "dark"})
    assert window["theme"] == "system" and path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.toml", "config.toml.lock"]  # nothing aside


UNKNOWN = """n_ctx = 2048
colour = "teal"
"odd key" = [1, 2.5, "three"]
when = 2024-05-01T10:00:00Z

[plugin]
name = "x"
opts = { depth = 3, tags = ["a"] }
"""


def test_an_unknown_key_is_kept_with_one_warning_and_survives_every_save(tmp_path, caplog):
    path = tmp_path / "config.toml"
    path.write_text(UNKNOWN)
    want = {k: v for k, v in tomllib.loads(UNKNOWN).items() if k != "n_ctx"}
    c = AppConfig(path)
    [message] = [r.getMessage() for r in caplog.records if r.name == "specchat"]
    assert message.startswith(f"{path}: unknown keys 'colour', 'odd key', 'when', 'plugin'") and "kept" in message
    assert c["n_ctx"] == 2048 and c.unknown == want
    c.apply({"theme": "dark"})
    c.replaced({"k_max": 4}).save()
    doc = tomllib.loads(path.read_text())
    assert {k: doc[k] for k in want} == want  # every value as it was (the table now inline)
    assert (doc["theme"], doc["k_max"], doc["n_ctx"]) == ("dark", 4, 2048)
    again = AppConfig(path)
    assert again.unknown == want and again["theme"] == "dark"


def test_settings_saved_from_the_dialog_keep_the_unknown_keys(qtbot, tmp_path):
    from specchat.ui.settings_dialogs import SettingsDialog

    path = tmp_path / "config.toml"
    path.write_text(UNKNOWN)
    dialog = SettingsDialog(AppConfig(path))
    qtbot.addWidget(dialog)
    dialog.fields["theme"].setCurrentText("light")
    dialog.save()
    assert dialog.result_config is not None
    doc = tomllib.loads(path.read_text())
    assert doc["colour"] == "teal" and doc["plugin"] == {"name": "x", "opts": {"depth": 3, "tags": ["a"]}}
    assert doc["theme"] == "light"


def test_an_unknown_key_on_the_command_line_is_one_stderr_line_and_the_command_runs(tmp_path, capsys):
    from specchat.cli import main
    from specchat.profile import Profile

    profile = Profile.at(tmp_path / "p")
    profile.config_file.parent.mkdir(parents=True)
    profile.config_file.write_text("colour = 1\nn_ctx = 2048\n")
    assert main(["config"], profile=profile) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"specchat: {profile.config_file}: unknown key 'colour': not a setting of this "
                            "SpecChat version; kept in the file, unused\n")
    assert "n_ctx = 2048" in captured.out
