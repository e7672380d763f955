"""The fit cache is JSON SpecChat stores: a file nested past any bound is ignored and written again,
never a RecursionError in the Models dialog (issue 37)."""

from __future__ import annotations

from specchat.models import catalog_fit


def test_a_cache_file_nested_thousands_deep_is_ignored(tmp_path):
    path = tmp_path / "facts.json"
    path.write_text('{"version": 1, "key": "k", "facts": ' + "[" * 5000 + "]" * 5000 + "}")
    assert catalog_fit._load(path, "k", pinned=True) is None  # before: RecursionError
