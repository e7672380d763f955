"""Hub search: GGUF repos by text, a repo's GGUF files grouped by quantisation with a fit verdict,
split GGUFs as one entry, gated repos in one line.

The two hub calls are the ones huggingface_hub's ``HfApi`` makes, with the same URLs,
parameters, headers (token, user agent) and HTTP client:

- search: ``GET /api/models?filter=gguf&search=...&sort=...&limit=...&expand=...`` (what
  ``HfApi.list_models(filter="gguf", ...)`` sends; ``filter=gguf`` is the hub's library
  filter, ``expand`` asks only for downloads, likes, lastModified and gated);
- a repo's files: ``GET /api/models/{repo}/revision/{rev}?blobs=true`` (what
  ``HfApi.model_info(repo, revision=rev, files_metadata=True)`` sends): every file with its
  size and, for LFS files (every GGUF), its sha256; the card's ``base_model`` and the tags.

They are sent here rather than through ``HfApi`` because ``list_models`` retries a refused
connection five times with back-off (``http_backoff``: about 23 s before a down hub is
reported) and neither call bounds the answer's size or its wall time.  Here each call is
one request, its body is read at most :data:`MAX_API_BYTES`, it runs in a daemon thread
with a deadline (:func:`hub.in_background`), and the JSON is checked field by field: a
name that is not a valid hub name is left out, never passed on.

Every failure is one line: :class:`DownloadError` for the hub and the network (gated, not
found, offline, a hub that does not answer), :class:`HubQueryError` for a search text or
limit the user typed, GGUFError for bytes that are not a GGUF header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

import httpx2
from huggingface_hub import constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session

from specchat.bounded_json import loads
from specchat.errors import UserError

from .fit import (
    SPLIT_NAME,
    FitVerdict,
    ModelFacts,
    estimate_facts,
    fit_pair,
    join_split,
    model_facts,
    split_count,
)
from .gguf_header import GGUFError
from .hub import (
    ERROR_BODY_MAX,
    HUB_ERRORS,
    DownloadError,
    HubFile,
    HubUnreachableError,
    in_background,
    raise_hub_error,
)
from .hub_names import HubNameError, check_repo_id, check_revision
from .remote import HEADER_CAP, HEADER_DEADLINE_S, fetch_header

SORTS = ("downloads", "likes", "updated")  # "updated": the repo's last commit (the hub's lastModified)
_HUB_SORT = {"downloads": "downloads", "likes": "likes", "updated": "lastModified"}
QUERY_MAX = 200  # characters of a search text (the hub's own search box takes far less)
LIMIT_MAX = 100  # repos one search returns (one page of the hub's answer)
MAX_API_BYTES = 16 << 20  # of one JSON answer: a repo of 1,000 files is ~300 kB
API_DEADLINE_S = 30.0  # the longest one hub API call may take
MAX_FILES = 5_000  # files of a repo looked at (the largest GGUF repos have a few hundred)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class HubQueryError(UserError, ValueError):
    """A search text or limit that cannot be sent; one line."""


# --- search ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepoHit:
    repo_id: str
    downloads: int  # last 30 days, as the hub counts them
    likes: int
    updated: str  # ISO date of the last commit, or ""
    gated: str  # "" | "auto" | "manual"


def search_repos(query: str, *, sort: str = "downloads", limit: int = 50, token: str | None = None,
                 author: str | None = None) -> list[RepoHit]:
    """GGUF repos whose id contains ``query``, best first by ``sort`` (one of SORTS); ``author``:
    only repos of this user or organisation.  HubQueryError for bad input, DownloadError (one line)
    when the hub cannot answer."""
    if not isinstance(query, str) or len(query) > QUERY_MAX or not query.isprintable():
        raise HubQueryError(f"search text must be one line of at most {QUERY_MAX} characters")
    if sort not in SORTS:
        raise HubQueryError(f"sort by {sort!r:.40}? use one of: {', '.join(SORTS)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
        raise HubQueryError(f"limit {limit!r:.20} is out of range: 1 to {LIMIT_MAX}")
    params: list[tuple[str, str | int | float | bool | None]] = [("filter", "gguf"), ("sort", _HUB_SORT[sort]), ("limit", limit)]
    if query.strip():
        params.append(("search", query.strip()))
    if author:
        params.append(("author", check_repo_id(f"{author}/x").split("/")[0]))
    params += [("expand", p) for p in ("downloads", "likes", "lastModified", "gated")]
    doc = _api_get(f"{constants.ENDPOINT}/api/models", params, token, what="the hub's search",
                   repo_id=None)
    if not isinstance(doc, list):
        raise DownloadError(f"{constants.ENDPOINT} did not answer the search like a Hugging Face hub "
                            "(check HF_ENDPOINT and proxies)")
    hits = [hit for item in doc[:limit] if (hit := _hit(item)) is not None]
    return hits


def _hit(item: object) -> RepoHit | None:
    if not isinstance(item, dict):
        return None
    repo_id = _repo_id(item.get("id"))
    if repo_id is None:
        return None
    updated = item.get("lastModified")
    return RepoHit(repo_id, _count(item.get("downloads")), _count(item.get("likes")),
                   updated[:10] if isinstance(updated, str) and _DATE.match(updated) else "",
                   _gate(item.get("gated")))


def _repo_id(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return check_repo_id(value)
    except HubNameError:
        return None


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63 else 0


def _gate(value: object) -> str:
    """The hub answers False, "auto" or "manual"; any other true value is taken as a gate with review."""
    if value in ("auto", "manual"):
        assert isinstance(value, str)
        return value
    return "manual" if value not in (None, False, "", 0) else ""


# --- one hub API call, bounded ---------------------------------------------------------------------


def _api_get(url: str, params: list[tuple[str, str | int | float | bool | None]], token: str | None, *, what: str,
             repo_id: str | None, revision: str = "main") -> object:
    """GET ``url`` and parse its JSON: one request, at most MAX_API_BYTES, within API_DEADLINE_S."""
    def call() -> object:
        headers = build_hf_headers(token=token)
        timeout = httpx2.Timeout(constants.HF_HUB_DOWNLOAD_TIMEOUT)
        with get_session().stream("GET", url, params=params, headers=headers, timeout=timeout,
                                  follow_redirects=True) as response:
            if response.status_code >= 400:
                body = bytearray()
                for piece in response.iter_bytes():
                    body += piece
                    if len(body) >= ERROR_BODY_MAX:
                        break
                raise_hub_error(response, bytes(body[:ERROR_BODY_MAX]))
            data = bytearray()
            for piece in response.iter_bytes():
                data += piece
                if len(data) > MAX_API_BYTES:
                    raise DownloadError(f"{what}: the hub's answer is over {MAX_API_BYTES >> 20} MiB; refusing it")
        return loads(data)  # nesting bounded: a too-deep answer is a ValueError, worded below

    try:
        return in_background(call, None, API_DEADLINE_S, what)
    except DownloadError:
        raise
    except ValueError:  # not JSON (a captive portal, a proxy's page)
        raise DownloadError(f"{constants.ENDPOINT} did not answer {what} with JSON (check HF_ENDPOINT and proxies)"
                            ) from None
    except HUB_ERRORS as exc:
        raise repo_error(exc, repo_id, revision, what) from None


def repo_error(exc: BaseException, repo_id: str | None, revision: str, what: str) -> DownloadError:
    """What a hub API call raised, as one line (hub.hub_error's wording, for a repo instead of a file)."""
    endpoint = constants.ENDPOINT
    login = "log in with `hf auth login` (or set HF_TOKEN)"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError) and repo_id:
        msg = gated_message(repo_id, "manual" if status == 403 else "auto", status == 403)
    elif isinstance(exc, RepositoryNotFoundError) and repo_id:
        msg = f"repository {repo_id} not found on {endpoint} (if it is private or gated, {login})"
    elif isinstance(exc, RevisionNotFoundError) and repo_id:
        msg = f"revision '{revision}' not found in {repo_id}"
    elif isinstance(exc, HfHubHTTPError) and status in (401, 403):
        msg = f"{what}: the hub refused access (HTTP {status}); {login}"
    elif isinstance(exc, HfHubHTTPError):
        msg = f"{what}: the hub answered HTTP {status}; try again later"
    elif isinstance(exc, OfflineModeIsEnabled):
        return HubUnreachableError(f"{what} needs the hub, and HF_HUB_OFFLINE is set")
    elif isinstance(exc, httpx2.HTTPError | ConnectionError):
        return HubUnreachableError(f"cannot reach {endpoint} for {what} ({type(exc).__name__}); "
                                   "check the connection and try again")
    else:
        msg = f"{what}: {exc}"
    return DownloadError(" ".join(msg.split()))


# --- a repo's GGUF files -------------------------------------------------------------------------

# quantisation names as llama.cpp's quantize tool and the big uploaders write them, in file names
_QUANT = re.compile(r"(?i)(?<![a-z0-9])(i?q[1-8]_(?:k_)?[a-z0-9]{1,3}|i?q[1-8]_k|tq[12]_0|mxfp4|bf16|f16|f32|fp16)"
                    r"(?![a-z0-9])")
_QUANT_BITS = re.compile(r"(\d+)")


def quant_of(filename: str) -> str:
    """The quantisation a file name says ("Q4_K_M", "IQ4_XS", "BF16", ...), or "other"."""
    stem = PurePosixPath(filename).name.removesuffix(".gguf")
    m = SPLIT_NAME.match(PurePosixPath(filename).name)
    if m:
        stem = m["prefix"]
    found = _QUANT.findall(stem)
    if not found:
        return "other"
    q = found[-1].upper()  # the last one: "Qwen2.5-7B-Q4_K_M" names the quant at the end
    return "F16" if q == "FP16" else q


def quant_bits(quant: str) -> float:
    """Bits a weight takes, roughly, for ordering: IQ1 < Q2 < ... < Q8 < F16 = BF16 < F32 < other."""
    if quant in ("F16", "BF16"):
        return 16.0
    if quant == "F32":
        return 32.0
    if quant == "MXFP4":
        return 4.25
    m = _QUANT_BITS.search(quant)
    if quant.startswith("TQ") and m:
        return 1.6 + 0.4 * int(m[1])
    return float(m[1]) + (0.0 if quant.startswith("I") else 0.5) if m else 99.0


@dataclass(frozen=True, slots=True)
class GGUFEntry:
    """One downloadable model: a single file, or all parts of a split GGUF in order."""

    repo_id: str
    name: str  # the file name, or "Foo-Q4_K_M.gguf (3 parts)"
    quant: str  # "Q4_K_M", "Q8_0", "IQ4_XS", "F16", ... or "other"
    files: tuple[HubFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def split(self) -> bool:
        return len(self.files) > 1

    @property
    def first(self) -> HubFile:
        """The file llama.cpp is given (it finds the other parts beside it)."""
        return self.files[0]

    @property
    def ref(self) -> str:
        return self.first.ref


@dataclass(frozen=True, slots=True)
class RepoFiles:
    repo_id: str
    gated: str  # "" | "auto" | "manual"
    base_models: tuple[str, ...]  # repo ids from the card's base_model and the base_model:... tags
    entries: tuple[GGUFEntry, ...]  # by quantisation (fewest bits first), then name
    notes: tuple[str, ...] = ()  # one line per file not offered, and why (a part missing, a bad name)
    sha: str = ""  # the commit the listing is of


def list_gguf_files(repo_id: str, *, revision: str = "main", token: str | None = None) -> RepoFiles:
    """The GGUF models in a repo, each with its size and sha256 (from the hub's LFS info).  Split
    models are one entry with all their parts; an incomplete split set is not offered (a note says
    which part is missing).  DownloadError (one line) when the hub cannot answer."""
    try:
        check_repo_id(repo_id)
        check_revision(revision)
    except HubNameError as exc:
        raise DownloadError(str(exc)) from None
    url = f"{constants.ENDPOINT}/api/models/{repo_id}/revision/{revision.replace('/', '%2F')}"
    doc = _api_get(url, [("blobs", "true")], token, what=f"the files of {repo_id}", repo_id=repo_id,
                   revision=revision)
    if not isinstance(doc, dict):
        raise DownloadError(f"{constants.ENDPOINT} did not answer for {repo_id} like a Hugging Face hub")
    siblings = doc.get("siblings")
    files, notes = _gguf_files(repo_id, revision, siblings if isinstance(siblings, list) else [])
    entries, split_notes = _group(repo_id, files)
    sha = doc.get("sha")
    return RepoFiles(repo_id, _gate(doc.get("gated")), _base_models(doc), tuple(entries), tuple(notes + split_notes),
                     sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{40}", sha) else "")


def _gguf_files(repo_id: str, revision: str, siblings: list) -> tuple[list[HubFile], list[str]]:
    files, notes = [], []
    for s in siblings[:MAX_FILES]:
        if not isinstance(s, dict) or not isinstance(name := s.get("rfilename"), str):
            continue
        base = PurePosixPath(name).name
        if not name.endswith(".gguf"):
            if re.search(r"\.gguf\.part\d+of\d+$", name):
                notes.append(f"{name[:120]}: an old-style split that must be joined by hand; not offered")
            continue
        if base.startswith("mmproj") or "imatrix" in base.lower():
            continue  # a vision projector or importance matrix: not a model to chat with
        lfs = s.get("lfs")
        sha = lfs.get("sha256") if isinstance(lfs, dict) and isinstance(lfs.get("sha256"), str) else None
        size = s.get("size")
        try:
            files.append(HubFile(repo_id, name, revision, sha256=sha, size=size if _count(size) == size else None))
        except HubNameError as exc:
            notes.append(f"not offered: {exc}")
    return files, notes


def _group(repo_id: str, files: list[HubFile]) -> tuple[list[GGUFEntry], list[str]]:
    """Single files as they are; split parts gathered by (folder, prefix, count), offered only whole."""
    singles: list[GGUFEntry] = []
    sets: dict[tuple[str, str, int], dict[int, HubFile]] = {}
    for f in files:
        path = PurePosixPath(f.filename)
        m = SPLIT_NAME.match(path.name)
        if m is None:
            singles.append(GGUFEntry(repo_id, f.filename, quant_of(f.filename), (f,)))
            continue
        count = int(m["count"])
        sets.setdefault((str(path.parent), m["prefix"], count), {})[int(m["no"])] = f
    notes = []
    for (folder, prefix, count), parts in sets.items():
        shown = prefix + ".gguf" if folder == "." else f"{folder}/{prefix}.gguf"
        missing = [i for i in range(1, count + 1) if i not in parts]
        if missing or count < 1:
            notes.append(f"{shown}: {count - len(missing)} of {count} parts on the hub "
                         f"(part {missing[0] if missing else '?'} missing); not offered")
            continue
        ordered = tuple(parts[i] for i in range(1, count + 1))
        name = f"{shown} ({count} parts)" if count > 1 else ordered[0].filename
        singles.append(GGUFEntry(repo_id, name, quant_of(ordered[0].filename), ordered))
    entries = sorted(singles, key=lambda e: (quant_bits(e.quant), e.quant, e.name.lower()))
    return entries, notes


def _base_models(doc: dict) -> tuple[str, ...]:
    """From ``cardData.base_model`` (a string or a list) and tags ``base_model:[relation:]owner/name``."""
    found: list[str] = []
    card = doc.get("cardData")
    raw = card.get("base_model") if isinstance(card, dict) else None
    for value in [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []:
        found.append(value)
    tags = doc.get("tags")
    for tag in tags[:500] if isinstance(tags, list) else []:
        if isinstance(tag, str) and tag.startswith("base_model:"):
            found.append(tag.split(":")[-1])
    out: list[str] = []
    for value in found:
        repo = _repo_id(value)
        if repo is not None and repo not in out:
            out.append(repo)
    return tuple(out[:20])


def gated_message(repo_id: str, gated: str, has_token: bool) -> str:
    """One line: what the gate is and how to get through it ("" for a repo that is not gated)."""
    if not gated:
        return ""
    page = f"{constants.ENDPOINT}/{repo_id}"
    review = " (its authors approve each request by hand)" if gated == "manual" else " (access is granted at once)"
    how = ("then download again with the same token" if has_token
           else "then log in with `hf auth login` (or set HF_TOKEN)")
    return f"{repo_id} is a gated repo{review}: accept its licence on {page}, {how}"


# --- fit, from the headers alone -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryFacts:
    facts: ModelFacts
    bytes_read: int
    etag: str  # of the first part


def entry_facts(entry: GGUFEntry, *, token: str | None = None, cap_bytes: int = HEADER_CAP,
                deadline_s: float = HEADER_DEADLINE_S) -> EntryFacts:
    """The estimate's inputs for ``entry``, header-only: the first part's header (metadata and its
    tensors) and, for a split model, the other parts' headers (their tensor tables: a few kB each,
    read in one range of at most 1 MiB)."""
    first = fetch_header(entry.first, token=token, cap_bytes=cap_bytes, deadline_s=deadline_s)
    headers = [first.header]
    read = first.bytes_read
    count = split_count(first.header)
    if count != len(entry.files):
        raise GGUFError(f"{entry.first.ref}: its header says {count} part(s), the repo has {len(entry.files)}")
    for part in entry.files[1:]:
        got = fetch_header(part, token=token, cap_bytes=cap_bytes, deadline_s=deadline_s, max_chunk=1 << 20)
        headers.append(got.header)
        read += got.bytes_read
    return EntryFacts(model_facts(join_split(headers)), read, first.etag)


def entry_fit(entry: GGUFEntry, *, free_vram: int | None, free_ram: int, n_ctx: int = 4096,
              token: str | None = None) -> FitVerdict:
    """Where ``entry`` would run on this machine, from its header(s) (see :func:`entry_facts`)."""
    return pair_fit(entry, None, free_vram=free_vram, free_ram=free_ram, n_ctx=n_ctx, token=token)


def pair_fit(target: GGUFEntry, draft: GGUFEntry | None, *, free_vram: int | None, free_ram: int,
             n_ctx: int = 4096, token: str | None = None) -> FitVerdict:
    """:func:`fit_pair` for a target and maybe a draft on the hub, header-only."""
    models = [estimate_facts(entry_facts(target, token=token).facts, n_ctx=n_ctx, name=_short(target))]
    if draft is not None:
        models.append(estimate_facts(entry_facts(draft, token=token).facts, n_ctx=n_ctx, name=_short(draft)))
    return fit_pair(models, free_vram=free_vram, free_ram=free_ram)


def _short(entry: GGUFEntry) -> str:
    return PurePosixPath(entry.name).name


def entry_of(file: HubFile, *, token: str | None = None) -> GGUFEntry:
    """The entry a hub file belongs to: itself, or for a part of a split model all its parts (asks
    the hub for the repo's file list).  DownloadError when a part is missing on the hub."""
    m = SPLIT_NAME.match(PurePosixPath(file.filename).name)
    if m is None or int(m["count"]) == 1:
        return GGUFEntry(file.repo_id, file.filename, quant_of(file.filename), (file,))
    listing = list_gguf_files(file.repo_id, revision=file.revision, token=token)
    for entry in listing.entries:
        if file.filename in (f.filename for f in entry.files):
            return entry
    note = next((n for n in listing.notes if m["prefix"] in n), f"{file.filename} not found")
    raise DownloadError(f"{file.repo_id}: {note}")

