"""One user profile: every file the app reads and writes for one user, named in one place.

A profile is three directories: the config dir (``config.toml``, the user's
``catalog.toml``), the data dir (the chat database, the model registry, the instance
lock) and the cache dir (the calibration cache).  :meth:`Profile.default` is the
platformdirs set (so ``XDG_CONFIG_HOME`` and friends move it, as tests do);
:meth:`Profile.at` puts all three under one directory (``specchat --profile DIR``).
Two profiles share no file, so they may run side by side.

Qt-free and a leaf: it imports nothing of the app, so every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from specchat.files import write_text_atomically  # noqa: F401  (re-exported: where callers found it)

APP_NAME = "specchat"


@dataclass(frozen=True, slots=True)
class Profile:
    config_dir: Path
    data_dir: Path
    cache_dir: Path
    config_file: Path  # config_dir/config.toml unless 'specchat --config FILE' named another

    @classmethod
    def default(cls) -> Profile:
        """The platformdirs dirs (Linux: ~/.config/specchat, ~/.local/share/specchat, ~/.cache/specchat)."""
        from platformdirs import user_cache_dir, user_config_dir, user_data_dir

        config = Path(user_config_dir(APP_NAME))
        return cls(config, Path(user_data_dir(APP_NAME)), Path(user_cache_dir(APP_NAME)), config / "config.toml")

    @classmethod
    def at(cls, root: str | Path) -> Profile:
        """A self-contained profile: root/config.toml, root/catalog.toml, root/data/..., root/cache/...

        The directory need not exist yet: it is created by the first write.
        """
        root = Path(root).expanduser().absolute()
        return cls(root, root / "data", root / "cache", root / "config.toml")

    def with_config_file(self, path: str | Path | None) -> Profile:
        """The same profile with another settings file (``--config FILE``); None: unchanged."""
        return self if path is None else replace(self, config_file=Path(path).expanduser().absolute())

    @property
    def database(self) -> Path:
        """The chats (SQLite)."""
        return self.data_dir / "specchat.sqlite3"

    @property
    def registry(self) -> Path:
        """Installed models, proven pairs and the last pair used (JSON)."""
        return self.data_dir / "registry.json"

    @property
    def instance_lock(self) -> Path:
        """Held by the one app instance of this profile."""
        return self.data_dir / "specchat.lock"

    @property
    def calibration_cache(self) -> Path:
        """Measured decode costs per machine and model file."""
        return self.cache_dir / "calibration.json"

    @property
    def user_catalog(self) -> Path:
        """The user's own pairs (``specchat models add``), beside the settings."""
        return self.config_dir / "catalog.toml"
