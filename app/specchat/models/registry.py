"""What is installed, which pairs were proven compatible, and the last pair used.

A small JSON file in the profile's data dir (``Profile.registry``).  Every record
keeps the file's size and mtime, so a result goes stale by itself when the file
changes (re-downloaded, replaced, truncated) and is checked again.

Several processes share the file (the app, ``specchat models pull`` in a terminal,
a second window of another profile does not): every change re-reads the file,
applies itself and writes the result atomically (:mod:`specchat.files`), all under a
file lock, so a ``Registry`` opened long ago never overwrites another process's
import.  Reads pick up the file again when it changed on disk.

A damaged file (not UTF-8, not JSON, the wrong shape) never stops the user and never
loses what can be saved: under the lock it is moved aside (``registry.json.corrupt-TIME``),
the model files it lists that still exist and still validate are recorded again in a new
registry, and one warning names both files.  A registry written by a newer SpecChat is
refused (:class:`RegistryError`) and never touched.  :meth:`Registry.rebuild` re-validates
every listed file on request (``specchat models rebuild``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath

from specchat import files
from specchat.errors import UserError
from specchat.profile import Profile

from .catalog import CatalogModel
from .compatibility import PairCompatibility, check_pair
from .drafter_heads import drafter_kind
from .fit import SPLIT_NAME, read_split, split_part_name
from .gguf_header import GGUFError, GGUFHeader

REGISTRY_VERSION = 1
LOCK_TIMEOUT_S = files.LOCK_TIMEOUT_S
# A record is ~300 bytes: 8 MiB is ~25,000 models.  A larger file is damaged, and is never
# read whole into memory; salvaging a hostile one this size takes ~4 s (once: then it is aside).
MAX_REGISTRY_BYTES = 8 << 20


class RegistryError(UserError):
    """The registry file cannot be used; one line naming the file and what to do."""


@dataclass(frozen=True, slots=True)
class InstalledModel:
    path: str
    size: int
    mtime_ns: int
    name: str
    architecture: str
    n_vocab: int
    source: str = ""  # "owner/repo/file" when it came from the hub, "" when imported from disk
    added: float = 0.0
    # read from the header since registry 1.x of issue 25; 0 / "" in a record written before (unknown)
    context_length: int = 0  # the context the model was trained for (tokens)
    quant: str = ""  # "Q4_K_M", "Q8_0", ... from general.file_type, else from the file name
    total_size: int = 0  # bytes of every part of a split model (size is the first part's)
    # a trained drafter's --spec-type ("draft-mtp", "draft-eagle3", ...: models/drafter_heads.py), "" for a
    # model that answers on its own, or in a record written before issue 34 (unknown)
    drafter: str = ""
    # False for a record written before issue 34 kept ``drafter``: its header is read again (fill_details)
    drafter_read: bool = field(default=True, compare=False)

    def is_current(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_size == self.size and st.st_mtime_ns == self.mtime_ns

    @property
    def file_name(self) -> str:
        """The model's file name as the user knows it: the hub's name for a pulled file (the hub cache
        keeps it as blobs/<sha256>), else the name on disk."""
        return PurePosixPath(self.source).name if self.source else Path(self.path).name

    @property
    def display_name(self) -> str:
        """The file's stem ("qwen2.5-coder-1.5b-instruct-q4_k_m"; a split model without its
        "-00001-of-00003"), never the header's general.name, which may name another build."""
        name = self.file_name
        m = SPLIT_NAME.match(name)
        return m["prefix"] if m else name.removesuffix(".gguf")

    @property
    def folder(self) -> str:
        return str(Path(self.path).parent)

    @property
    def bytes(self) -> int:
        """What the model takes on disk (every part of a split model)."""
        return self.total_size or self.size

    @property
    def details_known(self) -> bool:
        """False for a record written before the header's context length and quantisation were kept, or
        before it said whether the file is a trained drafter."""
        return bool(self.quant) and self.drafter_read


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What :meth:`Registry.rebuild` (or the repair of a damaged file) did, in counts."""

    kept: int = 0  # listed, unchanged on disk, still a valid GGUF file
    refreshed: int = 0  # changed on disk but still valid: its record was read again
    missing: int = 0  # dropped: the file is gone
    invalid: int = 0  # dropped: no longer a valid GGUF file (truncated, replaced)

    @property
    def dropped(self) -> int:
        return self.missing + self.invalid

    def summary(self) -> str:
        listed = self.kept + self.refreshed + self.dropped
        return (f"{self.kept + self.refreshed} of {listed} models kept ({self.refreshed} re-read), "
                f"{self.missing} missing, {self.invalid} no longer valid GGUF files")


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What :meth:`Registry.import_files` did: the models added, those already listed (read again),
    and the files skipped with why, in the order given."""

    added: tuple[InstalledModel, ...] = ()
    again: tuple[InstalledModel, ...] = ()  # already in the library: its record was read again
    skipped: tuple[tuple[str, str], ...] = ()  # (file name, why)

    def summary(self) -> str:
        """One line: "Added 2 models; 1 file skipped", "1 already in the library"."""
        parts = [f"added {len(self.added)} model{'' if len(self.added) == 1 else 's'}"] if self.added else []
        if self.again:
            parts.append(f"{len(self.again)} already in the library")
        if self.skipped:
            parts.append(f"{len(self.skipped)} file{'' if len(self.skipped) == 1 else 's'} skipped")
        line = "; ".join(parts) or "nothing imported"
        return line[0].upper() + line[1:]

    def lines(self) -> list[str]:
        """One line a file: its name and kind, or why it was skipped."""
        return ([f"added {m.file_name}: {kind_phrase(m)}" for m in self.added]
                + [f"already in the library: {m.file_name} ({kind_phrase(m)})" for m in self.again]
                + [f"skipped {name}: {why}" for name, why in self.skipped])


def kind_phrase(m: InstalledModel) -> str:
    """What a model is for, in a few words: a trained drafter, or a model that is a target (or the
    draft of a larger one with its vocabulary)."""
    n = m.bytes  # in the Models dialog's units (models.hub.human_bytes)
    shown = next((f"{n / scale:.1f} {unit}" for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
                  if n >= scale), f"{n} B")
    size = f"{m.quant + ', ' if m.quant else ''}{shown}"
    if m.drafter:
        return f"a trained drafter for its target (llama-server --spec-type {m.drafter}; {size})"
    return (f"a model: a target, or the draft of a larger one with the same vocabulary "
            f"({m.architecture}, {m.n_vocab:,} tokens; {size})")


# the rule a cached pair verdict was reached by: 2 checks a trained head as llama.cpp does (issue 34),
# where 1 (no "rule" field) compared tokenizers only; a verdict of another rule is checked again
PAIR_RULE = 2
_FIELD_NAMES = tuple(f.name for f in fields(InstalledModel) if f.name != "drafter_read")  # what a record holds
_OPTIONAL = {"source", "added", "context_length", "quant", "total_size", "drafter"}  # absent from older records
_REQUIRED = set(_FIELD_NAMES) - _OPTIONAL


def default_registry_path() -> Path:
    return Profile.default().registry


# -- the shape of the file: every field any method reads is checked here ------------------


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_path(v: object) -> bool:
    """A usable absolute path: os.stat raises ValueError (not OSError) on a NUL byte."""
    return isinstance(v, str) and "\0" not in v and os.path.isabs(v)


def _is_time(v: object) -> bool:
    """A finite number (math.isfinite raises OverflowError on a huge int: ints are finite anyway)."""
    return _is_int(v) or isinstance(v, float) and math.isfinite(v)


def _model_error(key: str, m: object) -> str | None:
    if not isinstance(m, dict) or not m.keys() >= _REQUIRED:
        return f"model {key!r} lacks fields"
    checks = {
        "path": _is_path(m["path"]) and m["path"] == key,
        "size": _is_int(m["size"]) and m["size"] >= 0,
        "mtime_ns": _is_int(m["mtime_ns"]),
        "name": isinstance(m["name"], str),
        "architecture": isinstance(m["architecture"], str),
        "n_vocab": _is_int(m["n_vocab"]) and m["n_vocab"] >= 0,
        "source": isinstance(m.get("source", ""), str),
        "added": _is_time(m.get("added", 0.0)),
        "context_length": _is_int(m.get("context_length", 0)) and m.get("context_length", 0) >= 0,
        "quant": isinstance(m.get("quant", ""), str),
        "total_size": _is_int(m.get("total_size", 0)) and m.get("total_size", 0) >= 0,
        "drafter": isinstance(m.get("drafter", ""), str),
    }
    bad = [name for name, ok in checks.items() if not ok]
    # other fields (a later 1.x may add some) are kept as they are and never read
    return f"model {key!r}: bad '{bad[0]}'" if bad else None


def _is_stamp(s: object) -> bool:
    return isinstance(s, list) and len(s) == 2 and all(_is_int(v) for v in s)


def _pair_error(key: str, p: object) -> str | None:
    if not isinstance(p, dict):
        return f"pair {key!r} is malformed"
    ok = (_is_path(p.get("target")) and _is_path(p.get("draft")) and key == f"{p['target']}\n{p['draft']}"
          and isinstance(p.get("compatible"), bool) and isinstance(p.get("reason"), str)
          and isinstance(p.get("stamps"), list) and len(p["stamps"]) == 2 and all(map(_is_stamp, p["stamps"])))
    return None if ok else f"pair {key!r} is malformed"


def _last_pair_error(last: object) -> str | None:
    if last is None:
        return None
    if not (isinstance(last, dict) and _is_path(last.get("target"))
            and (last.get("draft") is None or _is_path(last.get("draft")))):
        return "'last_pair' is malformed"
    return None


def _newer_version(doc: object) -> int | None:
    """The version of a registry written by a newer SpecChat, else None."""
    if isinstance(doc, dict) and _is_int(doc.get("version")) and doc["version"] > REGISTRY_VERSION:
        return int(doc["version"])
    return None


def _shape_error(doc: object) -> str | None:
    """What is wrong with a parsed registry of our version, or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    version = doc.get("version", REGISTRY_VERSION)
    if not _is_int(version) or version < 1:
        return "'version' is not a version number"
    models, pairs = doc.get("models", {}), doc.get("pairs", {})
    if not isinstance(models, dict) or not isinstance(pairs, dict):
        return "'models' and 'pairs' must be objects"
    for key, m in models.items():
        if why := _model_error(key, m):
            return why
    for key, p in pairs.items():
        if why := _pair_error(key, p):
            return why
    return _last_pair_error(doc.get("last_pair"))


def _parse(raw: bytes) -> tuple[object, str | None]:
    """The parsed document and what is wrong with it as text (None: it parsed)."""
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 at byte {exc.start}"
    except RecursionError:  # '[[[[...' nested deeper than the parser's stack
        return None, "not JSON: nested too deeply"
    except ValueError as exc:
        return None, f"not JSON: {exc}"


# -- saving what a damaged file still says -------------------------------------------------

# What salvage() looks for in any text, in one linear scan: a "path" or "source" field, a
# key opening an object, a brace; any other string is matched only to skip the braces in
# it.  A string has no raw newline (json.dumps escapes them, so a broken one ends with its
# line) and is bounded (a path is < 4096 bytes) and possessive: a backtracking pattern took
# 96 s on one quote followed by 32 MiB.
_STR = r'"((?:[^"\\\n]|\\.){0,8192}+)"'
_SCAN = re.compile(rf'"(?P<field>path|source)"\s*+:\s*+{_STR.replace("(", "(?P<value>", 1)}'
                   rf'|{_STR.replace("(", "(?P<key>", 1)}\s*+:\s*+\{{|(?P<brace>[{{}}])|{_STR}')


def _json_string(body: str) -> str | None:
    try:
        value = json.loads(f'"{body}"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def salvage(raw: bytes) -> tuple[list[tuple[str, str]], dict | None]:
    """(path, source) of every model a damaged registry still names, and its last pair if readable.

    Works on any text, parsed or not: a model record is a flat object, so each stretch
    between two braces holds at most one record's fields (a truncated file loses only the
    record it was cut in).  A record is found by its ``"path"`` field or by its key (an
    absolute ``.gguf`` path opening an object).  Nothing found here is trusted: the caller
    validates every file again.
    """
    text = raw.decode("utf-8", errors="replace")
    found: dict[str, str] = {}
    record: dict[str, str] = {}

    def close_record() -> None:
        path = _json_string(record.get("path", ""))
        if path and _is_path(path):
            found[path] = _json_string(record.get("source", "")) or found.get(path, "")
        record.clear()

    for m in _SCAN.finditer(text):
        what = m.lastgroup
        if what == "value":
            record[m["field"]] = m["value"]
        elif what == "key" or what == "brace":
            close_record()
            key = _json_string(m["key"]) if what == "key" else None
            if key and _is_path(key) and key.lower().endswith(".gguf"):
                found.setdefault(key, "")  # '"/m/x.gguf": {': the key of the record that follows
    close_record()
    last = None
    doc, _ = _parse(raw)
    if isinstance(doc, dict) and _last_pair_error(doc.get("last_pair")) is None and doc.get("last_pair"):
        last = {"target": doc["last_pair"]["target"], "draft": doc["last_pair"].get("draft")}
    return list(found.items()), last


def _record(path: Path, *, source: str, added: float) -> dict:
    """A model's record, read from the file now: GGUFError for a bad file, OSError when unreadable."""
    headers = read_split(path)  # a split model: every part present, whole and of the set
    header = headers[0]
    st = path.stat()
    total = st.st_size + sum(p.stat().st_size for p in part_paths(path, len(headers))[1:])
    record = asdict(InstalledModel(
        path=str(path), size=st.st_size, mtime_ns=st.st_mtime_ns,
        name=header.get_str("general.name", path.stem), architecture=header.architecture,
        n_vocab=len(header.get_tokens()), source=source, added=added,
        context_length=max(0, _int(header, f"{header.architecture}.context_length", 1, 1 << 40)),
        quant=_quant(header, PurePosixPath(source).name if source else path.name), total_size=total,
        drafter=_drafter(header),
    ))
    del record["drafter_read"]  # how this record was read, not a field of it
    return record


def _drafter(header: GGUFHeader) -> str:
    """The --spec-type of a trained head (it only drafts), else ""."""
    try:
        kind = drafter_kind(header)
    except GGUFError:
        return ""
    return kind.spec_type if kind is not None and kind.trained else ""


# llama.cpp's llama_ftype: what general.file_type says the weights mostly are
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
               12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
               19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
               26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
               36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}


def _int(header: GGUFHeader, key: str, lo: int, hi: int) -> int:
    """A value shown in the library, ``lo - 1`` when absent or malformed (llama.cpp says so when it loads)."""
    try:
        return header.get_int(key, lo - 1, lo=lo, hi=hi)
    except GGUFError:
        return lo - 1


def _quant(header: GGUFHeader, file_name: str) -> str:
    """The quantisation the header states, else the one the file name says, else "other"."""
    from .hub_search import quant_of

    file_type = _int(header, "general.file_type", 0, 1 << 16)
    return _FILE_TYPES.get(file_type) or quant_of(file_name)


def part_paths(path: str | Path, count: int) -> list[Path]:
    """Every part of the model whose first part is ``path`` (``[path]`` for a model in one file)."""
    path = Path(path)
    m = SPLIT_NAME.match(path.name)
    if count <= 1 or m is None:
        return [path]
    return [path.with_name(split_part_name(m["prefix"], i, count)) for i in range(count)]


def _resolved(path: str | Path) -> str:
    """The absolute path a record is kept under; RegistryError for one no file can have."""
    try:
        resolved = Path(path).resolve()
        if resolved.name != Path(path).name and SPLIT_NAME.match(Path(path).name):
            # a part of a split model linked by name (the hub cache's snapshots/ -> blobs/<sha256>): llama.cpp
            # finds the other parts by this name, so the link is kept and only its folder resolved
            return str(Path(path).parent.resolve() / Path(path).name)
        return str(resolved)
    except (ValueError, OSError, RuntimeError) as exc:  # ValueError: a NUL byte; a symlink loop: RuntimeError (3.11, 3.12) or OSError
        raise RegistryError(f"{str(path)!r}: not a usable file path ({exc})") from None


def _model(record: dict) -> InstalledModel:
    return InstalledModel(**{k: record[k] for k in _FIELD_NAMES if k in record},
                          drafter_read="drafter" in record)


class Registry:
    """The registry file of one profile.  Every method may raise :class:`RegistryError`."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_registry_path()
        self._doc: dict = {}
        self._stamp: tuple[int, int, int] | None = None
        self._refresh()

    # -- the file ---------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read_raw(self) -> bytes | None:
        try:
            raw, more = files.read_capped(self.path, MAX_REGISTRY_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        return raw + (b"\0" if more else b"")  # more than we ever write: damaged, salvage what was read

    def _check(self, raw: bytes) -> tuple[dict | None, str | None]:
        """(document, None) when usable, (None, why) when damaged; RegistryError when newer than us."""
        doc, why = _parse(raw)
        if why is None and (version := _newer_version(doc)) is not None:
            raise RegistryError(f"{self.path}: written by a newer SpecChat (registry version {version}, this "
                                f"one reads {REGISTRY_VERSION}); upgrade SpecChat, or use another --profile")
        if why is None:
            why = _shape_error(doc)
        return (doc if why is None else None), why  # type: ignore[return-value]

    def _load_locked(self) -> dict:
        """The document; a damaged file is moved aside and rebuilt.  The caller holds the lock."""
        raw = self._read_raw()
        if raw is None:
            return {}
        doc, why = self._check(raw)
        if doc is not None:
            return doc
        return self._repair_locked(raw, why or "damaged")

    def _repair_locked(self, raw: bytes, why: str) -> dict:
        try:
            aside = files.move_aside(self.path)
        except OSError as exc:
            raise RegistryError(f"{self.path}: damaged registry ({why}) and it cannot be moved aside "
                                f"({exc.strerror or exc}); move it aside yourself") from None
        listed, last = salvage(raw)
        doc: dict = {"version": REGISTRY_VERSION, "models": {}, "pairs": {}}
        missing = invalid = 0
        for path, source in listed:
            if not os.path.exists(path):
                missing += 1
                continue
            try:
                doc["models"][path] = _record(Path(path), source=source, added=time.time())
            except (GGUFError, OSError):
                invalid += 1
        if last and last["target"] in doc["models"] and (last["draft"] is None or last["draft"] in doc["models"]):
            doc["last_pair"] = last
        self._write_locked(doc)
        listed_n = len(doc["models"]) + missing + invalid
        files.warn(f"{self.path}: damaged registry ({why}): moved aside to {aside}; rebuilt with the "
                   f"{len(doc['models'])} of {listed_n} models it listed that are still valid GGUF files "
                   f"({missing} missing, {invalid} not valid)")
        return doc

    def _write_locked(self, doc: dict) -> None:
        doc["version"] = REGISTRY_VERSION
        try:
            files.write_text_atomically(self.path, json.dumps(doc, indent=1))
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot write ({exc.strerror or exc})") from None
        self._doc, self._stamp = doc, self._file_stamp()

    def _refresh(self) -> None:
        """Read the file again if it changed on disk since we last saw it (repairing a damaged one)."""
        stamp = self._file_stamp()
        if stamp is not None and stamp == self._stamp:
            return
        raw = self._read_raw()
        doc, _ = self._check(raw) if raw is not None else (None, None)
        if doc is not None:
            self._doc, self._stamp = doc, stamp
            return
        # Damaged: repair it once, whichever process gets here first.  Missing where a lock was ever
        # taken: another process may be between moving a damaged file aside and writing the rebuilt
        # one, under that lock, so look again under it (an unlocked read saw an empty registry there).
        if raw is None and not files.lock_file(self.path).exists():
            self._doc, self._stamp = {}, None  # a fresh profile: nothing was ever written here
            return
        try:
            with self._lock():
                self._doc, self._stamp = self._load_locked(), self._file_stamp()
        except RegistryError:
            if raw is not None:
                raise
            self._doc, self._stamp = {}, None  # no registry, and no lock to be had (a read-only folder)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """files.locked with the registry's one error type (busy, or a directory that cannot be made)."""
        try:
            lock = files.locked(self.path, LOCK_TIMEOUT_S)
            lock.__enter__()
        except files.FileBusyError as exc:
            raise RegistryError(str(exc)) from None
        except OSError as exc:
            raise RegistryError(f"{self.path}: cannot write ({exc.strerror or exc})") from None
        try:
            yield
        finally:
            lock.__exit__(None, None, None)

    def _update(self, change: Callable[[dict], object]) -> object:
        """Re-read, apply ``change`` to the document, write it atomically: all under the lock."""
        with self._lock():
            doc = self._load_locked()
            doc.setdefault("models", {})
            doc.setdefault("pairs", {})
            result = change(doc)
            self._write_locked(doc)
        return result

    # -- models -----------------------------------------------------------------

    def add(self, path: str | Path, *, source: str = "") -> InstalledModel:
        """Validate a GGUF file (magic, version, metadata, complete tensor data) and record it.

        GGUFError for a bad file (nothing recorded), RegistryError for a registry that cannot be used.
        """
        path = Path(_resolved(path))
        try:
            record = _record(path, source=source, added=time.time())
        except OSError as exc:
            raise GGUFError(f"{path}: cannot read ({exc.strerror or exc})") from None

        def change(doc: dict) -> None:
            old = doc["models"].get(str(path), {})
            if not source and old.get("source"):  # re-importing a pulled file keeps where it came from
                record["source"] = old["source"]
            doc["models"][str(path)] = record

        self._update(change)
        return _model(self._doc["models"][str(path)])

    def import_files(self, paths: Iterable[str | Path], cancelled: Callable[[], bool] = lambda: False) -> ImportReport:
        """:meth:`add` each file; what was added, what was listed already, and what was skipped and why
        (``cancelled`` is asked between files; RegistryError still ends it: nothing can be added)."""
        listed = {m.path for m in self.models()}
        added: list[InstalledModel] = []
        again: list[InstalledModel] = []
        skipped: list[tuple[str, str]] = []
        for p in paths:
            if cancelled():
                break
            try:
                model = self.add(p)
            except GGUFError as exc:
                why = str(exc)
                for prefix in (f"{Path(p).resolve()}: ", f"{p}: ", f"{Path(p).name}: "):
                    why = why.removeprefix(prefix)
                skipped.append((Path(p).name, why))
                continue
            (again if model.path in listed else added).append(model)
            listed.add(model.path)
        return ImportReport(tuple(added), tuple(again), tuple(skipped))

    def models(self) -> list[InstalledModel]:
        self._refresh()
        return [_model(m) for m in self._doc.get("models", {}).values()]

    def remove(self, path: str | Path) -> None:
        key = _resolved(path)

        def change(doc: dict) -> None:
            doc["models"].pop(key, None)
            doc["pairs"] = {k: v for k, v in doc["pairs"].items() if key not in (v["target"], v["draft"])}

        self._update(change)

    def rebuild(self) -> RebuildReport:
        """Validate every listed file again: drop the missing and the invalid ones, re-read the
        changed ones (source and date kept), drop cached pair verdicts that went stale.

        The files are read outside the lock; a record another process changed meanwhile is
        left as that process wrote it.
        """
        self._refresh()
        before = {k: dict(m) for k, m in self._doc.get("models", {}).items()}
        after: dict[str, dict | None] = {}
        counts = {"kept": 0, "refreshed": 0, "missing": 0, "invalid": 0}
        for key, old in before.items():
            try:
                if not os.path.exists(key):
                    raise FileNotFoundError(key)
                new = _record(Path(key), source=old.get("source", ""), added=old.get("added", 0.0))
            except FileNotFoundError:
                after[key], what = None, "missing"
            except (GGUFError, OSError):
                after[key], what = None, "invalid"
            else:
                after[key] = {**old, **new}  # fields of a later 1.x stay
                what = "kept" if (new["size"], new["mtime_ns"]) == (old["size"], old["mtime_ns"]) else "refreshed"
            counts[what] += 1

        def change(doc: dict) -> None:
            for key, new in after.items():
                if doc["models"].get(key) != before[key]:
                    continue  # changed by another process since we read it: theirs is newer
                if new is None:
                    del doc["models"][key]
                else:
                    doc["models"][key] = new
            doc["pairs"] = {k: p for k, p in doc["pairs"].items() if self._stamps_now(p) == p["stamps"]}
            last = doc.get("last_pair")
            if last and not os.path.exists(last["target"]):
                doc.pop("last_pair")

        self._update(change)
        return RebuildReport(**counts)

    def fill_details(self) -> int:
        """Read again the headers of current files whose records predate the library's details
        (context length, quantisation, split size); how many were filled in.  Reads headers: not on
        the GUI thread.  A record another process changed meanwhile is left as it wrote it."""
        self._refresh()
        before = {k: dict(m) for k, m in self._doc.get("models", {}).items()
                  if not _model(m).details_known and _model(m).is_current()}
        after = {}
        for key, old in before.items():
            try:
                after[key] = {**old, **_record(Path(key), source=old.get("source", ""), added=old.get("added", 0.0))}
            except (GGUFError, OSError):
                continue  # shown as it is; 'specchat models rebuild' drops it
        if not after:
            return 0

        def change(doc: dict) -> int:
            filled = 0
            for key, new in after.items():
                if doc["models"].get(key) == before[key]:
                    doc["models"][key] = new
                    filled += 1
            return filled

        return int(self._update(change))  # type: ignore[call-overload]

    def delete(self, model: InstalledModel, cache: Path) -> int:
        """Remove ``model`` from the library and delete the files SpecChat downloaded for it into the
        hub cache ``cache`` (:func:`downloaded_files`: never a file imported from disk); the bytes freed.
        The record goes first (a half-deleted model cannot load); RegistryError, one line, for a file
        that cannot be deleted."""
        doomed = downloaded_files(model, cache)
        self.remove(model.path)
        freed = 0
        for path in doomed:
            try:
                size = 0 if path.is_symlink() else path.stat().st_size
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise RegistryError(f"{path}: removed from the library but not deleted ({exc.strerror or exc})") from None
            freed += size
        return freed

    def find(self, name: str) -> list[InstalledModel]:
        """Installed models called ``name``: their registry name or their file name without '.gguf'."""
        return [m for m in self.models() if name in (m.name, Path(m.path).stem)]

    def by_source(self, source: str) -> list[InstalledModel]:
        """Installed copies of a hub file ('owner/repo/file.gguf'), unchanged on disk ones first."""
        found = [m for m in self.models() if m.source == source]
        return sorted(found, key=lambda m: not m.is_current())

    # -- the last pair used -------------------------------------------------------

    def last_pair(self) -> tuple[Path, Path | None] | None:
        """(target, draft or None) of the pair loaded last (by the app, 'chat' or 'bench'), or None."""
        self._refresh()
        last = self._doc.get("last_pair")
        if not last:
            return None
        return Path(last["target"]), (Path(last["draft"]) if last.get("draft") else None)

    def set_last_pair(self, target: str | Path, draft: str | Path | None) -> None:
        record = {"target": _resolved(target), "draft": _resolved(draft) if draft else None}
        self._refresh()
        if self._doc.get("last_pair") == record:
            return

        def change(doc: dict) -> None:
            doc["last_pair"] = record

        self._update(change)

    # -- pairs ------------------------------------------------------------------

    @staticmethod
    def _stamp_of(path: str) -> list[int]:
        st = os.stat(path)
        return [st.st_size, st.st_mtime_ns]

    def _stamps_now(self, pair: dict) -> list[list[int]] | None:
        try:
            return [self._stamp_of(pair["target"]), self._stamp_of(pair["draft"])]
        except OSError:
            return None

    def compatibility(self, target: str | Path, draft: str | Path) -> PairCompatibility:
        """The cached verdict while both files are unchanged; otherwise checked again (and cached)."""
        t, d = _resolved(target), _resolved(draft)
        key = f"{t}\n{d}"
        self._refresh()
        cached = self._doc.get("pairs", {}).get(key)
        stamps = self._stamps_now({"target": t, "draft": d})
        if cached and stamps and cached["stamps"] == stamps and cached.get("rule") == PAIR_RULE:
            return PairCompatibility(cached["compatible"], cached["reason"])
        verdict = check_pair(t, d)
        if stamps:
            entry = {"target": t, "draft": d, "compatible": verdict.compatible, "reason": verdict.reason,
                     "stamps": stamps, "rule": PAIR_RULE}

            def change(doc: dict) -> None:
                doc["pairs"][key] = entry

            self._update(change)
        return verdict

    def drafts_for(self, target: str | Path) -> list[tuple[InstalledModel, PairCompatibility]]:
        """Every other installed model with its verdict as a draft for ``target`` (the UI lists both kinds)."""
        t = _resolved(target)
        models = self.models()
        target_bytes = next((m.bytes for m in models if m.path == t), 0)
        out = []
        for m in models:
            if m.path != t and m.is_current():
                if target_bytes and m.bytes >= target_bytes:  # would cost more per token than it saves
                    out.append((m, PairCompatibility(False, too_large(m.bytes, target_bytes))))
                else:
                    out.append((m, self.compatibility(t, m.path)))
        return out


def too_large(draft_bytes: int, target_bytes: int) -> str:
    from .hub import human_bytes

    return (f"not a draft for it: as large as the target or larger ({human_bytes(draft_bytes)} vs "
            f"{human_bytes(target_bytes)}); a draft must be several times smaller")


# -- what is installed, seen from elsewhere ------------------------------------------------------

SIZE_TOLERANCE = 0.01  # the catalog's sizes of files it has no exact size for are rounded


def installed_copy(model: CatalogModel, installed: Iterable[InstalledModel]) -> InstalledModel | None:
    """The current installed copy of a catalog file, or None: pulled from it (its source), the hub
    cache's blob named by its sha256, or the same file imported from disk (the same file name and
    size; the name alone when the catalog gives no size)."""
    name = PurePosixPath(model.file).name.lower()
    for m in installed:
        if not m.is_current():
            continue
        if m.source == model.ref or (model.sha256 and Path(m.path).name.lower() == model.sha256.lower()):
            return m
        if m.file_name.lower() != name:
            continue
        if model.size is None or abs(m.bytes - model.size) <= SIZE_TOLERANCE * model.size:
            return m
    return None


def downloaded_files(model: InstalledModel, cache: Path) -> list[Path]:
    """What deleting ``model`` deletes: when SpecChat downloaded it (it has a hub source) and it lives
    in the hub cache ``cache``, every part's file and the cache's links to them (links first); []
    for any other file: one imported from disk is the user's own, and stays."""
    if not model.source:
        return []
    first = Path(model.path)
    m = SPLIT_NAME.match(first.name)
    try:
        root = cache.resolve()
        folder = first.parent.resolve().relative_to(root)
    except (OSError, ValueError):  # no cache, or the file is elsewhere
        return []
    if not folder.parts:
        return []
    parts = part_paths(first, int(m["count"]) if m else 1)
    blobs = {p.resolve() for p in parts if p.exists()}
    snapshots = root / folder.parts[0] / "snapshots"
    links = sorted(p for p in snapshots.rglob("*") if p.is_symlink() and p.resolve() in blobs) \
        if snapshots.is_dir() else []
    return links + sorted(blobs)

