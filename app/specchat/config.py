"""App settings: a declarative schema, stored as TOML in the platformdirs config dir.

Each setting is declared once (key, default, range, help); the settings dialog
and the config file are both built from :data:`SCHEMA`, and a bad value is
refused with one line that names the key.  Qt-free.
"""

from __future__ import annotations

import os
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
SCHEMA: tuple[Setting, ...] = (
    Setting("n_ctx", "Context size (tokens)", 4096, 256, 262144, help="tokens the model sees at once"),
    Setting("gpu_layers", "GPU layers, target (-1 = all)", -1, -1, 999),
    Setting("draft_gpu_layers", "GPU layers, draft (-1 = all)", -1, -1, 999),
    Setting("threads", "CPU threads (0 = physical cores)", 0, 0, 256),
    Setting("default_mode", "Default speculation for new chats", "auto",
            choices=("auto", "draft", "lookup", "off")),
    Setting("k_min", "Shortest draft (K min)", _C.k_min, 1, 32),
    Setting("k_max", "Longest draft (K max)", _C.k_max, 1, 32),
    Setting("p_min", "Draft stops below this top probability", _C.p_min, 0.0, 1.0),
    Setting("min_token_acceptance", "Fall back below token acceptance", _C.min_token_acceptance, 0.0, 1.0),
    Setting("min_sequence_acceptance", "Fall back below sequence acceptance", _C.min_sequence_acceptance,
            0.0, 1.0),
    Setting("fallback_warning_share", "Warn when fallback exceeds this share", _C.fallback_warning_share,
            0.0, 1.0),
    Setting("theme", "Theme", "light", choices=("light", "dark")),
)
BY_KEY = {s.key: s for s in SCHEMA}


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("specchat")) / "config.toml"


class AppConfig:
    """The settings in force: defaults, overridden by the file's values."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_config_path()
        self.values: dict[str, object] = {s.key: s.default for s in SCHEMA}
        if self.path.exists():
            self.values.update(self._read(self.path))

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
            text = ("true" if v else "false") if isinstance(v, bool) else (
                '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' if isinstance(v, str) else repr(v))
            lines.append(f"{s.key} = {text}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

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
