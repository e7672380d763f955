"""One profile names every file of one user; two profiles share none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat.profile import Profile, write_text_atomically


def test_default_profile_follows_the_xdg_dirs(monkeypatch, tmp_path):
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    p = Profile.default()
    assert p.config_file == tmp_path / "xdg_config_home" / "specchat" / "config.toml"
    assert p.user_catalog == tmp_path / "xdg_config_home" / "specchat" / "catalog.toml"
    assert p.database == tmp_path / "xdg_data_home" / "specchat" / "specchat.sqlite3"
    assert p.registry == tmp_path / "xdg_data_home" / "specchat" / "registry.json"
    assert p.instance_lock.parent == p.data_dir
    assert p.calibration_cache == tmp_path / "xdg_cache_home" / "specchat" / "calibration.json"


def test_a_profile_dir_holds_everything(tmp_path):
    p = Profile.at(tmp_path / "work")
    root = tmp_path / "work"
    assert p.config_file == root / "config.toml" and p.user_catalog == root / "catalog.toml"
    assert p.database == root / "data" / "specchat.sqlite3" and p.registry == root / "data" / "registry.json"
    assert p.instance_lock.parent == root / "data"
    assert p.calibration_cache == root / "cache" / "calibration.json"
    assert not root.exists()  # nothing is created until something is written


def test_relative_and_home_profile_dirs_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Profile.at("rel").config_dir == tmp_path / "rel"
    assert Profile.at("~/p").data_dir == tmp_path / "home" / "p" / "data"


def test_every_file_of_two_profiles_differs(tmp_path):
    a, b = Profile.at(tmp_path / "a"), Profile.at(tmp_path / "b")
    names = ("config_file", "user_catalog", "database", "registry", "instance_lock", "calibration_cache")
    assert not {getattr(a, n) for n in names} & {getattr(b, n) for n in names}
    assert len({getattr(a, n) for n in names}) == len(names)


def test_with_config_file_replaces_only_the_settings_file(tmp_path):
    p = Profile.at(tmp_path / "a")
    q = p.with_config_file(tmp_path / "deploy.toml")
    assert q.config_file == tmp_path / "deploy.toml"
    assert (q.data_dir, q.cache_dir, q.user_catalog) == (p.data_dir, p.cache_dir, p.user_catalog)
    assert p.with_config_file(None) is p


def test_profile_is_frozen(tmp_path):
    with pytest.raises(AttributeError):
        Profile.at(tmp_path).data_dir = tmp_path  # type: ignore[misc]


def test_atomic_write_replaces_whole_and_keeps_permissions(tmp_path):
    path = tmp_path / "sub" / "f.json"
    write_text_atomically(path, "one")
    assert path.read_text() == "one"
    os.chmod(path, 0o640)
    write_text_atomically(path, "two")
    assert path.read_text() == "two" and (path.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.json"]  # no temp file left


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    path.write_text("old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_text_atomically(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_temp_names_are_unique_per_write(tmp_path, monkeypatch):
    """Two writers (two processes) never share a temp file: each gets its own name."""
    seen: list[str] = []
    real = os.replace

    def spy(src, dst):
        seen.append(Path(src).name)
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    for text in ("a", "b", "c"):
        write_text_atomically(tmp_path / "f.json", text)
    assert len(set(seen)) == 3 and all(n.startswith(".f.json.") and n.endswith(".tmp") for n in seen)
