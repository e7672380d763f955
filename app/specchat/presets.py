"""Presets: named chat settings (system prompt, sampling, speculation mode, reasoning, structured output,
context policy, answer length, task tag) a chat takes when it starts or at any time.

Qt-free.  A preset never names models or a server: applied to a chat (:meth:`Preset.apply`) it keeps the
chat's pair and backend and replaces the rest.  The app ships three (:data:`SHIPPED`: code editing with
lookup, JSON extraction with a schema, a plain-speed reference); the user's own live as one JSON file each
in ``<config dir>/presets/`` (:class:`PresetLibrary`), and a user preset with a shipped one's name stands
in its place.  The same JSON is what Export writes and Import reads::

    {"specchat_preset": 1, "name": "...", "description": "...", "settings": {<ChatSettings' stored keys>}}

Reading one is checked like a stored chat's settings (:meth:`specchat.store.ChatSettings.read`: nesting
bounded, every key of its declared type, numbers finite, :meth:`SamplingSettings.validate`'s rules), but
strictly: a preset with a bad key, an unknown key or a file past :data:`MAX_FILE_BYTES` is refused whole in
one line (a preset half applied would be a surprise); in the presets folder such a file is left where it
is, skipped, and said once.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from specchat import bounded_json
from specchat.errors import UserError
from specchat.files import read_capped, write_text_atomically
from specchat.sampling_settings import SamplingSettings, StructuredOutput
from specchat.store.records import ChatSettings

log = logging.getLogger(__name__)

FORMAT = 1
MAX_FILE_BYTES = 256 << 10  # a schema of 64 KiB and a long system prompt fit many times over
MAX_NAME_CHARS = 80
FOLDER = "presets"
# What a preset decides: every chat setting but the models and where the chat runs.
NOT_IN_PRESET = frozenset({"target", "draft", "backend", "server_spec_type"})


class PresetError(UserError):
    """A preset that cannot be read, written or named: one line."""


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    settings: ChatSettings  # its target, draft and backend are never used (NOT_IN_PRESET)
    description: str = ""
    shipped: bool = False  # one of SHIPPED, not a file of the user's

    def apply(self, chat: ChatSettings) -> ChatSettings:
        """``chat``'s settings with this preset's: the chat keeps its models and backend."""
        keep = {k: getattr(chat, k) for k in NOT_IN_PRESET}
        return replace(self.settings, **keep)

    def to_json(self) -> str:
        settings = json.loads(self.settings.to_json())
        doc = {"specchat_preset": FORMAT, "name": self.name, "description": self.description,
               "settings": {k: v for k, v in sorted(settings.items()) if k not in NOT_IN_PRESET}}
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Preset:
        """A preset from its JSON, checked (PresetError, one line, for anything wrong)."""
        try:
            doc = bounded_json.loads(text)
        except ValueError as exc:
            raise PresetError(f"not a preset: {_brief(exc)}") from None
        if not isinstance(doc, dict) or "specchat_preset" not in doc:
            raise PresetError("not a SpecChat preset (no \"specchat_preset\" key)")
        version = doc.get("specchat_preset")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise PresetError(f"specchat_preset must be a format number, got {_shown(version)}")
        if version > FORMAT:
            raise PresetError(f"the preset has format {version}; this SpecChat reads up to {FORMAT}")
        name = clean_name(doc.get("name"))
        description = doc.get("description", "")
        if not isinstance(description, str):
            raise PresetError(f"{name}: description must be text, got {_shown(description)}")
        settings = doc.get("settings", {})
        if not isinstance(settings, dict):
            raise PresetError(f"{name}: settings must be an object, got {_shown(settings)}")
        foreign = sorted(set(settings) & NOT_IN_PRESET)
        if foreign:
            raise PresetError(f"{name}: a preset does not choose {', '.join(foreign)}")
        unknown = sorted(set(settings) - _PRESET_KEYS)
        if unknown:
            raise PresetError(f"{name}: unknown setting {', '.join(map(repr, unknown[:5]))}")
        try:
            read, bad = ChatSettings.read(json.dumps(settings))
        except ValueError as exc:
            raise PresetError(f"{name}: {_brief(exc)}") from None
        if bad:
            raise PresetError(f"{name}: {'; '.join(bad)}")
        _check_schema(name, read.sampling.structured)
        return cls(name, read, " ".join(description.split())[:500])


_PRESET_KEYS = frozenset(json.loads(ChatSettings().to_json())) - NOT_IN_PRESET


def _check_schema(name: str, structured: StructuredOutput) -> None:
    """A JSON schema must at least be a JSON object (a grammar is parsed by the engine when it is used)."""
    if structured.kind != "json_schema":
        return
    try:
        schema = bounded_json.loads(structured.text)
    except ValueError as exc:
        raise PresetError(f"{name}: the JSON schema does not read: {_brief(exc)}") from None
    if not isinstance(schema, dict):
        raise PresetError(f"{name}: the JSON schema must be a JSON object")


def clean_name(name: object) -> str:
    if not isinstance(name, str) or not " ".join(name.split()):
        raise PresetError(f"a preset needs a name, got {_shown(name)}")
    text = " ".join(re.sub(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]", " ", name).split())
    if len(text) > MAX_NAME_CHARS:
        raise PresetError(f"a preset's name is at most {MAX_NAME_CHARS} characters")
    return text


def file_stem(name: str) -> str:
    """The file a preset is saved as: its name in lowercase letters, digits and dashes."""
    stem = re.sub(r"[^a-z0-9]+", "-", name.casefold()).strip("-")[:60]
    return stem or "preset"


def _brief(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:159] + "…"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- the shipped presets ------------------------------------------------------------------------------

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "value": {"type": "string"},
                               "source": {"type": "string"}},
                "required": ["field", "value"],
            },
        },
    },
    "required": ["items"],
}

SHIPPED: tuple[Preset, ...] = (
    Preset(
        "Code editing (lookup)",
        ChatSettings(
            speculation="lookup", reasoning=False, task="edit", max_tokens=4096,
            context_policy="truncate_middle",
            system_prompt=("You edit code. Make exactly the change asked for and keep everything else as it is. "
                           "Answer with the changed code in full, in one fenced block, and no explanation."),
            sampling=SamplingSettings(temperature=0.0, repeat_penalty=1.0)),
        "Greedy, no reasoning, drafts by lookup from the prompt: an edit copies most of the file, so drafts "
        "from the attached file are accepted in long runs.", shipped=True),
    Preset(
        "JSON extraction",
        ChatSettings(
            speculation="auto", reasoning=False, task="json", max_tokens=1024,
            system_prompt=("Extract every field the user asks for from the text. Answer only with JSON; "
                           "quote the value as it is written and, where you can, the sentence it comes from."),
            sampling=SamplingSettings(temperature=0.0, structured=StructuredOutput(
                "json_schema", json.dumps(EXTRACTION_SCHEMA, indent=2)))),
        "Greedy, answers must follow a JSON schema (a list of field, value, source); edit the schema to "
        "the fields you need.", shipped=True),
    Preset(
        "Plain speed reference",
        ChatSettings(speculation="baseline", reasoning=False, task="chat", max_tokens=512,
                     sampling=SamplingSettings(temperature=0.0)),
        "Plain decoding, greedy: the speed the other modes are measured against (x vs plain).", shipped=True),
)


# -- the user's presets -----------------------------------------------------------------------------------

class PresetLibrary:
    """The shipped presets and the user's, in ``folder`` (``<config dir>/presets``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._told: set[tuple[str, float]] = set()

    @classmethod
    def of(cls, config_dir: Path) -> PresetLibrary:
        return cls(Path(config_dir) / FOLDER)

    def presets(self) -> list[Preset]:
        """The shipped presets (or the user's of the same name in their place), then the user's, by name."""
        own = {p.name.casefold(): p for p in self._own()}
        shipped = [own.pop(p.name.casefold(), p) for p in SHIPPED]
        return shipped + sorted(own.values(), key=lambda p: p.name.casefold())

    def get(self, name: str) -> Preset:
        found = next((p for p in self.presets() if p.name.casefold() == name.casefold()), None)
        if found is None:
            raise KeyError(f"no preset {name!r}")
        return found

    def path_of(self, name: str) -> Path:
        return self.folder / f"{file_stem(name)}.json"

    def save(self, preset: Preset) -> Path:
        """Write the user's preset (a shipped one's name: the user's stands in its place).  The settings are
        checked first (ValueError names the field); OSError as it comes, PresetError for a name taken by
        another file's preset."""
        name = clean_name(preset.name)
        preset.settings.validate()
        path = self.path_of(name)
        if path.exists():
            try:
                other = self._read(path)
            except PresetError:
                other = None
            if other is not None and other.name.casefold() != name.casefold():
                raise PresetError(f"{path.name} already holds the preset {other.name!r}; choose another name")
        write_text_atomically(path, replace(preset, name=name, shipped=False).to_json())
        return path

    def delete(self, name: str) -> bool:
        """Remove the user's preset (a shipped one comes back in its place); False if there was none."""
        for path in self._files():
            try:
                preset = self._read(path)
            except PresetError:
                continue
            if preset.name.casefold() == name.casefold():
                path.unlink()
                return True
        return False

    def import_file(self, path: Path) -> Preset:
        """Read a preset file (PresetError, one line, for anything wrong) and save it among the user's."""
        preset = read_preset_file(path)
        self.save(preset)
        return preset

    def _files(self) -> Iterable[Path]:
        try:
            return sorted(p for p in self.folder.iterdir() if p.suffix == ".json" and p.is_file())
        except OSError:
            return []

    def _own(self) -> list[Preset]:
        out = []
        for path in self._files():
            try:
                out.append(self._read(path))
            except PresetError as exc:
                key = (str(path), _mtime(path))
                if key not in self._told:
                    self._told.add(key)
                    log.warning("preset %s skipped: %s", path, exc)
        return out

    @staticmethod
    def _read(path: Path) -> Preset:
        return read_preset_file(path)


def read_preset_file(path: Path) -> Preset:
    try:
        data, more = read_capped(Path(path), MAX_FILE_BYTES)
    except OSError as exc:
        raise PresetError(f"cannot read {Path(path).name}: {exc.strerror or exc}") from None
    if more:
        raise PresetError(f"{Path(path).name} is more than {MAX_FILE_BYTES >> 10} KiB: not a preset")
    try:
        return Preset.from_json(data)
    except PresetError as exc:
        raise PresetError(f"{Path(path).name}: {exc}") from None


def export_preset(preset: Preset, path: Path) -> None:
    """Write ``preset`` as a JSON file (OSError as it comes)."""
    write_text_atomically(Path(path), preset.to_json())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
