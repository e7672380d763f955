"""Pair compatibility before download: read only the GGUF headers of files on the hub.

Whether a draft can serve a target is decided by the tokenizer in the GGUF metadata
(:mod:`specchat.models.compatibility`), and that metadata sits at the start of the file:
about 6 MB of a 1.1 GB Qwen file (151,936 token strings and their merges).  So the model
manager can refuse a pair, with the reason, before the user spends gigabytes on it.

The header is read sequentially by :func:`specchat.models.gguf_header.read_header` from
a :class:`RangeReader`, a file-like object that fetches the file with HTTP range requests
in growing chunks (1 MiB doubling to 8 MiB): small headers cost one or two requests, big
ones few, and what is fetched past the header's end is at most one chunk.  A ``read(n)``
with a huge ``n`` (a header claiming a 1 GB string) never becomes one huge GET: each GET
asks for at most ``max_chunk`` bytes and ``read`` returns what it has.

Limits, so a hostile or broken server or file cannot hold the check or fill memory:

- a cap on the bytes read for one header: the ``remote_header_cap_mib`` setting (64 MiB
  by default), and at most 5% of the file, but never less than 16 MiB (or the whole file
  when it is smaller), so a small draft with a big vocabulary still checks.  A GGUF header
  is rarely over 10 MiB (Qwen2.5's 151,936 tokens and merges: ~6 MB);
- a deadline for the whole header read (60 s), checked between received pieces, and a
  stall timeout per read (``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s): a server that trickles a
  byte every few seconds is given up on;
- an error answer's body is read at most 64 KiB (:func:`hub.raise_for_error_status`);
- the body is taken as sent (no decompression), and a ranged answer that does not start
  where it was asked is refused.

Requests go through huggingface_hub's own HTTP client (an ``httpx2.Client`` in
huggingface_hub 2.x, with its proxy settings and offline switch) and its headers (token,
user agent); hub errors become the same one-line DownloadError as downloads
(:func:`hub.hub_error`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import httpx2
from gguf import GGUF_MAGIC, GGUFValueType
from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.utils import get_session

from .compatibility import (
    MAX_VOCAB_SIZE_DIFFERENCE,
    PairCompatibility,
    TokenizerInfo,
    check_drafter,
    check_tokenizers,
)

# the header reader's own stream and value readers, so the prefix scan below has the same limits
from .gguf_header import (
    MAX_KEY_BYTES,
    MAX_KV,
    MAX_STRING_BYTES,
    TOKENS_KEY,
    ByteSource,
    GGUFError,
    GGUFHeader,
    _array,
    _Stream,
    _value_type,
    read_header,
)
from .hub import (
    HUB_ERRORS,
    DownloadError,
    HubFile,
    download_headers,
    hub_error,
    in_background,
    raise_for_error_status,
)

FIRST_CHUNK = 1 << 20
MAX_CHUNK = 8 << 20
MiB = 1 << 20
TOKENIZER_MODEL_KEY = "tokenizer.ggml.model"
HEADER_CAP = 64 * MiB  # the default of the remote_header_cap_mib setting
HEADER_CAP_FLOOR = 16 * MiB  # always allowed (a small file's header may be most of it)
HEADER_CAP_SHARE = 0.05  # of the file: checking must stay far cheaper than downloading
HEADER_DEADLINE_S = 60.0


def header_cap(size: int | None, cap: int = HEADER_CAP) -> int:
    """Bytes a header read of a file of ``size`` bytes may transfer (see the module docstring)."""
    if size is None:
        return cap
    return min(cap, max(min(HEADER_CAP_FLOOR, cap), int(size * HEADER_CAP_SHARE)))


class RangeReader:
    """Read-only, forward-only file-like view of a remote file, fetched lazily by byte ranges.

    ``read(n)`` returns between 1 and ``n`` bytes, b"" at the end of the file.  Each time the
    buffer runs dry the next range is fetched; ranges grow from ``first_chunk`` doubling up
    to ``max_chunk``, whatever ``n`` is.  ``bytes_fetched`` counts the body bytes
    transferred so far, ``requests`` the GETs.  ``size`` (from the HEAD) keeps ranges
    inside the file; without it the end shows as a short or 416 answer.

    Limits (DownloadError, one line naming ``name``): more than ``max_bytes`` fetched; the
    whole read taking over ``deadline_s`` (checked between received pieces); no byte for
    ``stall_s`` (the client's read timeout).  HTTP errors are raised as huggingface_hub's
    (``hf_raise_for_status``, after at most 64 KiB of the body); :func:`read_remote_header`
    turns them into DownloadError.
    """

    def __init__(
        self,
        url: str,
        *,
        size: int | None = None,
        headers: dict[str, str] | None = None,
        client: httpx2.Client | None = None,
        first_chunk: int = FIRST_CHUNK,
        max_chunk: int = MAX_CHUNK,
        max_bytes: int | None = None,
        deadline_s: float = HEADER_DEADLINE_S,
        stall_s: float | None = None,
        name: str | None = None,
    ) -> None:
        self.url, self.size = url, size
        self.name = name or url
        self.headers = dict(headers or {})
        self.headers["Accept-Encoding"] = "identity"  # offsets must be offsets in the file
        self.client = client if client is not None else get_session()
        self.chunk, self.max_chunk = first_chunk, max_chunk
        self.max_bytes = max_bytes if max_bytes is not None else header_cap(size)
        self.deadline_s = deadline_s
        self.stall_s = float(stall_s if stall_s is not None else constants.HF_HUB_DOWNLOAD_TIMEOUT)
        self._deadline: float | None = None  # set at the first read
        self.bytes_fetched = 0
        self.requests = 0
        self._buf = b""
        self._next = 0  # offset of the first byte not fetched yet
        self._eof = False

    def read(self, n: int = -1) -> bytes:
        if self._deadline is None:
            self._deadline = time.monotonic() + self.deadline_s
        if not self._buf and not self._eof:
            self._fetch(min(max(self.chunk, n), self.max_chunk))
            self.chunk = min(self.chunk * 2, self.max_chunk)
        if n < 0:
            n = len(self._buf)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _fetch(self, length: int) -> None:
        start = self._next
        if self.size is not None and start >= self.size:
            self._eof = True
            return
        self._check_deadline()
        if self.bytes_fetched >= self.max_bytes:
            raise DownloadError(f"reading the header of {self.name} stopped after {_mib(self.max_bytes)} "
                                "(the cap; a GGUF header is rarely over 10 MiB)")
        length = min(length, self.max_bytes - self.bytes_fetched)
        end = start + length - 1
        if self.size is not None:
            end = min(end, self.size - 1)
        data = self._get(start, end)
        self.bytes_fetched += len(data)
        self._next += len(data)
        self._buf += data
        if len(data) < end - start + 1:
            self._eof = True

    def _get(self, start: int, end: int) -> bytes:
        try:
            return self._get_range(start, end)
        except httpx2.ReadTimeout:
            raise DownloadError(f"reading the header of {self.name}: the server sent nothing for "
                                f"{self.stall_s:g} s; try again later") from None

    def _get_range(self, start: int, end: int) -> bytes:
        headers = {**self.headers, "Range": f"bytes={start}-{end}"}
        # huggingface_hub's client has no default timeout; a stalled server must not hang the check
        with self.client.stream("GET", self.url, headers=headers, follow_redirects=True,
                                timeout=httpx2.Timeout(self.stall_s)) as response:
            self.requests += 1
            if response.status_code == 416:  # range starts past the end
                return b""
            raise_for_error_status(response)
            self._check_range(response, start)
            want = end - start + 1
            data = bytearray()
            for piece in response.iter_raw():  # as sent: offsets are offsets in the file
                data += piece
                if len(data) >= want:  # a 200 sends the whole file: stop at what was asked
                    break
                self._check_deadline()
        return bytes(data[:want])

    def _check_range(self, response: httpx2.Response, start: int) -> None:
        if response.status_code == 206:
            m = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
            if m is not None and int(m[1]) != start:
                raise DownloadError(f"{self.name}: the server answered another byte range than asked; "
                                    "cannot read the header")
        elif start > 0:
            raise DownloadError(f"{self.name}: the server ignores range requests; cannot read just the header")

    def _check_deadline(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise DownloadError(f"reading the header of {self.name} took over {self.deadline_s:g} s "
                                f"({_mib(self.bytes_fetched)} arrived); the server is too slow, try again later")


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n:,} bytes"


@dataclass(frozen=True, slots=True)
class RemoteHeader:
    """A header read from the hub, with what the HEAD said about the file."""

    header: GGUFHeader
    bytes_read: int  # body bytes transferred (the HEAD has none)
    size: int | None  # of the whole file
    etag: str  # the hub's ETag: the sha256 of an LFS file's content


def _open(file: HubFile, token: str | None, cap_bytes: int, deadline_s: float, stall_s: float | None,
          first_chunk: int, max_chunk: int) -> tuple[RangeReader, str]:
    """The HEAD (bounded in wall time: its read timeout alone lets a trickled answer run on), then a
    RangeReader of the file; HUB_ERRORS pass through."""
    url = hf_hub_url(file.repo_id, file.filename, revision=file.revision)
    stall = float(stall_s if stall_s is not None else constants.HF_HUB_DOWNLOAD_TIMEOUT)
    meta = in_background(lambda: get_hf_file_metadata(url, token=token, timeout=stall), None, deadline_s,
                         file.ref)
    headers = download_headers(url, meta.location, token)
    reader = RangeReader(meta.location, size=meta.size, headers=headers, max_bytes=header_cap(meta.size, cap_bytes),
                         deadline_s=deadline_s, stall_s=stall, name=file.ref, first_chunk=first_chunk,
                         max_chunk=max_chunk)
    return reader, meta.etag or ""


def fetch_header(
    file: HubFile,
    *,
    token: str | None = None,
    cap_bytes: int = HEADER_CAP,
    deadline_s: float = HEADER_DEADLINE_S,
    stall_s: float | None = None,
    first_chunk: int = FIRST_CHUNK,
    max_chunk: int = MAX_CHUNK,
) -> RemoteHeader:
    """:func:`read_remote_header` with the file's size and ETag; ``max_chunk`` bounds how far past
    the header's end the read may go (and how many requests it takes: one per ``max_chunk``)."""
    try:
        reader, etag = _open(file, token, cap_bytes, deadline_s, stall_s, first_chunk, max_chunk)
        header = read_header(reader, size=reader.size, source=file.ref)
    except GGUFError as exc:
        raise GGUFError(f"{file.ref}: {exc}") from None
    except HUB_ERRORS as exc:
        raise hub_error(exc, file) from None
    return RemoteHeader(header, reader.bytes_fetched, reader.size, etag)


def read_remote_header(
    file: HubFile,
    *,
    token: str | None = None,
    cap_bytes: int = HEADER_CAP,
    deadline_s: float = HEADER_DEADLINE_S,
    stall_s: float | None = None,
) -> tuple[GGUFHeader, int]:
    """Read the GGUF header of a file on the hub; return it and the body bytes transferred.

    ``cap_bytes`` is the most one header may cost (see :func:`header_cap`), ``deadline_s``
    the longest the reading may take, ``stall_s`` the longest wait for a byte.  Raises
    DownloadError for hub and network problems (gated, not found, offline) and for a
    limit hit, and GGUFError, naming the file, when the bytes are not a GGUF header.
    """
    got = fetch_header(file, token=token, cap_bytes=cap_bytes, deadline_s=deadline_s, stall_s=stall_s)
    return got.header, got.bytes_read


# --- a draft checked against a known target: refused ones cost a few kB -------------------------------
# A candidate draft is refused by llama.cpp's rule (compatibility.py) far more often than not, and the
# two commonest reasons are written near the start of its header: the tokenizer type
# (tokenizer.ggml.model) and the vocabulary size (the element count in front of
# tokenizer.ggml.tokens).  So the header is scanned up to that count first (SCAN_CHUNK at a time);
# only a candidate that passes both is read whole, and the scanned bytes are replayed, not fetched
# again.  Measured on the test models: Gemma 3 270M (header 6.5 MB) and SmolLM2 135M (1.8 MB) are
# refused after one 64 KiB range; the Qwen 0.5B draft costs its 5.9 MB header plus < 1 MiB.
SCAN_CHUNK = 64 << 10
SCAN_MAX = 1 << 20  # a prefix longer than this (huge general.* values) goes to the full read
DRAFT_MAX_CHUNK = 1 << 20  # a draft's full read goes at most this far past the header's end


class _Replay:
    """A byte source that keeps what it hands out until :meth:`rewind`, then hands it out again
    before reading on: the prefix scan and the full parse share one pass over the network."""

    def __init__(self, raw: RangeReader) -> None:
        self.raw, self.kept, self.pos, self.replaying = raw, bytearray(), 0, False

    def read(self, n: int, /) -> bytes:
        if not self.replaying:
            data = self.raw.read(n)
            self.kept += data
            return data
        if self.pos < len(self.kept):
            out = bytes(self.kept[self.pos:self.pos + n])
            self.pos += len(out)
            return out
        return self.raw.read(n)

    def rewind(self) -> None:
        self.replaying, self.pos = True, 0


def scan_tokenizer(raw: ByteSource, *, size: int | None) -> tuple[str | None, int | None]:
    """(tokenizer.ggml.model, number of tokens) from the start of a header, reading no further than
    the token list's element count (at most SCAN_MAX bytes); None for what was not reached.  Malformed
    bytes end the scan quietly: the full, checked read of :func:`read_header` decides about them."""
    s = _Stream(raw, size=size, chunk=SCAN_CHUNK)
    model: str | None = None
    try:
        if s.u32() != GGUF_MAGIC or s.u32() not in (2, 3):
            return None, None
        s.u64()
        n_kv = s.u64()
        for _ in range(min(n_kv, MAX_KV)):
            if s.consumed > SCAN_MAX:
                break
            key = s.string(MAX_KEY_BYTES, "a key")
            vtype = _value_type(s.u32(), key)
            if key == TOKENS_KEY:
                if vtype == GGUFValueType.ARRAY and s.u32() == GGUFValueType.STRING:
                    return model, s.u64()
                break
            if vtype == GGUFValueType.STRING:
                value = s.string(MAX_STRING_BYTES, key)
                if key == TOKENIZER_MODEL_KEY:
                    model = value[:256]
            elif vtype == GGUFValueType.ARRAY:
                _array(s, key)
            else:
                s.scalar(vtype)
    except GGUFError:
        pass
    return model, None


def _early_verdict(target: TokenizerInfo, model: str | None, n_tokens: int | None) -> PairCompatibility | None:
    """A refusal check_tokenizers would also make, from the scanned prefix alone; None: read on."""
    if not target.tokens:
        return None
    if model is not None and model != target.model:
        return PairCompatibility(False, f"tokenizer type differs: '{target.model}' vs '{model}'")
    nt = len(target.tokens)
    if n_tokens and abs(nt - n_tokens) > MAX_VOCAB_SIZE_DIFFERENCE:
        return PairCompatibility(False, f"vocabulary sizes differ by {abs(nt - n_tokens)} "
                                        f"(> {MAX_VOCAB_SIZE_DIFFERENCE}): {nt} vs {n_tokens}")
    return None


@dataclass(frozen=True, slots=True)
class DraftCheck:
    """A candidate draft checked against a target's tokenizer."""

    verdict: PairCompatibility
    bytes_read: int
    size: int | None  # of the candidate file
    header: GGUFHeader | None  # None when it was refused from the prefix alone


def check_remote_draft(
    target: TokenizerInfo,
    draft: HubFile,
    *,
    token: str | None = None,
    cap_bytes: int = HEADER_CAP,
    deadline_s: float = HEADER_DEADLINE_S,
    stall_s: float | None = None,
) -> DraftCheck:
    """Can ``draft`` serve a target with tokenizer ``target``?  Refuses from the first kilobytes of
    the draft's header where it can (see above), else reads the header whole.  Raises DownloadError
    and GGUFError as :func:`read_remote_header` does."""
    try:
        reader, _etag = _open(draft, token, cap_bytes, deadline_s, stall_s, SCAN_CHUNK, DRAFT_MAX_CHUNK)
        source = _Replay(reader)
        early = _early_verdict(target, *scan_tokenizer(source, size=reader.size))
        if early is not None:
            return DraftCheck(early, reader.bytes_fetched, reader.size, None)
        source.rewind()
        header = read_header(source, size=reader.size, source=draft.ref)
        verdict = check_tokenizers(target, TokenizerInfo.from_header(header))
    except GGUFError as exc:
        raise GGUFError(f"{draft.ref}: {exc}") from None
    except HUB_ERRORS as exc:
        raise hub_error(exc, draft) from None
    return DraftCheck(verdict, reader.bytes_fetched, reader.size, header)


def check_remote_pair(
    target: HubFile,
    draft: HubFile,
    *,
    token: str | None = None,
    cap_bytes: int = HEADER_CAP,
    deadline_s: float = HEADER_DEADLINE_S,
    stall_s: float | None = None,
) -> tuple[PairCompatibility, int]:
    """Can ``draft`` serve ``target``?  Decided from the two remote headers; also returns bytes transferred.
    A draft model must share the target's tokenizer; a trained head (MTP, EAGLE-3, DFlash, DSpark) must fit
    the target as llama.cpp checks it at load (:func:`~.drafter_heads.check_head`, the field named)."""
    target_header, target_bytes = read_remote_header(target, token=token, cap_bytes=cap_bytes,
                                                     deadline_s=deadline_s, stall_s=stall_s)
    draft_header, draft_bytes = read_remote_header(draft, token=token, cap_bytes=cap_bytes,
                                                   deadline_s=deadline_s, stall_s=stall_s)
    return check_drafter(target_header, draft_header), target_bytes + draft_bytes
