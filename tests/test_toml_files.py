"""The TOML files SpecChat reads and writes: config.toml and the user's catalog.toml (issue 37, classes 2-3).

Nesting is bounded on the way in (a file 1,000 deep is one line, in the CLI and the app, not
tomllib's RecursionError; a table 600 deep is refused at load instead of breaking every save),
and every string is escaped on the way out: what a Settings save writes, the next start reads
(U+007F in an unknown key's text was written raw, and SpecChat then refused its own file).
The property tests generate what a save may have to write (control characters, any unicode,
nesting up to the bound, unknown keys of every TOML type) and hostile files for each reader.
"""

from __future__ import annotations

import datetime as dt
import math
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat import toml_doc
from specchat.config import BY_KEY, SCHEMA, AppConfig, ConfigError
from specchat.models.catalog import CatalogError, load_catalog, load_catalog_lenient

PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=200,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])
DEEP_ARRAY = "x = " + "[" * 1000 + "]" * 1000 + "\n"  # tomllib recurses: RecursionError
DEEP_TABLE = "[" + ".".join(["a"] * 600) + "]\nb = 1\n"  # parses; every walk over it recurses


# -- nesting ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [DEEP_ARRAY, DEEP_TABLE, "x = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n"])
def test_a_config_nested_past_the_bound_is_one_line_naming_the_file(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="nested deeper than 64 levels") as caught:
        AppConfig(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("command", [["config"], ["models", "list"]])
def test_the_command_line_says_so_in_one_line_and_leaves_the_file(tmp_path, capsys, command):
    from specchat.cli import main
    from specchat.profile import Profile

    profile = Profile.at(tmp_path / "p")
    profile.config_file.parent.mkdir(parents=True)
    profile.config_file.write_text(DEEP_ARRAY)
    assert main(command, profile=profile) == 2  # before: "internal error" and a RecursionError
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"specchat: {profile.config_file}: ") and "deeper" in err, err
    assert profile.config_file.read_text() == DEEP_ARRAY


def test_a_config_nested_as_deep_as_allowed_loads_and_saves(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("x = " + "[" * 63 + "1" + "]" * 63 + "\n")  # the document is one level, the value 63
    config = AppConfig(path)
    config.apply({"k_max": 7})
    assert AppConfig(path).unknown == config.unknown and AppConfig(path)["k_max"] == 7


@pytest.mark.parametrize("text", [DEEP_ARRAY, DEEP_TABLE])
def test_a_user_catalog_nested_past_the_bound_is_one_line_and_the_shipped_pairs_still_list(tmp_path, text):
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    pairs, problems = load_catalog_lenient(path)  # before: RecursionError (the array) or, later, a walk's
    assert pairs and len(problems) == 1 and str(path) in problems[0] and "nested deeper" in problems[0]
    with pytest.raises(CatalogError, match="nested deeper"):
        load_catalog(path)


def test_models_list_beside_a_deep_user_catalog_warns_once_and_lists_the_shipped_pairs(tmp_path, capsys):
    from specchat.cli import main
    from specchat.profile import Profile

    profile = Profile.at(tmp_path / "p")
    profile.user_catalog.parent.mkdir(parents=True)
    profile.user_catalog.write_text(DEEP_ARRAY)
    assert main(["models", "list"], profile=profile) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "nested deeper" in err[0] and "Traceback" not in err[0]


# -- what a save writes, the next start reads -----------------------------------------------------------


def test_an_unknown_keys_text_with_a_delete_character_survives_a_save_and_the_next_start(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('note = "a\\u007Fb\\u0000c\\u001Bd\\u0085e\\u2028f"\n"k\\u007F" = 1\n')
    config = AppConfig(path)
    config.apply({"k_max": 7})  # before: written raw; the next start said "not valid TOML" (exit 2)
    again = AppConfig(path)
    assert again.unknown == {"note": "a\x7fb\x00c\x1bd\x85e\u2028f", "k\x7f": 1} and again["k_max"] == 7
    assert "\x7f" not in path.read_text()


def test_a_setting_of_text_that_no_toml_file_can_hold_is_refused_in_one_line(tmp_path):
    config = AppConfig(tmp_path / "config.toml")
    with pytest.raises(ConfigError, match="target: .*surrogate"):
        config.apply({"target": "model\ud800.gguf"})
    assert not (tmp_path / "config.toml").exists()


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)  # any scalar value: controls, unicode
TZ = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))
SCALARS = st.one_of(
    st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.floats(), TEXT,
    st.datetimes(timezones=st.none() | TZ), st.dates(), st.times(),
)


def nested(depth_left: int) -> st.SearchStrategy[object]:
    """TOML values nesting at most ``depth_left`` levels."""
    if depth_left == 0:
        return SCALARS
    inner = nested(depth_left - 1) if depth_left <= 3 else SCALARS
    return st.one_of(SCALARS, st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3))


def chain(depth: int, leaf: object, table: bool) -> object:
    """``leaf`` inside ``depth`` arrays or tables: nesting as deep as allowed, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"k": value} if table else [value]
    return value


UNKNOWN_KEYS = TEXT.filter(lambda k: k not in BY_KEY and k != "version")
UNKNOWN = st.dictionaries(UNKNOWN_KEYS, st.one_of(
    nested(3), st.builds(chain, st.integers(1, toml_doc.MAX_DEPTH - 1), SCALARS, st.booleans())), max_size=4)


def known_values() -> st.SearchStrategy[dict[str, object]]:
    def one(s) -> st.SearchStrategy[object]:
        if s.choices:
            return st.sampled_from(s.choices)
        if isinstance(s.default, bool):
            return st.booleans()
        if isinstance(s.default, int):
            return st.integers(int(s.lo), int(s.hi))
        if isinstance(s.default, float):
            return st.floats(s.lo, s.hi)
        return TEXT
    return st.fixed_dictionaries({}, optional={s.key: one(s) for s in SCHEMA})


def same(a: object, b: object) -> bool:
    """Equal, NaN included (TOML's nan reads back as a NaN, which equals nothing)."""
    return toml_doc.value(a) == toml_doc.value(b) and (a == b or "nan" in toml_doc.value(a))


@PROPERTY
@given(values=known_values(), unknown=UNKNOWN)
def test_what_a_save_writes_the_next_load_reads_as_it_was(tmp_path_factory, values, unknown):
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    path.write_text("".join(f"{toml_doc.key(k)} = {toml_doc.value(v)}\n" for k, v in unknown.items()))
    config = AppConfig(path)  # the unknown keys as a hand-edited (or newer SpecChat's) file has them
    assert same(config.unknown, unknown)
    try:
        config.apply(values)
    except ConfigError as exc:  # a rule between keys (k_min <= k_max...): refused before anything is written
        assert "not saved" not in str(exc), exc
        return
    again = AppConfig(path)
    assert again.values == config.values and same(again.unknown, unknown)
    config.apply({})  # a second save writes the same file
    assert AppConfig(path).values == again.values


@PROPERTY
@given(v=st.one_of(nested(3), st.builds(chain, st.integers(1, toml_doc.MAX_DEPTH - 1), SCALARS, st.booleans())))
def test_the_writer_gives_toml_that_reads_back_as_the_same_value(v):
    assert same(tomllib.loads(f"x = {toml_doc.value(v)}\n")["x"], v)


# -- hostile files, for each reader ---------------------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.text(max_size=200),  # anything at all
    st.builds(lambda k, v: f"{toml_doc.key(k)} = {toml_doc.value(v)}\n", st.sampled_from([*BY_KEY, "pair", "x"]),
              nested(3)),  # every TOML type in every key
    st.builds(lambda n, brackets: "x = " + brackets[0] * n + "1" + brackets[1] * n + "\n",
              st.integers(60, 3000), st.sampled_from([("[", "]"), ("{a = ", "}")])),
    st.builds(lambda n: "[" + ".".join(["a"] * n) + "]\n", st.integers(60, 3000)),
    st.builds(lambda n: "x = 1" + "0" * n + "\n", st.integers(4290, 4400)),  # past Python's int digits
)


@PROPERTY
@given(text=HOSTILE_TEXT)
def test_any_config_file_is_settings_in_range_or_one_config_error_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config = AppConfig(path)
    except ConfigError as exc:  # the one error type its callers show
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    for s in SCHEMA:
        assert s.check(config[s.key]) == config[s.key]
        assert not isinstance(config[s.key], float) or math.isfinite(config[s.key])


@PROPERTY
@given(text=HOSTILE_TEXT | st.builds(lambda v: f"[[pair]]\nid = \"p\"\ntarget = {toml_doc.value(v)}\n", nested(3)))
def test_any_user_catalog_lists_or_is_one_catalog_error_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cat") / "catalog.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    pairs, problems = load_catalog_lenient(path)
    assert pairs and all("\n" not in p for p in problems)
    try:
        load_catalog(path)
    except CatalogError as exc:
        assert "\n" not in str(exc)
