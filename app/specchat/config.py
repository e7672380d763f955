"""App settings: a declarative schema, stored as TOML in the platformdirs config dir.

Each setting is declared once (key, default, range, help); the settings dialog
and the config file are both built from :data:`SCHEMA`, and a bad value is
refused with one line that names the key.  Qt-free.
"""

from __future__ import annotations

import os
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

from specchat.engine.settings import ControllerSettings


class ConfigError(ValueError):
    """One line naming the bad key."""


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    label: str
    default: object
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    help: str = ""

    def check(self, value: object) -> object:
        d = self.default
        if self.choices:
            if value not in self.choices:
                raise ConfigError(f"{self.key}: must be one of {', '.join(self.choices)} (got {value!r})")
            return value
        if isinstance(d, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{self.key}: must be true or false (got {value!r})")
            return value
        if isinstance(d, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{self.key}: must be a whole number (got {value!r})")
        elif isinstance(d, float):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{self.key}: must be a number (got {value!r})")
            value = float(value)
        elif isinstance(d, str) and not isinstance(value, str):
            raise ConfigError(f"{self.key}: must be text (got {value!r})")
        if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
            raise ConfigError(f"{self.key}: must be between {self.lo:g} and {self.hi:g} (got {value!r})")
        return value


_C = ControllerSettings()
DECODE_NICE = 2  # docs/benchmarks.md: window lateness p99 13.6 ms at 0, 11.4 ms at 2, 8.3 ms at 5 (two busy cores)
SCHEMA: tuple[Setting, ...] = (
    Setting("target", "Default target model (GGUF file)", "",
            help="the large model that verifies; used by new chats when none exists yet, and by "
                 "'specchat chat' / 'bench' when --target is not given"),
    Setting("draft", "Default draft model (GGUF file)", "",
            help="the small model that proposes tokens (same tokenizer as the target); empty: none"),
    Setting("n_ctx", "Context size (tokens)", 4096, 256, 262144, help="tokens the model sees at once"),
    Setting("gpu_layers", "GPU layers, target (-1 = all)", -1, -1, 999,
            help="layers of the target offloaded to the GPU; 0 runs it on the CPU"),
    Setting("draft_gpu_layers", "GPU layers, draft (-1 = all)", -1, -1, 999,
            help="layers of the draft offloaded to the GPU"),
    Setting("threads", "CPU threads (0 = physical cores)", 0, 0, 256, help="threads for the CPU part of decoding"),
    Setting("decode_nice", "Decoding priority below the window (nice)", DECODE_NICE, 0, 19,
            help="Linux: decoding runs this much nicer than the window, so the window stays smooth "
                 "while llama.cpp keeps every core busy; 0: an equal share (from the next start)"),
    Setting("default_mode", "Default speculation for new chats", "auto",
            choices=("auto", "draft", "lookup", "off"),
            help="auto: speculate only where it pays; draft: always the draft model; "
                 "lookup: n-grams from the prompt; off: plain decoding"),
    Setting("k_min", "Shortest draft (K min)", _C.k_min, 1, 32, help="the controller never drafts fewer tokens"),
    Setting("k_max", "Longest draft (K max)", _C.k_max, 1, 32, help="the controller never drafts more tokens"),
    Setting("p_min", "Draft stops below this top probability", _C.p_min, 0.0, 1.0,
            help="the draft stops proposing when its own top token is less likely than this"),
    Setting("min_token_acceptance", "Fall back below token acceptance", _C.min_token_acceptance, 0.0, 1.0,
            help="below this share of drafted tokens accepted (rolling window), decode plainly for a while"),
    Setting("min_sequence_acceptance", "Fall back below sequence acceptance", _C.min_sequence_acceptance,
            0.0, 1.0, help="below this share of drafts accepted whole (rolling window), decode plainly for a while"),
    Setting("fallback_warning_share", "Warn when fallback exceeds this share", _C.fallback_warning_share,
            0.0, 1.0, help="a status-bar warning when this share of rounds fell back to plain decoding"),
    Setting("theme", "Theme", "light", choices=("light", "dark")),
)
BY_KEY = {s.key: s for s in SCHEMA}


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("specchat")) / "config.toml"


def example_toml() -> str:
    """Every setting with its default and help, as a commented TOML file (docs/config.example.toml)."""
    lines = ["# SpecChat settings: config.toml in the platformdirs config dir",
             "# (Linux ~/.config/specchat, macOS ~/Library/Application Support/specchat,",
             "# Windows %LOCALAPPDATA%\\specchat), or any file given with 'specchat --config FILE'.",
             "# Every key is optional; the values below are the defaults.", ""]
    for s in SCHEMA:
        lines += textwrap.wrap(f"{s.label}" + (f": {s.help}" if s.help else ""), 98,
                               initial_indent="# ", subsequent_indent="#   ")
        if s.choices:
            lines.append(f"# one of: {', '.join(s.choices)}")
        elif s.lo is not None:
            lines.append(f"# from {s.lo:g} to {s.hi:g}")
        lines.append(f"{s.key} = {_toml_value(s.default)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


class AppConfig:
    """The settings in force: defaults, overridden by the file's values.

    ``path`` None: the default file, which need not exist.  A ``path`` given explicitly
    (``specchat --config FILE``) must exist: a typo should not silently give defaults.
    """

    def __init__(self, path: Path | None = None, *, must_exist: bool = False) -> None:
        self.path = path or default_config_path()
        self.values: dict[str, object] = {s.key: s.default for s in SCHEMA}
        if self.path.exists():
            self.values.update(self._read(self.path))
        elif must_exist:
            raise ConfigError(f"{self.path}: no such config file")

    @staticmethod
    def _read(path: Path) -> dict[str, object]:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
        out = {}
        for key, value in doc.items():
            if key not in BY_KEY:
                raise ConfigError(f"{path.name}: unknown key '{key}'")
            out[key] = BY_KEY[key].check(value)
        return out

    @classmethod
    def defaults(cls) -> AppConfig:
        """The built-in defaults, whatever the user's file says (tests, parsers without a config)."""
        c = cls.__new__(cls)
        c.path = default_config_path()
        c.values = {s.key: s.default for s in SCHEMA}
        return c

    def __getitem__(self, key: str) -> object:
        return self.values[key]

    def set(self, key: str, value: object) -> None:
        self.values[key] = BY_KEY[key].check(value)

    def save(self) -> None:
        lines = ["# SpecChat settings; every key is optional (defaults in specchat/config.py)"]
        for s in SCHEMA:
            v = self.values[s.key]
            if v == s.default:
                continue
            lines.append(f"{s.key} = {_toml_value(v)}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def model_path(self, key: str) -> Path | None:
        """``target`` or ``draft`` as a path (``~`` expanded, relative to the config file), None if unset."""
        text = str(self[key]).strip()
        if not text:
            return None
        p = Path(text).expanduser()
        return p if p.is_absolute() else (self.path.parent / p).resolve()

    def controller(self) -> ControllerSettings:
        c = ControllerSettings(
            k_min=int(self["k_min"]), k_max=int(self["k_max"]), p_min=float(self["p_min"]),
            min_token_acceptance=float(self["min_token_acceptance"]),
            min_sequence_acceptance=float(self["min_sequence_acceptance"]),
            fallback_warning_share=float(self["fallback_warning_share"]),
        )
        try:
            c.validate()
        except ValueError as exc:
            raise ConfigError(f"k_min/k_max: {exc}") from None
        return c
