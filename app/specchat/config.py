"""App settings: a declarative schema, stored as TOML in the profile's config dir.

Each setting is declared once (key, default, range, help); the settings dialog
and the config file are both built from :data:`SCHEMA`, and a bad value is
refused with one line that names the key (and the file, when it came from one).
Rules between settings (k_min <= k_max) are checked with the file at load and
with every candidate (:meth:`AppConfig.replaced`), so a config in memory is
always whole and valid.  Qt-free.

Changing settings from a dialog: ``candidate = config.replaced(values)`` checks
everything and touches nothing (ConfigError: show it, keep the dialog open);
``config.apply(values)`` does that, saves, and only then takes the new values;
Cancel does nothing, so the config stays exactly as it was.
"""

from __future__ import annotations

import math
import textwrap
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specchat import files
from specchat.engine.settings import ControllerSettings
from specchat.errors import UserError
from specchat.modes import LEGACY_MODES, MENU_NAMES, MODES_HELP
from specchat.profile import Profile

LOCK_TIMEOUT_S = files.LOCK_TIMEOUT_S
# The full example file is ~4 KiB; anything near this is not a settings file, and is never
# read whole into memory.
MAX_CONFIG_BYTES = 1 << 20


class ConfigError(UserError, ValueError):
    """One line naming the bad key (and the file, when the value came from one)."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def as_int(value: object) -> int:
    """A checked whole-number setting, typed: the schema stored an int there (TypeError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not a whole-number setting: {_short(value)}")
    return value


def as_float(value: object) -> float:
    """A checked number setting, typed (a whole number reads as a float; TypeError for anything else)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"not a number setting: {_short(value)}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    label: str
    default: object
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    help: str = ""
    legacy: tuple[tuple[str, str], ...] = ()  # (old value, its name now): read, never written

    def check(self, value: object) -> object:
        """The value as stored, or ConfigError naming the key.  NaN and infinity are refused."""
        d = self.default
        if self.choices:
            value = dict(self.legacy).get(value, value) if isinstance(value, str) else value
            if value not in self.choices:
                raise ConfigError(f"{self.key}: must be one of {', '.join(self.choices)} (got {_short(value)})")
            return value
        if isinstance(d, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{self.key}: must be true or false (got {_short(value)})")
            return value
        if isinstance(d, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{self.key}: must be a whole number (got {_short(value)})")
            self._check_range(value)
        elif isinstance(d, float):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{self.key}: must be a number (got {_short(value)})")
            if not math.isfinite(value):
                raise ConfigError(f"{self.key}: must be a finite number (got {_short(value)})")
            value = float(value)
            self._check_range(value)
        elif isinstance(d, str) and not isinstance(value, str):
            raise ConfigError(f"{self.key}: must be text (got {_short(value)})")
        return value

    def _check_range(self, value: float) -> None:
        # a bound is only declared on numbers (a text or choice setting has none)
        if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
            raise ConfigError(f"{self.key}: must be between {self.lo:g} and {self.hi:g} (got {_short(value)})")


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
            choices=MENU_NAMES, legacy=tuple(LEGACY_MODES.items()), help=MODES_HELP),
    Setting("k_min", "Shortest draft (K min)", _C.k_min, 1, 32, help="the controller never drafts fewer tokens"),
    Setting("k_max", "Longest draft (K max)", _C.k_max, 1, 32, help="the controller never drafts more tokens"),
    Setting("lookup_k_max", "Longest prompt-lookup draft", _C.lookup_k_max, 1, 32,
            help="prompt lookup drafts up to this many tokens where its match is long (a copy of the prompt)"),
    Setting("p_min", "Draft stops below this top probability", _C.p_min, 0.0, 1.0,
            help="the draft stops proposing when its own top token is less likely than this"),
    Setting("min_token_acceptance", "Fall back below token acceptance", _C.min_token_acceptance, 0.0, 1.0,
            help="below this share of drafted tokens accepted (rolling window), decode plainly for a while"),
    Setting("min_sequence_acceptance", "Fall back below sequence acceptance", _C.min_sequence_acceptance,
            0.0, 1.0, help="below this share of drafts accepted whole (rolling window), decode plainly for a while"),
    Setting("fallback_warning_share", "Warn when fallback exceeds this share", _C.fallback_warning_share,
            0.0, 1.0, help="a status-bar warning when this share of rounds fell back to plain decoding"),
    Setting("theme", "Theme", "system", choices=("system", "light", "dark"),
            help="system follows the desktop's light or dark scheme as it changes"),
    Setting("remote_header_cap_mib", "Header check: most MiB read per hub file", 64, 1, 1024,
            help="checking a pair on the hub reads only the GGUF headers (rarely over 10 MiB); a file whose "
                 "header needs more is refused. At most 5% of a file is read, but 16 MiB is always allowed"),
)
BY_KEY = {s.key: s for s in SCHEMA}




def default_config_path() -> Path:
    return Profile.default().config_file


def example_toml() -> str:
    """Every setting with its default and help, as a commented TOML file (docs/config.example.toml)."""
    lines = ["# SpecChat settings: config.toml in the platformdirs config dir",
             "# (Linux ~/.config/specchat, macOS ~/Library/Application Support/specchat,",
             "# Windows %LOCALAPPDATA%\\specchat), DIR/config.toml with 'specchat --profile DIR',",
             "# or any file given with 'specchat --config FILE'.",
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
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return repr(v)


def _render(values: Mapping[str, object]) -> str:
    lines = ["# SpecChat settings; every key is optional (defaults in specchat/config.py)"]
    lines += [f"{s.key} = {_toml_value(values[s.key])}" for s in SCHEMA if values[s.key] != s.default]
    return "\n".join(lines) + "\n"


def _defaults() -> dict[str, object]:
    return {s.key: s.default for s in SCHEMA}


def check_rules(values: Mapping[str, object]) -> None:
    """Rules between settings; ConfigError with one line naming the keys."""
    k_min, k_max = as_int(values["k_min"]), as_int(values["k_max"])
    if k_min > k_max:
        raise ConfigError(f"k_min ({k_min}) must not be above k_max ({k_max})")
    try:  # and whatever else the engine requires of its settings, so the config never gets past a load
        _controller_of(values).validate()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _controller_of(values: Mapping[str, object]) -> ControllerSettings:
    return ControllerSettings(
        k_min=as_int(values["k_min"]), k_max=as_int(values["k_max"]), p_min=as_float(values["p_min"]),
        lookup_k_max=as_int(values["lookup_k_max"]),
        min_token_acceptance=as_float(values["min_token_acceptance"]),
        min_sequence_acceptance=as_float(values["min_sequence_acceptance"]),
        fallback_warning_share=as_float(values["fallback_warning_share"]),
    )


def _exists(path: Path) -> bool:
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, but not readable: reading it says why
    return True


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def read_config_file(path: Path) -> dict[str, object]:
    """The settings a file sets, each checked, and the rules between them checked with the defaults
    for the rest; ConfigError with one line naming the file."""
    return _parse_config(path, _read_config_bytes(path))


def _read_config_bytes(path: Path) -> bytes:
    try:
        raw, more = files.read_capped(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if more:
        raise _DamagedConfig(f"{path}: larger than {MAX_CONFIG_BYTES >> 20} MiB: not a SpecChat settings file")
    return raw


class _DamagedConfig(ConfigError):
    """The file was read but says something SpecChat cannot use (not an unreadable file)."""


def _parse_config(path: Path, raw: bytes) -> dict[str, object]:
    try:
        return _parse_config_text(path, raw)
    except ConfigError as exc:
        raise _DamagedConfig(str(exc)) from None


def _parse_config_text(path: Path, raw: bytes) -> dict[str, object]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({_one_line(exc)})") from None
    out: dict[str, object] = {}
    for key, value in doc.items():
        if key not in BY_KEY:
            raise ConfigError(f"{path}: unknown key '{key}'")
        try:
            out[key] = BY_KEY[key].check(value)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    try:
        check_rules(_defaults() | out)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return out


class AppConfig:
    """The settings in force: defaults, overridden by the file's values; always valid as a whole.

    ``path`` None: the default profile's file, which need not exist.  With ``must_exist``
    (``specchat --config FILE``) a missing file is an error: a typo should not silently
    give defaults.
    """

    def __init__(self, path: Path | None = None, *, must_exist: bool = False) -> None:
        self.path = Path(path) if path is not None else default_config_path()
        self.values: dict[str, object] = _defaults()
        if _exists(self.path):
            self.values.update(read_config_file(self.path))
        elif must_exist:
            raise ConfigError(f"{self.path}: no such config file")
        self._base = dict(self.values)  # as last read or written: save() merges the changes since

    @classmethod
    def defaults(cls, path: Path | None = None) -> AppConfig:
        """The built-in defaults, whatever the file says (tests, parsers without a config)."""
        c = cls.__new__(cls)
        c.path = Path(path) if path is not None else default_config_path()
        c.values = _defaults()
        c._base = dict(c.values)
        return c

    def __getitem__(self, key: str) -> object:
        return self.values[key]

    def set(self, key: str, value: object) -> None:
        """One key, checked alone (rules between keys: :meth:`replaced`, :meth:`save`)."""
        if key not in BY_KEY:
            raise ConfigError(f"unknown key '{key}'")
        self.values[key] = BY_KEY[key].check(value)

    def replaced(self, values: Mapping[str, object]) -> AppConfig:
        """A new config with ``values`` over these, every key and every rule checked; this one is untouched.

        ConfigError (one line naming the key) for an unknown key, a bad value or a broken rule.
        """
        new = dict(self.values)
        for key, value in values.items():
            if key not in BY_KEY:
                raise ConfigError(f"unknown key '{key}'")
            new[key] = BY_KEY[key].check(value)
        check_rules(new)
        c = AppConfig.__new__(AppConfig)
        c.path, c.values, c._base = self.path, new, dict(self._base)
        return c

    def apply(self, values: Mapping[str, object], *, save: bool = True) -> None:
        """All of ``values`` or nothing: checked as a whole, saved (``save``), and only then in force.

        On ConfigError (a bad value, a broken rule, a file that cannot be written or read
        back) this config is exactly as it was.
        """
        candidate = self.replaced(values)
        if save:
            candidate.save()
        self.values, self._base = candidate.values, candidate._base

    def save(self) -> None:
        """Write the settings that differ from the defaults, atomically, merged under a lock.

        The file is read again first: keys changed here since it was read win, the others
        keep what another process may have written meanwhile.  A file that became damaged
        since (a hand edit that does not parse, a bad value) is moved aside with one
        warning naming both files, never silently replaced; the settings saved are then
        these.  A file that cannot be read is left alone (ConfigError, one line).
        """
        try:
            with files.locked(self.path, LOCK_TIMEOUT_S):
                merged = self._on_disk_locked() | {k: v for k, v in self.values.items() if v != self._base.get(k)}
                try:
                    check_rules(merged)
                except ConfigError as exc:
                    raise ConfigError(f"{self.path}: not saved: {exc}") from None
                files.write_text_atomically(self.path, _render(merged))
        except files.FileBusyError as exc:
            raise ConfigError(f"{exc} (not saved)") from None
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write ({exc.strerror or exc})") from None
        self.values, self._base = merged, dict(merged)

    def _on_disk_locked(self) -> dict[str, object]:
        """The settings in the file now (the caller holds its lock); a damaged file is moved aside
        and counts as the settings this config last read or wrote."""
        if not _exists(self.path):
            return _defaults()
        try:
            return _defaults() | read_config_file(self.path)
        except _DamagedConfig as exc:
            aside = files.move_aside(self.path)
            files.warn(f"{exc}: moved aside to {aside}; the settings were saved to a new {self.path.name}")
            return dict(self._base)

    def model_path(self, key: str) -> Path | None:
        """``target`` or ``draft`` as a path (``~`` expanded, relative to the config file), None if unset."""
        text = str(self[key]).strip()
        if not text:
            return None
        p = Path(text).expanduser()
        return p if p.is_absolute() else (self.path.parent / p).resolve()

    def controller(self) -> ControllerSettings:
        check_rules(self.values)  # ConfigError: values set one by one with set() may break a rule
        return _controller_of(self.values)
