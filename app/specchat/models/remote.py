"""Pair compatibility before download: read only the GGUF headers of files on the hub.

Whether a draft can serve a target is decided by the tokenizer in the GGUF metadata
(:mod:`specchat.models.compatibility`), and that metadata sits at the start of the file:
about 6 MB of a 1.1 GB Qwen file (151,936 token strings and their merges).  So the model
manager can refuse a pair, with the reason, before the user spends gigabytes on it.

The header is read sequentially by :func:`specchat.models.gguf_header.read_header` from
a :class:`RangeReader`, a file-like object that fetches the file with HTTP range requests
in growing chunks (1 MiB doubling to 8 MiB): small headers cost one or two requests, big
ones few, and what is fetched past the header's end is at most one chunk.  Requests go
through huggingface_hub's own HTTP client (an ``httpx2.Client`` in huggingface_hub 2.x,
with its proxy settings and offline switch) and its headers (token, user agent); hub
errors become the same one-line DownloadError as downloads (:func:`hub.hub_error`).
"""

from __future__ import annotations

import httpx2
from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.utils import get_session, hf_raise_for_status

from .compatibility import PairCompatibility, TokenizerInfo, check_tokenizers
from .gguf_header import GGUFError, GGUFHeader, read_header
from .hub import HUB_ERRORS, DownloadError, HubFile, download_headers, hub_error

FIRST_CHUNK = 1 << 20
MAX_CHUNK = 8 << 20


class RangeReader:
    """Read-only, forward-only file-like view of a remote file, fetched lazily by byte ranges.

    ``read(n)`` returns up to ``n`` bytes, b"" at the end of the file.  Each time the buffer
    runs dry the next range is fetched; ranges grow from ``first_chunk`` doubling up to
    ``max_chunk``.  ``bytes_fetched`` counts the body bytes transferred so far, ``requests``
    the GETs.  ``size`` (from the HEAD) keeps ranges inside the file; without it the end
    shows as a short or 416 answer.  HTTP errors are raised as huggingface_hub's
    (``hf_raise_for_status``); :func:`read_remote_header` turns them into DownloadError.
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
    ) -> None:
        self.url, self.size = url, size
        self.headers = dict(headers or {})
        self.headers["Accept-Encoding"] = "identity"  # offsets must be offsets in the file
        self.client = client if client is not None else get_session()
        self.chunk, self.max_chunk = first_chunk, max_chunk
        self.bytes_fetched = 0
        self.requests = 0
        self._buf = b""
        self._next = 0  # offset of the first byte not fetched yet
        self._eof = False

    def read(self, n: int = -1) -> bytes:
        if not self._buf and not self._eof:
            self._fetch(max(self.chunk, n if n > 0 else 0))
            self.chunk = min(self.chunk * 2, self.max_chunk)
        if n < 0:
            n = len(self._buf)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _fetch(self, length: int) -> None:
        start = self._next
        end = start + length - 1
        if self.size is not None:
            if start >= self.size:
                self._eof = True
                return
            end = min(end, self.size - 1)
        headers = {**self.headers, "Range": f"bytes={start}-{end}"}
        # huggingface_hub's client has no default timeout; a stalled server must not hang the check
        with self.client.stream(
            "GET", self.url, headers=headers, follow_redirects=True, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
        ) as response:
            self.requests += 1
            if response.status_code == 416:  # range starts past the end
                self._eof = True
                return
            if response.status_code >= 400:
                response.read()  # so the error can quote the body
                hf_raise_for_status(response)
            if response.status_code != 206 and start > 0:
                raise DownloadError(f"{self.url}: the server ignores range requests; cannot read just the header")
            data = bytearray()
            for piece in response.iter_bytes():
                data += piece
                if len(data) >= end - start + 1:  # a 200 sends the whole file: stop at what was asked
                    break
        got = bytes(data[: end - start + 1])
        self.bytes_fetched += len(got)
        self._next += len(got)
        self._buf += got
        if len(got) < end - start + 1:
            self._eof = True


def read_remote_header(file: HubFile, *, token: str | None = None) -> tuple[GGUFHeader, int]:
    """Read the GGUF header of a file on the hub; return it and the body bytes transferred.

    Raises DownloadError for hub and network problems (gated, not found, offline) and
    GGUFError, naming the file, when the bytes are not a GGUF header.
    """
    url = hf_hub_url(file.repo_id, file.filename, revision=file.revision)
    try:
        meta = get_hf_file_metadata(url, token=token)
        headers = download_headers(url, meta.location, token)
        reader = RangeReader(meta.location, size=meta.size, headers=headers)
        header = read_header(reader)
    except GGUFError as exc:
        raise GGUFError(f"{file.filename}: {exc}") from None
    except HUB_ERRORS as exc:
        raise hub_error(exc, file) from None
    return header, reader.bytes_fetched


def check_remote_pair(
    target: HubFile, draft: HubFile, *, token: str | None = None
) -> tuple[PairCompatibility, int]:
    """Can ``draft`` serve ``target``?  Decided from the two remote headers; also returns bytes transferred."""
    target_header, target_bytes = read_remote_header(target, token=token)
    draft_header, draft_bytes = read_remote_header(draft, token=token)
    verdict = check_tokenizers(TokenizerInfo.from_header(target_header), TokenizerInfo.from_header(draft_header))
    return verdict, target_bytes + draft_bytes
