"""What the hub answers is read within bounds: an error page nested thousands of levels deep is one line,
``models files --fit`` reads a bounded number of headers, and a hub's strings reach the terminal printable."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import pytest
from huggingface_hub.errors import HfHubHTTPError
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.hub_server import HubServer, point_huggingface_hub_at, write_small_gguf
from specchat.cli import commands as cli
from specchat.models.hub import ERROR_BODY_MAX, DownloadError, HubFile, raise_hub_error
from specchat.models.hub_search import list_gguf_files, repo_error, search_repos
from specchat.models.remote import read_remote_header
from specchat.profile import Profile

DEEP_ARRAY = b"[" * 30_000 + b"]" * 30_000  # 60 kB: under the 64 KiB an error body is read to
DEEP_OBJECT = b'{"error":' * 900 + b'"x"' + b"}" * 900  # under json's recursion limit: parses, then repr recurses


class _Answer500(BaseHTTPRequestHandler):
    body = DEEP_ARRAY

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, with_body: bool) -> None:
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if with_body:
            self.wfile.write(self.body)

    def do_GET(self) -> None:
        self._send(True)

    def do_HEAD(self) -> None:
        self._send(False)


@contextlib.contextmanager
def hub_answering_500(body: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    handler = type("H", (_Answer500,), {"body": body})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    (tmp_path / "hf").mkdir(exist_ok=True)
    point_huggingface_hub_at(url, tmp_path / "hf", monkeypatch)
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def one_line_error(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 500, text
    return text


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT], ids=["array", "object"])
def test_a_hub_error_page_nested_deep_is_one_line_for_search_files_and_header_reads(body, tmp_path, monkeypatch):
    with hub_answering_500(body, tmp_path, monkeypatch):
        with pytest.raises(DownloadError) as searched:
            search_repos("qwen")
        assert "HTTP 500" in one_line_error(searched)
        with pytest.raises(DownloadError) as listed:
            list_gguf_files("owner/repo")
        assert "HTTP 500" in one_line_error(listed)
        with pytest.raises(DownloadError) as header:
            read_remote_header(HubFile("owner/repo", "m.gguf"))
        one_line_error(header)


def test_the_command_line_says_the_hubs_500_in_one_line_not_an_internal_error(tmp_path, monkeypatch, capsys):
    with hub_answering_500(DEEP_ARRAY, tmp_path, monkeypatch):
        rc = cli.main(["models", "search", "qwen"], profile=Profile.at(tmp_path / "p"))
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1 and "internal error" not in err[0] and "HTTP 500" in err[0], err


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))


def nested(depth: int, kind: str) -> bytes:
    opening, closing = ({"a": (b"[", b"]"), "o": (b'{"error":', b"}"), "m": (b'{"error":[', b"]}")}[kind])
    return opening * depth + b"1" + closing * depth


BODIES = st.one_of(
    st.binary(max_size=256),
    st.builds(nested, st.integers(0, 40_000), st.sampled_from("aom")),
    st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                          max_size=3)
                 ).map(lambda d: json.dumps({"error": d}).encode()),
    st.sampled_from([b"NaN", b'{"error": NaN}', b'{"error": 1e999}', b"\xff\xfe", b'{"error":' + b"\x00" * 10]))


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(status=st.integers(400, 599), body=BODIES, code=st.sampled_from([None, "RepoNotFound", "GatedRepo",
                                                                           "EntryNotFound", "RevisionNotFound"]))
def test_any_error_answer_becomes_the_hubs_error_and_then_one_line(status, body, code):
    """The one reader of a hub error's body, fed hostile bodies: huggingface_hub's own error type comes
    out (never RecursionError), and the caller's wording of it is one line."""
    headers = {"Content-Type": "application/json"} | ({"X-Error-Code": code} if code else {})
    response = httpx2.Response(status, headers=headers, content=b"",
                               request=httpx2.Request("GET", "https://hub.example/api/models/o/r"))
    with pytest.raises(HfHubHTTPError) as raised:
        raise_hub_error(response, body[:ERROR_BODY_MAX])
    said = str(repo_error(raised.value, "o/r", "main", "the files of o/r"))
    assert "\n" not in said and len(said) < 500


# -- models files --fit: a bounded number of header reads ------------------------------------------

MANY = "many/Quants-GGUF"


@pytest.fixture
def many_files_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    served = tmp_path / "served"
    served.mkdir()
    one = write_small_gguf(served / "one.gguf")
    server = HubServer()
    for i in range(30):
        server.add_file(MANY, f"Model-{i:02d}-Q4_K_M.gguf", one)
    server.add_file(MANY, "old\x1b]0;pwned\x07.gguf.part1of2", one)  # an old-style split: named in a note
    server.set_repo(MANY)
    (tmp_path / "hf").mkdir()
    with server:
        point_huggingface_hub_at(server.url, tmp_path / "hf", monkeypatch)
        yield server


def files_command(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["models", "files", MANY, *argv], profile=Profile.at(tmp_path / "p"))
    return rc, out.getvalue(), err.getvalue()


def headers_read(server: HubServer) -> set[str]:
    return {r.filename for r in server.requests if r.method == "GET"}


def test_files_fit_reads_at_most_the_checks_it_is_given_and_says_which_were_not(many_files_hub, tmp_path):
    rc, out, err = files_command(tmp_path, "--fit", "--json")
    assert rc == 0, err
    entries = json.loads(out)["entries"]
    assert len(entries) == 30 and len(headers_read(many_files_hub)) == 12  # the default, not one per entry
    checked = [e for e in entries if not e["fit"].startswith("not checked")]
    assert [e["name"] for e in checked] == [e["name"] for e in entries[:12]]

    many_files_hub.requests.clear()
    rc, out, err = files_command(tmp_path, "--fit", "--checks", "3")
    assert rc == 0 and len(headers_read(many_files_hub)) == 3
    assert "note: --fit read the headers of the first 3 of 30 models; --checks N reads more" in out


def test_files_prints_a_hubs_file_name_without_its_terminal_escapes(many_files_hub, tmp_path):
    rc, out, _ = files_command(tmp_path)
    assert rc == 0 and "\x1b" not in out and "\x07" not in out
    assert "old\\x1b]0;pwned\\x07.gguf.part1of2" in out  # shown, escaped: the user sees what the hub sent
