"""The user's servers: ``servers.json`` beside the settings, and their API keys in the OS keychain.

A server is a name, a base URL, TLS settings, the model to ask for and an optional
dcgm-exporter URL for its GPU memory.  The file is written atomically under a lock and
merged (a second window adding a server keeps the first one's); a damaged file is moved
aside, never overwritten.  The API key never touches the file: it lives in the OS
keychain through ``keyring`` (service "specchat", user "server:NAME").  Where no
keychain exists (a headless Linux box), the key comes from ``SPECCHAT_API_KEY`` for the
run, and saying so is the error message.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

from specchat import files
from specchat.bounded_json import loads
from specchat.errors import one_line, printable
from specchat.profile import Profile

from .errors import ServerError

KEYRING_SERVICE = "specchat"
API_KEY_ENV = "SPECCHAT_API_KEY"
MAX_SERVERS_BYTES = 1 << 20  # a few hundred bytes per server; a bigger file is not ours
MAX_SERVERS = 200
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
VERSION = 1


def servers_file(profile: Profile) -> Path:
    return profile.config_dir / "servers.json"


def check_url(url: str, what: str = "the server URL") -> str:
    """``url`` as a base URL (``http(s)://host[:port][/prefix]``, no trailing ``/`` or ``/v1``), or ServerError."""
    text = url.strip()
    if not text or len(text) > 2048 or any(not c.isprintable() or c.isspace() for c in text):
        raise ServerError(f"{what} is not a URL: {text[:80]!r}")
    try:
        parts = urlsplit(text)
    except ValueError:  # "http://[::1": an IPv6 host without its closing bracket
        raise ServerError(f"{what} is not a URL: {text[:80]!r} (an IPv6 host goes in brackets: "
                          "http://[::1]:8080)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError(f"{what} must start with http:// or https:// and name a host (got {text[:80]!r})")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ServerError(f"{what} has a bad port: {text[:80]!r}") from None
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ServerError(f"{what} must not carry a query, a fragment or a password (keys go in the keychain)")
    import httpx2  # the client's own parser, stricter than urlsplit ("http://[::1]x", "http://[v1.x]")

    try:
        httpx2.URL(text)
    except (httpx2.InvalidURL, ValueError, TypeError) as exc:
        raise ServerError(f"{what} is not a URL the client can use: {text[:80]!r} ({one_line(str(exc), 80)})"
                          ) from None
    base = text.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ServerError(f"bad server name {name[:80]!r}: letters, digits, '.', '_' or '-', at most 64, "
                          "starting with a letter or digit")
    return name


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One server, as the user named it (the API key is not here: see :class:`Keychain`)."""

    name: str
    url: str
    verify_tls: bool = True
    ca_file: str = ""  # a CA bundle for a LAN box with its own certificate ("" = the system's)
    model: str = ""  # the model id to ask for ("" = the first the server lists)
    dcgm_url: str = ""  # a dcgm-exporter /metrics URL on the server's box, for its GPU memory

    def __post_init__(self) -> None:
        check_name(self.name)
        object.__setattr__(self, "url", check_url(self.url))
        if self.dcgm_url:
            check_url(self.dcgm_url, "the GPU exporter URL")
        if len(self.model) > 512 or len(self.ca_file) > 4096:
            raise ServerError(f"server {self.name}: model id or CA file name too long")

    @classmethod
    def ad_hoc(cls, url: str) -> ServerConfig:
        """A server given by URL alone (``--server http://box:8080``): named after its host and port."""
        base = check_url(url)
        parts = urlsplit(base)
        name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{parts.hostname}-{parts.port or parts.scheme}")[:64]
        return cls(name=name.strip("-.") or "server", url=base)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: object) -> ServerConfig:
        if not isinstance(doc, dict):
            raise ServerError("a server entry is not an object")
        known = {f.name: f.type for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in known}
        for k, v in values.items():
            want = bool if k == "verify_tls" else str
            if not isinstance(v, want):
                raise ServerError(f"server entry field {k!r} has the wrong type")
        try:
            return cls(**values)
        except TypeError:
            raise ServerError("a server entry lacks its name or URL") from None


class ServerList:
    """The servers of one profile (``servers.json``): read fresh on every call, written merged."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[ServerConfig]:
        return list(self._read().values())

    def get(self, name: str) -> ServerConfig:
        found = self._read().get(name)
        if found is None:
            known = ", ".join(self._read()) or "none yet: 'specchat servers add NAME URL'"
            raise ServerError(f"no server named {name!r} (servers: {known})")
        return found

    def resolve(self, name_or_url: str) -> ServerConfig:
        """A named server, or an ad-hoc one for a URL."""
        if "://" in name_or_url:
            return ServerConfig.ad_hoc(name_or_url)
        return self.get(name_or_url)

    def put(self, server: ServerConfig) -> None:
        """Add or replace ``server`` (by name), keeping every other entry as it is on disk now."""
        def change(servers: dict[str, ServerConfig]) -> None:
            if server.name not in servers and len(servers) >= MAX_SERVERS:
                raise ServerError(f"{self.path} already holds {len(servers)} servers (at most {MAX_SERVERS}): "
                                  f"{server.name} is not added; remove one first ('specchat servers remove NAME')")
            servers[server.name] = server
        self._update(change)

    def remove(self, name: str) -> bool:
        removed = []

        def change(servers: dict[str, ServerConfig]) -> None:
            removed.append(servers.pop(name, None) is not None)
        self._update(change)
        return removed[0]

    # -- the file ---------------------------------------------------------------------

    def _read(self) -> dict[str, ServerConfig]:
        try:
            raw, too_big = files.read_capped(self.path, MAX_SERVERS_BYTES)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ServerError(f"{self.path}: cannot read the server list: {exc.strerror or exc}") from None
        servers, why = _parse(raw, too_big)
        if why:
            raise ServerError(f"{self.path}: {why}; fix it, or remove it to start an empty list")
        return servers

    def _update(self, change) -> None:
        try:
            with files.locked(self.path):
                try:
                    raw, too_big = files.read_capped(self.path, MAX_SERVERS_BYTES)
                    servers, why = _parse(raw, too_big)
                except FileNotFoundError:
                    servers, why = {}, ""
                if why:  # damaged: kept for the user to look at, never overwritten
                    aside = files.move_aside(self.path)
                    files.warn(f"{self.path} was damaged ({why}); moved aside to {aside.name}")
                    servers = {}
                change(servers)
                doc = {"version": VERSION, "servers": [s.to_json() for s in servers.values()]}
                files.write_text_atomically(self.path, json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise ServerError(f"{self.path}: cannot save the server list: {exc.strerror or exc}") from None


def _parse(raw: bytes, too_big: bool) -> tuple[dict[str, ServerConfig], str]:
    """The servers in a file's bytes, or the reason it is damaged."""
    if too_big:
        return {}, f"larger than {MAX_SERVERS_BYTES} bytes"
    try:
        doc = loads(raw.decode("utf-8"))
    except ValueError:  # bad UTF-8 or JSON, or nested deeper than bounded_json allows
        return {}, "not valid JSON"
    if not isinstance(doc, dict) or not isinstance(doc.get("servers"), list):
        return {}, "not a server list"
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        return {}, f"written by a newer SpecChat (version {version!r})"
    out: dict[str, ServerConfig] = {}
    # every entry, also past MAX_SERVERS (a hand-edited file): the next write keeps them all, and adding
    # is refused while the list is full (the file's byte cap bounds the count)
    try:
        listed = [ServerConfig.from_json(entry) for entry in doc["servers"]]
    except ServerError as exc:
        return {}, str(exc)
    taken = {server.name for server in listed}
    for server in listed:
        if server.name in out:  # a hand-edited file: both kept, the later one renamed (the next write keeps it)
            n = 2
            while (name := f"{server.name[:60]}-{n}") in taken:
                n += 1
            taken.add(name)
            files.warn(f"servers.json: two servers are named {server.name!r}; the later one "
                       f"({printable(server.url, 120)}) is listed as {name!r}")
            server = replace(server, name=name)
        out[server.name] = server
    return out, ""


class Keychain:
    """API keys in the OS keychain (``keyring``); ``SPECCHAT_API_KEY`` overrides for one run."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    @staticmethod
    def _user(name: str) -> str:
        return f"server:{check_name(name)}"

    def get(self, name: str) -> str:
        """The key for server ``name`` ("" when none is kept).  A missing keychain is not an error here:
        a server without a key works, and one that needs a key says so with a 401."""
        env = self._environ.get(API_KEY_ENV, "")
        if env:
            return env
        import keyring
        from keyring.errors import KeyringError

        try:
            return keyring.get_password(KEYRING_SERVICE, self._user(name)) or ""
        except (KeyringError, RuntimeError, OSError):
            return ""

    def set(self, name: str, key: str) -> None:
        if not key or len(key) > 4096 or any(not c.isprintable() or c.isspace() for c in key):
            raise ServerError(f"server {name}: the API key must be printable text without spaces")
        import keyring
        from keyring.errors import KeyringError

        try:
            keyring.set_password(KEYRING_SERVICE, self._user(name), key)
        except (KeyringError, RuntimeError, OSError) as exc:
            raise ServerError(f"server {name}: no OS keychain can keep its API key ({_why(exc)}); "
                              f"set {API_KEY_ENV} in the environment when you use it instead") from None

    def delete(self, name: str) -> None:
        import keyring
        from keyring.errors import KeyringError, PasswordDeleteError

        try:
            keyring.delete_password(KEYRING_SERVICE, self._user(name))
        except PasswordDeleteError:
            pass  # there was none
        except (KeyringError, RuntimeError, OSError):
            pass  # no keychain: nothing was kept


def _why(exc: BaseException) -> str:
    text = str(exc).split("\n")[0].strip()
    return text[:120] or type(exc).__name__
