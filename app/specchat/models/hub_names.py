"""The forms hub names take, checked before any of them becomes part of a path or a URL.

A repo id, a file name in a repo, a revision and an ETag all come from outside (the
user's catalog, the command line, a hub's HTTP answer) and all end up as path
components in the hub cache (``models--owner--repo/blobs/<etag>``,
``snapshots/<commit>/<filename>``).  So each is checked against what the hub itself
allows and refused otherwise, with one line: a crafted ETag such as ``../../x`` or a
reference such as ``/etc/passwd`` never reaches the file system.
"""

from __future__ import annotations

import re

from specchat.errors import UserError

# huggingface_hub.utils.validate_repo_id's rule: letters, digits, '-', '_', '.', no '--' or '..',
# no leading or trailing '-' or '.', at most 96 characters per part
_REPO_PART = re.compile(r"(?!.*(?:--|\.\.))[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
# a path segment of a file in a repo: no '.' or '..', no control characters, no backslash
_FILE_SEGMENT = re.compile(r"[^/\\\x00-\x1f\x7f]{1,255}")
# a branch, tag or commit: git ref rules, kept strict (no '..', no leading '/' or '-')
_REVISION = re.compile(r"(?!.*\.\.)(?!-)[A-Za-z0-9._/-]{1,128}(?<!/)(?<!\.lock)")
# what the hub answers as X-Linked-Etag / ETag: a sha256 (LFS files) or a git sha1, maybe quoted
_ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class HubNameError(UserError, ValueError):
    """A name that is not of the form the hub uses; the message names it and the expected form."""


def _shown(text: str) -> str:
    return repr(text[:80] + ("…" if len(text) > 80 else ""))


def check_repo_id(repo_id: str) -> str:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_REPO_PART.fullmatch(p) for p in parts):
        raise HubNameError(f"{_shown(repo_id)} is not a hub repository (expected owner/name)")
    return repo_id


def check_filename(filename: str) -> str:
    segments = filename.split("/")
    if (not filename or len(filename) > 1024 or filename.startswith("/")
            or any(s in ("", ".", "..") or not _FILE_SEGMENT.fullmatch(s) for s in segments)):
        raise HubNameError(f"{_shown(filename)} is not a file name in a hub repository")
    return filename


def check_revision(revision: str) -> str:
    if not _REVISION.fullmatch(revision) or "//" in revision:
        raise HubNameError(f"{_shown(revision)} is not a branch, tag or commit name")
    return revision


def check_etag(etag: str) -> str:
    """An ETag as the hub sends it (quotes and a weak 'W/' prefix already stripped by huggingface_hub)."""
    if not _ETAG.fullmatch(etag):
        raise HubNameError(f"the hub answered an unexpected file id (ETag {_shown(etag)}); refusing to use it")
    return etag


def check_commit(commit: str) -> str:
    if not _COMMIT.fullmatch(commit):
        raise HubNameError(f"the hub answered an unexpected commit id {_shown(commit)}; refusing to use it")
    return commit
