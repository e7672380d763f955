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
Cancel does nothing, so the config stays exactly as it was.  What new settings change is a
:class:`ConfigChange` (:meth:`AppConfig.change_to`): the keys, and the settings before and after.

The file has a format version (``version = N``, written on every save; none: version 1).  An
older file is brought up to date on load by :data:`MIGRATIONS` (one function per version step)
and written in the new form at the next save; a file from a newer SpecChat is refused with one
line and never touched.  A key this SpecChat does not know (a newer version's, a typo) is kept:
one warning names it and the file, and every save writes it back as it was.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from specchat import files, toml_doc
from specchat.engine.settings import ControllerSettings
from specchat.errors import UserError
from specchat.modes import MENU_NAMES, MODES_HELP
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
    # a change reloads the loaded pair: the key goes into how the pair is loaded (PairConfig.opens: model
    # options and the controller's load fields, engine.settings.LOAD_FIELDS; or the managed server's
    # command line). The controller's other keys are live: each answer brings them (no reload).
    reloads_pair: bool = False

    def check(self, value: object) -> object:
        """The value as stored, or ConfigError naming the key.  NaN and infinity are refused."""
        d = self.default
        if self.choices:
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
        elif isinstance(d, str):
            if not isinstance(value, str):
                raise ConfigError(f"{self.key}: must be text (got {_short(value)})")
            try:
                toml_doc.string(value)  # what the file could not hold (a lone surrogate) is refused here
            except ValueError as exc:
                raise ConfigError(f"{self.key}: {exc}") from None
        return value

    def _check_range(self, value: float) -> None:
        # a bound is only declared on numbers (a text or choice setting has none)
        if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
            raise ConfigError(f"{self.key}: must be between {self.lo:g} and {self.hi:g} (got {_short(value)})")


_C = ControllerSettings()
API_PORT = 8177  # serve.http.DEFAULT_PORT (config stands below serve; tests/test_config.py checks they agree)
DECODE_NICE = 2  # docs/benchmarks.md: window lateness p99 13.6 ms at 0, 11.4 ms at 2, 8.3 ms at 5 (two busy cores)
SCHEMA: tuple[Setting, ...] = (
    Setting("target", "Default target model (GGUF file)", "",
            help="the large model that verifies; every new chat starts with it (empty: with the latest "
                 "chat's), and 'specchat chat' / 'bench' use it when --target is not given"),
    Setting("draft", "Default draft model (GGUF file)", "",
            help="the small model that proposes tokens (same tokenizer as the target); empty: none"),
    Setting("n_ctx", "Context size (tokens)", 4096, 256, 262144, help="tokens the model sees at once",
            reloads_pair=True),
    Setting("gpu_layers", "GPU layers, target (-1 = all)", -1, -1, 999,
            help="layers of the target offloaded to the GPU; 0 runs it on the CPU", reloads_pair=True),
    Setting("draft_gpu_layers", "GPU layers, draft (-1 = all)", -1, -1, 999,
            help="layers of the draft offloaded to the GPU", reloads_pair=True),
    Setting("threads", "CPU threads (0 = fitted to the free cores)", 0, 0, 256,
            help="threads for the CPU part of decoding; 0 fits them to the cores other work leaves free, a number is kept",
            reloads_pair=True),
    Setting("decode_nice", "Decoding priority below the window (nice)", DECODE_NICE, 0, 19,
            help="Linux: decoding runs this much nicer than the window, so the window stays smooth "
                 "while llama.cpp keeps every core busy; 0: an equal share (from the next start)"),
    Setting("default_mode", "Default speculation for new chats", "auto",
            choices=MENU_NAMES, help=MODES_HELP),
    Setting("k_min", "Shortest draft (K min)", _C.k_min, 1, 32, help="the controller never drafts fewer tokens"),
    Setting("k_max", "Longest draft (K max)", _C.k_max, 1, 32, help="the controller never drafts more tokens",
            reloads_pair=True),
    Setting("lookup_k_max", "Longest prompt-lookup draft", _C.lookup_k_max, 1, 32,
            help="prompt lookup drafts up to this many tokens where its match is long (a copy of the prompt)",
            reloads_pair=True),
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
    Setting("api_port", "API server port", API_PORT, 1, 65535,
            help="Models → Serve the API answers OpenAI-compatible requests at http://127.0.0.1:PORT/v1 "
                 "with the loaded pair"),
    Setting("api_everywhere", "API server: reachable from other machines", False,
            help="listen on every network interface (0.0.0.0) instead of this machine only (127.0.0.1): "
                 "anyone who can reach this machine can use its models, so set an API key"),
    Setting("backup_keep", "Chat backups kept", 7, 1, 100,
            help="copies of the chat database kept in the data folder's backups/ (the oldest goes first); "
                 "one is made before every change of the database's schema"),
    Setting("backup_every_hours", "Back up the chats every (hours, 0 = only before upgrades)", 24, 0, 8760,
            help="while the app runs, a copy of the chats is made when the newest backup is older than this"),
)
BY_KEY = {s.key: s for s in SCHEMA}
# the settings the draft-length controller (and the telemetry panel's guard-rail lines) take: _controller_of
CONTROLLER_KEYS = frozenset({"k_min", "k_max", "p_min", "lookup_k_max", "min_token_acceptance",
                             "min_sequence_acceptance", "fallback_warning_share"})


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """New settings took force: which keys changed, and the settings before and after.

    Made by :meth:`AppConfig.change_to`; whoever holds the settings in force announces it (the
    window's :class:`specchat.services.settings.SettingsHolder`), and each listener reads the keys
    it cares about.
    """

    keys: frozenset[str]
    old: AppConfig
    new: AppConfig

    @property
    def reloads_pair(self) -> bool:
        """A changed key goes into how the pair is loaded (declared with ``reloads_pair`` in :data:`SCHEMA`)."""
        return any(BY_KEY[k].reloads_pair for k in self.keys)

    def __bool__(self) -> bool:
        return bool(self.keys)




# -- the file's version, and the migrations that bring an older file up to it ------------------------

CONFIG_VERSION = 2
Doc = dict[str, object]  # a config file's keys and values, as TOML read them


def _v1_to_v2(doc: Doc) -> Doc:
    """Version 2: the default mode "off" is called "baseline" (the engine's name for plain decoding)."""
    return doc | {"default_mode": "baseline"} if doc.get("default_mode") == "off" else doc


# MIGRATIONS[i] turns a file of version i + 1 into one of version i + 2; a file is read as the
# current version after every step from its own.  Add one (and bump CONFIG_VERSION) when a key is
# renamed, moved or its values change meaning; never edit one that shipped.
MIGRATIONS: tuple[Callable[[Doc], Doc], ...] = (_v1_to_v2,)
assert len(MIGRATIONS) == CONFIG_VERSION - 1


def default_config_path() -> Path:
    return Profile.default().config_file


def example_toml() -> str:
    """Every setting with its default and help, as a commented TOML file (docs/config.example.toml)."""
    lines = ["# SpecChat settings: config.toml in the platformdirs config dir",
             "# (Linux ~/.config/specchat, macOS ~/Library/Application Support/specchat,",
             "# Windows %LOCALAPPDATA%\\specchat), DIR/config.toml with 'specchat --profile DIR',",
             "# or any file given with 'specchat --config FILE'.",
             "# Every key is optional; the values below are the defaults.", "",
             "# The file's format version: SpecChat writes it, and brings an older file up to date",
             f"version = {CONFIG_VERSION}", ""]
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
    """``v`` as TOML reads it back (:func:`specchat.toml_doc.value`: every string escaped, tables inline)."""
    return toml_doc.value(v)


def _render(values: Mapping[str, object], unknown: Mapping[str, object]) -> str:
    lines = ["# SpecChat settings; every key is optional (defaults in specchat/config.py)",
             f"version = {CONFIG_VERSION}"]
    lines += [f"{s.key} = {_toml_value(values[s.key])}" for s in SCHEMA if values[s.key] != s.default]
    if unknown:
        lines.append("# not settings of this SpecChat version: kept as they were")
        lines += [f"{toml_doc.key(k)} = {_toml_value(v)}" for k, v in unknown.items()]
    return "\n".join(lines) + "\n"


def _checked_render(path: Path, values: Mapping[str, object], unknown: Mapping[str, object]) -> str:
    """The file a save writes, read back first: never a file SpecChat would then refuse (ConfigError)."""
    try:
        text = _render(values, unknown)
        read = _parse_config_text(path, text.encode("utf-8"))
        same = _render(_defaults() | read.values, read.unknown) == text  # so NaN in an unknown key compares
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"{path}: not saved: the file would not read back ({_one_line(exc)})") from None
    if not same:
        raise ConfigError(f"{path}: not saved: the file would not read back as written")
    return text


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
    # reads exactly CONTROLLER_KEYS
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


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """What a config file says, brought up to :data:`CONFIG_VERSION`: the settings it sets (each
    checked) and the keys this SpecChat does not know (as read, in the file's order)."""

    values: dict[str, object]
    unknown: dict[str, object]


def read_config_file(path: Path) -> ConfigFile:
    """The settings a file sets, each checked, and the rules between them checked with the defaults
    for the rest; ConfigError with one line naming the file (a file from a newer SpecChat too)."""
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


class _NewerConfig(ConfigError):
    """The file was written by a newer SpecChat: not read, never moved aside or overwritten."""


def _parse_config(path: Path, raw: bytes) -> ConfigFile:
    try:
        return _parse_config_text(path, raw)
    except _NewerConfig:
        raise
    except ConfigError as exc:
        raise _DamagedConfig(str(exc)) from None


def _migrated(path: Path, doc: Doc) -> Doc:
    """``doc`` brought up to :data:`CONFIG_VERSION` (without its ``version`` key)."""
    version = doc.pop("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"{path}: version: must be a whole number from 1 (got {_short(version)})")
    if version > CONFIG_VERSION:
        raise _NewerConfig(f"{path}: written by a newer SpecChat (config version {version}, this one reads "
                           f"up to {CONFIG_VERSION}); upgrade SpecChat, or use another --profile or --config")
    for migrate in MIGRATIONS[version - 1:]:
        doc = migrate(doc)
    return doc


def _parse_config_text(path: Path, raw: bytes) -> ConfigFile:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from None
    try:
        doc = toml_doc.loads(text)  # nesting bounded; every failure of the parser is a ValueError
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid TOML ({_one_line(exc)})") from None
    out: dict[str, object] = {}
    unknown: dict[str, object] = {}
    for key, value in _migrated(path, doc).items():
        if key not in BY_KEY:
            unknown[key] = value
            continue
        try:
            out[key] = BY_KEY[key].check(value)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    try:
        check_rules(_defaults() | out)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return ConfigFile(out, unknown)


class AppConfig:
    """The settings in force: defaults, overridden by the file's values; always valid as a whole.

    ``path`` None: the default profile's file, which need not exist.  With ``must_exist``
    (``specchat --config FILE``) a missing file is an error: a typo should not silently
    give defaults.  ``unknown``: the file's keys this SpecChat does not know, kept for the
    next save (one warning names them when the file is read).
    """

    def __init__(self, path: Path | None = None, *, must_exist: bool = False) -> None:
        self.path = Path(path) if path is not None else default_config_path()
        self.values: dict[str, object] = _defaults()
        self.unknown: dict[str, object] = {}
        if _exists(self.path):
            read = read_config_file(self.path)
            self.values.update(read.values)
            self.unknown = read.unknown
            if read.unknown:
                names = ", ".join(f"'{k}'" for k in read.unknown)
                files.warn(f"{self.path}: unknown key{'s' if len(read.unknown) > 1 else ''} {names}: "
                           "not a setting of this SpecChat version; kept in the file, unused")
        elif must_exist:
            raise ConfigError(f"{self.path}: no such config file")
        self._base = dict(self.values)  # as last read or written: save() merges the changes since

    @classmethod
    def defaults(cls, path: Path | None = None) -> AppConfig:
        """The built-in defaults, whatever the file says (tests, parsers without a config)."""
        c = cls.__new__(cls)
        c.path = Path(path) if path is not None else default_config_path()
        c.values = _defaults()
        c.unknown = {}
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
        c.path, c.values, c._base, c.unknown = self.path, new, dict(self._base), dict(self.unknown)
        return c

    def apply(self, values: Mapping[str, object], *, save: bool = True) -> None:
        """All of ``values`` or nothing: checked as a whole, saved (``save``), and only then in force.

        On ConfigError (a bad value, a broken rule, a file that cannot be written or read
        back) this config is exactly as it was.
        """
        candidate = self.replaced(values)
        if save:
            candidate.save()
        self.values, self._base, self.unknown = candidate.values, candidate._base, candidate.unknown

    def save(self) -> None:
        """Write the settings that differ from the defaults, atomically, merged under a lock.

        The file is read again first: keys changed here since it was read win, the others
        keep what another process may have written meanwhile.  A file that became damaged
        since (a hand edit that does not parse, a bad value) is moved aside with one
        warning naming both files, never silently replaced; the settings saved are then
        these.  A file that cannot be read, or was written by a newer SpecChat, is left alone
        (ConfigError, one line).  The file gets this version's ``version`` line, and the keys
        this SpecChat does not know are written back as the file has them.
        """
        try:
            with files.locked(self.path, LOCK_TIMEOUT_S):
                on_disk = self._on_disk_locked()
                merged = on_disk.values | {k: v for k, v in self.values.items() if v != self._base.get(k)}
                try:
                    check_rules(merged)
                except ConfigError as exc:
                    raise ConfigError(f"{self.path}: not saved: {exc}") from None
                files.write_text_atomically(self.path, _checked_render(self.path, merged, on_disk.unknown))
        except files.FileBusyError as exc:
            raise ConfigError(f"{exc} (not saved)") from None
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write ({exc.strerror or exc})") from None
        self.values, self._base, self.unknown = merged, dict(merged), on_disk.unknown

    def _on_disk_locked(self) -> ConfigFile:
        """The settings in the file now, over the defaults (the caller holds its lock); a damaged
        file is moved aside and counts as the settings this config last read or wrote."""
        if not _exists(self.path):
            return ConfigFile(_defaults(), {})
        try:
            read = read_config_file(self.path)
        except _DamagedConfig as exc:
            aside = files.move_aside(self.path)
            files.warn(f"{exc}: moved aside to {aside}; the settings were saved to a new {self.path.name}")
            return ConfigFile(dict(self._base), dict(self.unknown))
        return ConfigFile(_defaults() | read.values, read.unknown)

    def change_to(self, new: AppConfig) -> ConfigChange:
        """What taking ``new`` in place of these settings changes (no keys: nothing)."""
        keys = frozenset(s.key for s in SCHEMA if self.values[s.key] != new.values[s.key])
        return ConfigChange(keys, self, new)

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
