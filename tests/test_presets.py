"""Presets: the shipped three, the user's saved and read back, export and import as JSON, a bad file refused
whole in one line, and a preset applied keeps the chat's models."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from specchat.presets import SHIPPED, Preset, PresetError, PresetLibrary, export_preset, read_preset_file
from specchat.sampling_settings import SamplingSettings
from specchat.store import ChatSettings


@pytest.fixture
def library(tmp_path: Path) -> PresetLibrary:
    return PresetLibrary.of(tmp_path / "config")


def test_three_useful_presets_ship_and_each_reads_back_the_same():
    by_name = {p.name: p for p in SHIPPED}
    assert by_name["Code editing (lookup)"].settings.speculation == "lookup"
    extraction = by_name["JSON extraction"].settings.sampling.structured
    assert extraction.kind == "json_schema" and "items" in json.loads(extraction.text)["properties"]
    assert by_name["Plain speed reference"].settings.speculation == "baseline"
    for preset in SHIPPED:
        preset.settings.validate()
        assert Preset.from_json(preset.to_json()).settings == preset.settings


def test_a_preset_applied_keeps_the_chats_models_and_backend():
    chat = ChatSettings(target=Path("/m/t.gguf"), draft=Path("/m/d.gguf"), backend="my server",
                        system_prompt="old", speculation="draft")
    applied = SHIPPED[0].apply(chat)
    assert (applied.target, applied.draft, applied.backend) == (Path("/m/t.gguf"), Path("/m/d.gguf"), "my server")
    assert applied.speculation == "lookup" and applied.system_prompt.startswith("You edit code")


def test_a_saved_preset_is_listed_and_stands_in_for_a_shipped_one_of_its_name(library):
    mine = Preset("Terse", ChatSettings(system_prompt="Be terse.", sampling=SamplingSettings(temperature=0.7)))
    library.save(mine)
    assert [p.name for p in library.presets()] == [p.name for p in SHIPPED] + ["Terse"]
    assert library.get("terse").settings.sampling.temperature == 0.7 and not library.get("Terse").shipped
    library.save(Preset("Plain speed reference", ChatSettings(speculation="baseline", max_tokens=99)))
    assert library.get("Plain speed reference").settings.max_tokens == 99
    assert library.delete("Plain speed reference")
    assert library.get("Plain speed reference").shipped and not library.delete("Plain speed reference")


def test_export_then_import_gives_the_same_preset(library, tmp_path):
    out = tmp_path / "shared" / "extract.json"
    export_preset(SHIPPED[1], out)
    other = PresetLibrary.of(tmp_path / "other")
    assert other.import_file(out).settings == SHIPPED[1].settings
    assert other.get("JSON extraction").settings.sampling.structured == SHIPPED[1].settings.sampling.structured


@pytest.mark.parametrize("doc, line", [
    ({"name": "x"}, 'no "specchat_preset" key'),
    ({"specchat_preset": 2, "name": "x"}, "format 2; this SpecChat reads up to 1"),
    ({"specchat_preset": 1, "name": ""}, "needs a name"),
    ({"specchat_preset": 1, "name": "x", "settings": {"temperature": "hot"}}, "temperature: must be a finite number"),
    ({"specchat_preset": 1, "name": "x", "settings": {"top_p": 0}}, "top_p must be in"),
    ({"specchat_preset": 1, "name": "x", "settings": {"speculation": "warp"}}, "speculation must be one of"),
    ({"specchat_preset": 1, "name": "x", "settings": {"target": "/evil.gguf"}}, "does not choose target"),
    ({"specchat_preset": 1, "name": "x", "settings": {"colour": "red"}}, "unknown setting 'colour'"),
    ({"specchat_preset": 1, "name": "x", "settings": {"structured_kind": "json_schema", "structured_text": "{"}},
     "the JSON schema does not read"),
])
def test_a_bad_preset_file_is_refused_whole_in_one_line(tmp_path, doc, line):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PresetError, match=line.replace("(", r"\(")) as err:
        read_preset_file(path)
    assert str(err.value).startswith("bad.json: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("text, line", [("[" * 5000, "not a preset"), ("NaN", "not a SpecChat preset"),
                                        ('{"specchat_preset": 1, "name": "x", "settings": {"temperature": NaN}}',
                                         "finite")])
def test_hostile_json_is_one_line(tmp_path, text, line):
    path = tmp_path / "h.json"
    path.write_text(text)
    with pytest.raises(PresetError, match=line):
        read_preset_file(path)


def test_a_file_past_the_cap_is_not_read_whole(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text('{"specchat_preset": 1, "name": "x", "description": "' + "a" * (300 << 10) + '"}')
    with pytest.raises(PresetError, match="more than 256 KiB"):
        read_preset_file(path)


def test_a_damaged_file_in_the_folder_is_skipped_and_said_once(library, caplog):
    library.folder.mkdir(parents=True)
    (library.folder / "broken.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert [p.name for p in library.presets()] == [p.name for p in SHIPPED]
        library.presets()
    assert sum("broken.json" in r.getMessage() for r in caplog.records) == 1


def test_two_names_that_share_a_file_do_not_overwrite_each_other(library):
    library.save(Preset("My preset", ChatSettings()))
    with pytest.raises(PresetError, match="already holds the preset 'My preset'"):
        library.save(Preset("my-preset!", ChatSettings()))
