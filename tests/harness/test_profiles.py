"""The cost profiles SpecChat ships parse, hold sane costs, and say where every published number comes from.

Plain JSON checks (no simulator import): a broken profile must fail here, in the fast tier, not in a
user's `specchat simulate` run.
"""

import json
import math
import re
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

PROFILES_DIR = Path(str(files("specchat.harness") / "profiles"))
SHIPPED = sorted(PROFILES_DIR.glob("*.json"))
REPO_ROOT = Path(__file__).resolve().parents[2]

NAME = re.compile(r"[a-z0-9._-]+")
SIZE_KEY = re.compile(r"[1-9][0-9]*")  # decimal string, no sign, no leading zero
KINDS = {"published", "measured-cpu", "measured-gpu"}
TEXT_KEYS = ("name", "title", "kind", "hardware", "target", "draft")
REQUIRED_COSTS = ("token_s", "draft_x", "overhead_s")
OPTIONAL_COSTS = ("lookup_s", "noise")
POSITIVE = {"token_s", "draft_x"}  # a zero here would make the simulator divide by nothing


def _no_constants(name: str) -> Any:
    # Python's json accepts NaN and Infinity; a profile must not
    raise ValueError(f"non-finite constant {name}")


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constants)


def number_problems(where: str, entry: Any, published: bool, positive: bool) -> list[str]:
    """Problems of one number: bare or {"value", "source"}; finite; in range; sourced if published."""
    if isinstance(entry, dict):
        value, source = entry.get("value"), entry.get("source")
        if set(entry) - {"value", "source"}:
            return [f"{where}: unknown keys {sorted(set(entry) - {'value', 'source'})}"]
    else:
        value, source = entry, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [f"{where}: value is not a number: {value!r}"]
    problems = []
    if not math.isfinite(value):
        problems.append(f"{where}: not finite")
    elif value < 0 or (positive and value == 0):
        problems.append(f"{where}: {value} is out of range")
    if published and not (isinstance(source, str) and source.strip()):
        problems.append(f"{where}: a published number needs a non-empty source")
    return problems


def value_of(entry: Any) -> float:
    return float(entry["value"] if isinstance(entry, dict) else entry)


def verify_problems(verify: Any, published: bool) -> list[str]:
    if not isinstance(verify, dict) or not verify:
        return ["verify_x: not a non-empty object"]
    problems = []
    for key, entry in verify.items():
        if not SIZE_KEY.fullmatch(key):
            problems.append(f"verify_x: key {key!r} is not a decimal size >= 1")
            continue
        # x(1) == 1 is the definition of the unit, not a measurement: it needs no source
        problems += number_problems(f"verify_x[{key}]", entry, published and key != "1", positive=True)
    if problems:
        return problems
    if "1" not in verify or value_of(verify["1"]) != 1.0:
        problems.append('verify_x: "1" must be 1.0 (costs are relative to one token)')
    sizes = sorted(verify, key=int)
    for small, big in zip(sizes, sizes[1:], strict=False):
        if value_of(verify[big]) < value_of(verify[small]):
            problems.append(f"verify_x: {big} tokens cost less than {small}")
    return problems


def profile_problems(profile: Any, stem: str) -> list[str]:
    """Every way a profile breaks the schema in docs (empty list: the profile is fine)."""
    if not isinstance(profile, dict):
        return ["not a JSON object"]
    problems = []
    if profile.get("specchat_cost_profile") != 1:
        problems.append("specchat_cost_profile must be 1")
    for key in TEXT_KEYS:
        if not (isinstance(profile.get(key), str) and profile[key].strip()):
            problems.append(f"{key}: missing or empty")
    if profile.get("name") != stem or not NAME.fullmatch(stem):
        problems.append(f"name {profile.get('name')!r} must equal the file stem {stem!r} ([a-z0-9._-]+)")
    if profile.get("kind") not in KINDS:
        problems.append(f"kind {profile.get('kind')!r} is not one of {sorted(KINDS)}")
    published = profile.get("kind") == "published"
    for key in REQUIRED_COSTS + OPTIONAL_COSTS:
        if key not in profile:
            if key in REQUIRED_COSTS:
                problems.append(f"{key}: missing")
            continue
        found = number_problems(key, profile[key], published, positive=key in POSITIVE)
        if not found and key == "noise" and value_of(profile[key]) >= 1:
            found = ["noise: a relative standard deviation of 100 % or more is not a cost model"]
        problems += found
    problems += verify_problems(profile.get("verify_x"), published)
    notes = profile.get("notes", [])
    if not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        problems.append("notes: must be a list of strings")
    return problems


def test_the_package_ships_published_gpu_profiles():
    kinds = [load(p).get("kind") for p in SHIPPED]
    assert kinds.count("published") >= 3, [p.name for p in SHIPPED]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_profile_is_valid(path: Path):
    assert profile_problems(load(path), path.stem) == []


def test_profiles_are_package_data():
    # without this entry a wheel install has no profiles and `simulate --profile NAME` finds nothing
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["specchat.harness"]
    assert any(sorted(PROFILES_DIR.glob(Path(pattern).name)) == SHIPPED for pattern in patterns)
    assert "profiles/*.json" in patterns


# --- the checks above can fail: each broken variant of a good profile is caught --------------------

GOOD = {
    "specchat_cost_profile": 1,
    "name": "good",
    "title": "t",
    "kind": "published",
    "hardware": "h",
    "target": "a",
    "draft": "b",
    "token_s": {"value": 0.01, "source": "PR #1"},
    "verify_x": {
        "1": 1.0,
        "2": {"value": 1.1, "source": "PR #1"},
        "17": {"value": 2.0, "source": "derived: x"},
    },
    "draft_x": {"value": 0.2, "source": "PR #2"},
    "overhead_s": {"value": 0.0005, "source": "measured"},
    "noise": {"value": 0.02, "source": "assumption"},
    "notes": ["n"],
}


def broken(**changes: Any) -> dict[str, Any]:
    profile = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is ...:
            del profile[key]
        else:
            profile[key] = value
    return profile


def test_the_good_example_passes():
    assert profile_problems(GOOD, "good") == []


@pytest.mark.parametrize(
    ("profile", "stem", "expected"),
    [
        (broken(name="other"), "good", "file stem"),
        (broken(name="Good"), "Good", "file stem"),
        (broken(kind="guessed"), "good", "kind"),
        (broken(token_s=...), "good", "token_s: missing"),
        (broken(token_s=0), "good", "out of range"),
        (broken(draft_x=-0.1), "good", "out of range"),
        (broken(token_s=True), "good", "not a number"),
        (broken(token_s={"value": 0.01}), "good", "non-empty source"),
        (broken(draft_x={"value": 0.2, "source": "  "}), "good", "non-empty source"),
        (broken(verify_x={"1": 1.0, "2": 1.1}), "good", "non-empty source"),
        (broken(verify_x={"1": 1.2, "2": {"value": 1.3, "source": "s"}}), "good", '"1" must be 1.0'),
        (broken(verify_x={"2": {"value": 1.3, "source": "s"}}), "good", '"1" must be 1.0'),
        (broken(verify_x={"1": 1.0, "02": {"value": 1.3, "source": "s"}}), "good", "decimal size"),
        (
            broken(
                verify_x={"1": 1.0, "4": {"value": 1.5, "source": "s"}, "10": {"value": 1.4, "source": "s"}}
            ),
            "good",
            "10 tokens cost less than 4",
        ),
        (broken(noise={"value": 1.5, "source": "s"}), "good", "noise"),
        (broken(notes="one string"), "good", "notes"),
        (broken(specchat_cost_profile=2), "good", "specchat_cost_profile"),
    ],
)
def test_a_broken_profile_is_caught(profile: dict[str, Any], stem: str, expected: str):
    assert any(expected in problem for problem in profile_problems(profile, stem))


def test_a_measured_profile_may_use_bare_numbers():
    profile = broken(kind="measured-cpu", token_s=0.01, draft_x=0.2, verify_x={"1": 1, "2": 1.1})
    assert profile_problems(profile, "good") == []


def test_non_finite_json_is_refused(tmp_path: Path):
    path = tmp_path / "bad.json"
    path.write_text('{"token_s": NaN}', encoding="utf-8")
    with pytest.raises(ValueError, match="non-finite"):
        load(path)
