"""Draft finder: for a target on the hub or on disk, propose the drafts that can serve it.

Candidates come from the target's family (each with the reason it was considered):

- ``installed``: every installed model smaller than the target (its header is read from disk;
  nothing to download when it fits);
- ``catalog``: drafts the catalog pairs with the same target repo or family;
- ``organisation``: GGUF repos of the base model's authors or the target's uploader whose
  names share the family (``Qwen2.5-Coder-*``);
- ``base_model`` / ``name``: a hub search for the family name, taken from the target's
  ``base_model`` (card and tags on the hub; ``general.base_model.*`` in a local file) or,
  without one, from its own name (``general.basename``, the repo name).

The family is the name up to its size label: "Qwen2.5-Coder-1.5B-Instruct" -> "Qwen2.5-Coder".
Repos whose names say they are not smaller than the target are not looked at.  Of each other
repo ONE GGUF file is taken: the target's quantisation if it has it, else the nearest in bits.

Size.  The ratio is the target's bytes over the draft's (file sizes: what a decode reads).
Drafts 5 to 20 times smaller are the usual range; a draft 2 to 50 times smaller is still
checked and, when compatible, offered with a note (the shipped catalog's own 1.5B/0.5B Qwen
pair is 2.3x: small targets have no 5x smaller sibling).  Under 2x or over 50x a candidate is
refused with its ratio, unread.

Check.  Every candidate in range is checked against the target's tokenizer header-only with
:func:`remote.check_remote_draft`: the usual refusals (another tokenizer type, another
vocabulary size) cost one 64 KiB range, a compatible draft its header plus < 1 MiB.  The
target's header is read once.

Ranking.  Compatible drafts first, installed ones before those still to download, nearest to
10x first (by the log of the ratio: 5x and 20x are equally far); then the refused ones, with
their reason, in the same order.

Offline.  When the hub cannot be reached at all (:class:`~.hub.HubUnreachableError`) it is not
asked again in the same search: the installed files are checked as usual, the catalog's drafts
are listed from the catalog (its sizes; "not checked: the hub was unreachable"), and
:class:`DraftSearch` says the hub was unreachable, so an empty list is never taken for "no model
of this family exists".

Bounds.  At most ``max_repos`` repos are listed and ``limit_checks`` headers checked; the
whole search stops at ``deadline_s`` (what is left is listed as not checked); ``cancel``
is polled between hub calls (DownloadCancelled).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specchat.cancel import CancelToken

from .catalog import CatalogPair
from .compatibility import TokenizerInfo, check_tokenizers
from .fit import read_split
from .gguf_header import GGUFError, GGUFHeader
from .hub import DownloadCancelled, DownloadError, HubFile, HubUnreachableError
from .hub_names import HubNameError, check_repo_id
from .hub_search import GGUFEntry, RepoHit, list_gguf_files, quant_bits, quant_of, search_repos
from .registry import InstalledModel
from .remote import HEADER_CAP, check_remote_draft, fetch_header

RATIO_USUAL = (5.0, 20.0)
RATIO_CHECKED = (2.0, 50.0)
RATIO_BEST = 10.0
MAX_REPOS = 24
FINDER_DEADLINE_S = 180.0
_SIZE = re.compile(r"(?i)(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")
_NOT_A_NAME = re.compile(r"(?i)[-_. ]?gguf$")


@dataclass(frozen=True, slots=True)
class DraftCandidate:
    entry: GGUFEntry | None  # the file on the hub; None for an installed file
    ratio: float  # target size / draft size
    compatible: bool
    reason: str  # "" when compatible, else one line
    source: str  # "installed" | "base_model" | "organisation" | "name" | "catalog": why it was considered
    note: str = ""  # for a compatible draft outside the usual 5-20x
    bytes_read: int = 0  # of its header
    path: str = ""  # an installed file: used as it is, nothing to download
    local_size: int = 0  # its bytes (every part of a split model)

    @property
    def ref(self) -> str:
        """owner/repo/file.gguf on the hub, or the installed file's path."""
        return self.entry.ref if self.entry is not None else self.path

    @property
    def size(self) -> int:
        return self.entry.size if self.entry is not None else self.local_size


@dataclass(frozen=True, slots=True)
class DraftSearch:
    candidates: list[DraftCandidate]
    hub_unreachable: str = ""  # why the hub could not be asked (then only installed files and the catalog were)


class _Hub:
    """Whether the hub answered in this search: once unreachable it is not asked again."""

    def __init__(self) -> None:
        self.unreachable = ""

    def lost(self, exc: HubUnreachableError, say: Callable[[str], None]) -> None:
        if not self.unreachable:
            self.unreachable = str(exc)
            say(f"the hub is unreachable ({exc}); looking at installed files and the catalog only")


@dataclass(frozen=True, slots=True)
class _Target:
    tokenizer: TokenizerInfo
    size: int
    quant: str
    repo_id: str  # "" for a local file
    family: str
    orgs: tuple[str, ...]
    family_from_base: bool
    params: float | None  # from the size label, in millions


def find_drafts(target: GGUFEntry | Path, *, catalog: list[CatalogPair], **kwargs) -> list[DraftCandidate]:  # noqa: ANN003
    """:func:`search_drafts`'s candidates."""
    return search_drafts(target, catalog=catalog, **kwargs).candidates


def search_drafts(
    target: GGUFEntry | Path,
    *,
    catalog: list[CatalogPair],
    installed: Sequence[InstalledModel] = (),
    token: str | None = None,
    limit_checks: int = 12,
    max_repos: int = MAX_REPOS,
    deadline_s: float = FINDER_DEADLINE_S,
    cancel: CancelToken | None = None,
    progress: Callable[[str], None] | None = None,
) -> DraftSearch:
    """Drafts for ``target`` among the ``installed`` models, the catalog and the hub, compatible ones
    first (see the module docstring for the rules).  DownloadError / GGUFError (one line) when the
    target itself cannot be read; a candidate's problems become its reason."""
    say = progress or (lambda _msg: None)
    end = time.monotonic() + deadline_s
    hub = _Hub()

    def check_cancel() -> None:
        if cancel is not None and cancel.cancelled:
            raise DownloadCancelled("draft search cancelled")

    t = _local_target(Path(target)) if isinstance(target, Path) else _hub_target(target, token)
    say(f"family {t.family!r}; looking for smaller models")
    mine = {m.path: m for m in installed if m.is_current() and 0 < m.bytes < t.size
            and not (isinstance(target, Path) and m.path == str(target.resolve()))}
    found = [DraftCandidate(None, t.size / m.bytes, False, _size_refusal(t.size / m.bytes), "installed",
                            path=m.path, local_size=m.bytes) for m in mine.values()]
    for entry, source in _candidates(t, catalog, token, max_repos, check_cancel, say, end, hub):
        if any(_same_file(entry, m) for m in mine.values()):
            continue  # installed: listed as such, nothing to download
        if entry.size <= 0:
            if hub.unreachable and source == "catalog":  # the catalog gives no size: listed, unchecked
                found.append(DraftCandidate(entry, 0.0, False, _unreachable(hub), source))
            continue
        ratio = t.size / entry.size
        refusal = _size_refusal(ratio) or (_unreachable(hub) if hub.unreachable else "")
        found.append(DraftCandidate(entry, ratio, False, refusal, source))
    return DraftSearch(_check_all(t, found, token, limit_checks, end, check_cancel, say, deadline_s, hub),
                       hub.unreachable)


def _unreachable(hub: _Hub) -> str:
    return f"not checked: the hub was unreachable ({hub.unreachable})"


def _same_file(entry: GGUFEntry, m: InstalledModel) -> bool:
    """An installed copy of a hub entry: pulled from it, or the same file name and size."""
    return m.source == entry.ref or (m.file_name == entry.first.filename.rsplit("/", 1)[-1] and m.bytes == entry.size)


def _check_all(t: _Target, found: list[DraftCandidate], token: str | None, limit_checks: int, end: float,
               check_cancel: Callable[[], None], say: Callable[[str], None], deadline_s: float,
               hub: _Hub) -> list[DraftCandidate]:
    out = []
    checks = 0
    for c in sorted(found, key=_rank):
        if c.reason:  # refused by size, unread
            out.append(c)
            continue
        check_cancel()
        if c.entry is None:  # installed: its header is on disk, no hub call, no limit
            out.append(_check_local(t, c))
            continue
        if hub.unreachable:
            out.append(replace(c, reason=_unreachable(hub)))
            continue
        if checks >= limit_checks:
            out.append(replace(c, reason=f"not checked: the limit of {limit_checks} header checks was reached"))
            continue
        if time.monotonic() > end:
            out.append(replace(c, reason=f"not checked: the search took over {deadline_s:g} s"))
            continue
        checks += 1
        say(f"checking {c.entry.ref} ({c.ratio:.1f}x smaller)")
        out.append(_check(t, c, token, hub, say))
    return sorted(out, key=lambda c: (not c.compatible, c.entry is not None, _rank(c)))


def _rank(c: DraftCandidate) -> float:
    return abs(math.log(c.ratio / RATIO_BEST)) if c.ratio > 0 else math.inf


def _size_refusal(ratio: float) -> str:
    lo, hi = RATIO_CHECKED
    if ratio < lo:
        return f"too large: only {ratio:.1f}x smaller than the target, needs at least {lo:g}x (5-20x is usual)"
    if ratio > hi:
        return f"too small: {ratio:.0f}x smaller than the target, over {hi:g}x rarely predicts it well"
    return ""


def _check(t: _Target, c: DraftCandidate, token: str | None, hub: _Hub, say: Callable[[str], None]) -> DraftCandidate:
    assert c.entry is not None
    try:
        got = check_remote_draft(t.tokenizer, c.entry.first, token=token, cap_bytes=HEADER_CAP)
    except HubUnreachableError as exc:
        hub.lost(exc, say)
        return replace(c, reason=_unreachable(hub))
    except DownloadError as exc:
        what = "gated" if "gated" in str(exc) else "header unreadable"
        return replace(c, reason=f"{what}: {exc}")
    except GGUFError as exc:
        return replace(c, reason=f"header unreadable: {exc}")
    if not got.verdict:
        return replace(c, reason=got.verdict.reason, bytes_read=got.bytes_read)
    return _fits(c, got.bytes_read)


def _fits(c: DraftCandidate, bytes_read: int) -> DraftCandidate:
    lo, hi = RATIO_USUAL
    note = "" if lo <= c.ratio <= hi else f"{c.ratio:.1f}x smaller: outside the usual {lo:g}-{hi:g}x"
    return replace(c, compatible=True, reason="", note=note, bytes_read=bytes_read)


def _check_local(t: _Target, c: DraftCandidate) -> DraftCandidate:
    """An installed candidate, from its header on disk."""
    try:
        verdict = check_tokenizers(t.tokenizer, TokenizerInfo.from_file(c.path))
    except (GGUFError, OSError) as exc:
        return replace(c, reason=f"header unreadable: {exc}")
    return _fits(c, 0) if verdict else replace(c, reason=verdict.reason)


# --- the target --------------------------------------------------------------------------------


def family_of(name: str) -> tuple[str, float | None]:
    """("Qwen2.5-Coder", 1500.0) for "Qwen2.5-Coder-1.5B-Instruct": the name before its size label,
    and the size in millions of parameters (None without a label)."""
    name = _NOT_A_NAME.sub("", name.rsplit("/", 1)[-1])
    m = _SIZE.search(name)
    if m is None:
        return name, None
    family = name[:m.start()].rstrip("-_. ")
    params = float(m[1]) * (1000.0 if m[2].lower() == "b" else 1.0)
    return family or name, params


def _hub_target(entry: GGUFEntry, token: str | None) -> _Target:
    got = fetch_header(entry.first, token=token)
    header = got.header
    if entry.size <= 0 and not entry.split and got.size:  # an entry made without the hub's listing
        entry = replace(entry, files=(replace(entry.first, size=got.size),))
    listing = list_gguf_files(entry.repo_id, revision=entry.first.revision, token=token)
    base = listing.base_models[0] if listing.base_models else ""
    family, params = family_of(base or entry.repo_id)
    if params is None:
        family, params = _family_from_header(header, family)
    orgs = tuple(dict.fromkeys(o for o in (base.split("/")[0] if base else "", entry.repo_id.split("/")[0]) if o))
    return _Target(TokenizerInfo.from_header(header), entry.size, entry.quant, entry.repo_id, family, orgs,
                   bool(base), params)


def _local_target(path: Path) -> _Target:
    headers = read_split(path)
    header = headers[0]
    parts = [path] if len(headers) == 1 else _part_paths(path, len(headers))
    size = sum(p.stat().st_size for p in parts)
    base = _header_base_model(header)
    family, params = family_of(base or path.name.removesuffix(".gguf"))
    if not base:
        basename, label_params = _family_from_header(header, family)
        family, params = basename, label_params or params
    org = header.get_str("general.organization", "", max_len=100)
    orgs = tuple(dict.fromkeys(o for o in (base.split("/")[0] if base else "", org) if o))
    return _Target(TokenizerInfo.from_header(header), size, quant_of(path.name), "", family, orgs, bool(base),
                   params)


def _part_paths(path: Path, count: int) -> list[Path]:
    from .fit import SPLIT_NAME, split_part_name

    m = SPLIT_NAME.match(path.name)
    assert m is not None  # read_split checked the name
    return [path.with_name(split_part_name(m["prefix"], i, count)) for i in range(count)]


def _header_base_model(header: GGUFHeader) -> str:
    """owner/name of the file's first base model (general.base_model.0.repo_url, or .organization
    and .name), or ""."""
    url = header.get_str("general.base_model.0.repo_url", "", max_len=300)
    m = re.match(r"https?://[^/]+/([^/]+/[^/?#]+)", url)
    if m:
        candidate = m[1]
    else:
        org = header.get_str("general.base_model.0.organization", "", max_len=100)
        name = header.get_str("general.base_model.0.name", "", max_len=100)
        candidate = f"{org}/{name}".replace(" ", "-") if org and name else ""
    try:
        return check_repo_id(candidate) if candidate else ""
    except HubNameError:
        return ""


def _family_from_header(header: GGUFHeader, fallback: str) -> tuple[str, float | None]:
    basename = header.get_str("general.basename", "", max_len=100)
    _f, params = family_of(header.get_str("general.size_label", "", max_len=40) or "")
    return basename or fallback, params


# --- candidates --------------------------------------------------------------------------------


def _candidates(t: _Target, catalog: list[CatalogPair], token: str | None, max_repos: int,
                check_cancel: Callable[[], None], say: Callable[[str], None],
                end: float, hub: _Hub) -> Iterable[tuple[GGUFEntry, str]]:
    """(entry, source) for each candidate repo, at most ``max_repos`` repos asked about; with the hub
    unreachable, the catalog's drafts as the catalog gives them."""
    seen = {t.repo_id} if t.repo_id else set()
    asked = 0
    for repo, file, source in _candidate_repos(t, catalog, token, check_cancel, say, hub):
        if repo in seen or asked >= max_repos or time.monotonic() > end:
            continue
        seen.add(repo)
        check_cancel()
        if hub.unreachable:
            if file is not None:
                yield GGUFEntry(file.repo_id, file.filename, quant_of(file.filename), (file,)), source
            continue
        asked += 1
        try:
            entry = _listed(file, token) if file is not None else _pick(t, repo, token)
        except HubUnreachableError as exc:
            hub.lost(exc, say)
            if file is not None:
                yield GGUFEntry(file.repo_id, file.filename, quant_of(file.filename), (file,)), source
            continue
        except (DownloadError, HubNameError) as exc:
            say(f"skipped {repo}: {exc}")
            continue
        if entry is not None:
            yield entry, source


def _candidate_repos(t: _Target, catalog: list[CatalogPair], token: str | None,
                     check_cancel: Callable[[], None], say: Callable[[str], None], hub: _Hub
                     ) -> Iterable[tuple[str, HubFile | None, str]]:
    for pair in catalog:
        same = pair.target.repo == t.repo_id or family_of(pair.target.repo)[0].lower() == t.family.lower()
        if same:
            for d in pair.drafts:
                yield d.repo, d.hub_file(), "catalog"
    if not t.family:
        return
    searches = [(org, "organisation") for org in t.orgs] + [(None, "base_model" if t.family_from_base else "name")]
    for author, source in searches:
        check_cancel()
        if hub.unreachable:
            return
        try:
            hits = search_repos(t.family[:100], sort="downloads", limit=50, token=token, author=author)
        except HubUnreachableError as exc:
            hub.lost(exc, say)
            return
        except DownloadError as exc:
            say(f"search for {t.family!r} failed: {exc}")
            continue
        for hit in hits:
            if _smaller_by_name(t, hit):
                yield hit.repo_id, None, source


def _smaller_by_name(t: _Target, hit: RepoHit) -> bool:
    """Worth listing: the repo's name is of the family and does not say it is as large as the target."""
    family, params = family_of(hit.repo_id)
    if family.lower().replace("_", "-") != t.family.lower().replace("_", "-") and \
            not family.lower().endswith(t.family.lower()):
        return False
    return params is None or t.params is None or params < t.params


def _listed(file: HubFile, token: str | None) -> GGUFEntry | None:
    """A catalog file as the hub lists it (its exact size and sha256; all parts of a split model)."""
    for entry in list_gguf_files(file.repo_id, revision=file.revision, token=token).entries:
        if file.filename in (f.filename for f in entry.files):
            return entry
    return None


def _pick(t: _Target, repo: str, token: str | None) -> GGUFEntry | None:
    """The repo's file for this target: the same quantisation, else the nearest in bits."""
    entries = [e for e in list_gguf_files(repo, token=token).entries if e.size > 0]
    if not entries:
        return None
    want = quant_bits(t.quant) if t.quant != "other" else quant_bits("Q4_K_M")
    return min(entries, key=lambda e: (e.quant != t.quant, abs(quant_bits(e.quant) - want), e.size))


def target_entry(ref: str, *, token: str | None = None) -> GGUFEntry:
    """``owner/repo/file.gguf`` (any part of a split model) or ``owner/repo`` (its Q4_K_M file, else
    the nearest quantisation) as an entry; DownloadError when the hub has no such GGUF."""
    parts = ref.strip("/").split("/")
    if len(parts) >= 3 and ref.endswith(".gguf"):
        try:
            file = HubFile("/".join(parts[:2]), "/".join(parts[2:]))
        except HubNameError as exc:
            raise DownloadError(str(exc)) from None
        listed = _listed(file, token)
        if listed is None:
            raise DownloadError(f"{file.filename} is not a GGUF model offered in {file.repo_id} "
                                f"(see: specchat models files {file.repo_id})")
        return listed
    try:
        repo = check_repo_id(ref.strip("/"))
    except HubNameError as exc:
        raise DownloadError(str(exc)) from None
    entries = list_gguf_files(repo, token=token).entries
    if not entries:
        raise DownloadError(f"{repo} has no GGUF model files")
    want = quant_bits("Q4_K_M")
    return min(entries, key=lambda e: (e.quant != "Q4_K_M", abs(quant_bits(e.quant) - want), e.size))
