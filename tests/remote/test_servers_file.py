"""The user's servers: a URL is checked by the client's own parser, servers.json is read whole (never
cut at its cap on the next write), and what a server says about itself is printed printable."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.fake_openai_server import FakeServer, Script
from specchat.cli import commands as cli
from specchat.profile import Profile
from specchat.remote.errors import ServerError
from specchat.remote.servers import MAX_SERVERS, ServerConfig, ServerList, check_url, servers_file


def command(profile: Path, *argv: str) -> tuple[int, str, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv), profile=Profile.at(profile))
    return rc, out.getvalue(), err.getvalue().splitlines()


# -- URLs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]x", "http://[v1.x]/", "http://[zz]:80", "https://a]b"])
def test_a_broken_ipv6_url_is_one_line_everywhere_a_url_is_given(url, tmp_path):
    with pytest.raises(ServerError, match="not a URL"):
        check_url(url)
    for argv in (["servers", "add", "box", url], ["servers", "check", url], ["chat", "--server", url, "hi"]):
        rc, _, err = command(tmp_path, *argv)
        assert rc == 2 and len(err) == 1 and "internal error" not in err[0] and "not a URL" in err[0], (argv, err)


def test_an_ipv6_url_with_its_brackets_is_a_url():
    assert check_url("http://[::1]:8080/v1/") == "http://[::1]:8080"


URLISH = st.one_of(
    st.text(max_size=40),
    st.builds(lambda scheme, host, rest: f"{scheme}://{host}{rest}", st.sampled_from(["http", "https", "ftp", ""]),
              st.one_of(st.text(max_size=12), st.sampled_from(["[::1", "[::1]", "::1]", "[", "]", "[v1.x]", "a:b:c",
                                                               "%5B::1%5D", "[::1%25eth0]", "h\x00st", "ä.com"])),
              st.one_of(st.text(max_size=12), st.sampled_from([":", ":0", ":65536", ":-1", ":+80", ":８０", "/v1",
                                                               "?q", "#f", "@x"]))))


@settings(max_examples=400, derandomize=True, database=None)
@given(url=URLISH)
def test_any_text_is_a_url_the_client_takes_or_one_server_error(url):
    try:
        base = check_url(url)
    except ServerError as exc:
        assert "\n" not in str(exc)
        return
    parsed = httpx2.URL(base)  # what the client will do with it must not raise
    assert parsed.scheme in ("http", "https") and parsed.host


# -- servers.json past its cap ---------------------------------------------------------------------

def write_servers(path: Path, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"version": 1, "servers": [{"name": f"box{i:03d}", "url": f"http://10.0.{i // 250}.{i % 250}:8080"}
                                     for i in range(n)]}
    path.write_text(json.dumps(doc))


def test_a_list_past_the_cap_is_read_whole_and_kept_whole_by_the_next_write(tmp_path):
    path = servers_file(Profile.at(tmp_path))
    write_servers(path, MAX_SERVERS + 50)
    servers = ServerList(path)
    assert len(servers.all()) == MAX_SERVERS + 50

    assert servers.remove("box007")
    assert len(servers.all()) == MAX_SERVERS + 49  # not cut to the cap on the way
    servers.put(ServerConfig("box008", "http://elsewhere:9000"))  # replacing one is fine
    assert len(servers.all()) == MAX_SERVERS + 49 and servers.get("box008").url == "http://elsewhere:9000"

    rc, _, err = command(tmp_path, "servers", "add", "another", "http://10.9.9.9:8080")
    assert rc == 2 and len(err) == 1 and f"at most {MAX_SERVERS}" in err[0] and "another is not added" in err[0]
    assert len(servers.all()) == MAX_SERVERS + 49 and "another" not in {s.name for s in servers.all()}


def test_the_list_takes_servers_up_to_the_cap_then_refuses(tmp_path):
    path = servers_file(Profile.at(tmp_path))
    write_servers(path, MAX_SERVERS - 1)
    servers = ServerList(path)
    servers.put(ServerConfig("last", "http://10.9.9.9:8080"))
    with pytest.raises(ServerError, match=f"at most {MAX_SERVERS}"):
        servers.put(ServerConfig("one-more", "http://10.9.9.8:8080"))
    assert len(servers.all()) == MAX_SERVERS


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)
ENTRIES = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries({"name": st.one_of(st.text(max_size=10), JSON_VALUES),
                           "url": st.one_of(URLISH, JSON_VALUES)},
                          optional={"verify_tls": JSON_VALUES, "model": JSON_VALUES, "ca_file": JSON_VALUES,
                                    "dcgm_url": st.one_of(URLISH, JSON_VALUES)}))


def server_files() -> st.SearchStrategy[bytes]:
    docs = st.fixed_dictionaries({"version": st.one_of(st.just(1), JSON_VALUES),
                                  "servers": st.one_of(st.lists(ENTRIES, max_size=4), JSON_VALUES)})
    deep = st.integers(0, 5000).map(lambda d: b'{"version": 1, "servers": ' + b"[" * d + b"]" * d + b"}")
    return st.one_of(docs.map(lambda d: json.dumps(d).encode()), deep, st.binary(max_size=64),
                     st.sampled_from([b"NaN", b'{"version": NaN, "servers": []}', b"\xff", b""]))


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(raw=server_files())
def test_any_servers_file_is_read_or_refused_with_one_server_error(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("s") / "servers.json"
    path.write_bytes(raw)
    try:
        listed = ServerList(path).all()
    except ServerError as exc:
        assert "\n" not in str(exc)
        return
    for s in listed:
        assert isinstance(s.verify_tls, bool) and isinstance(s.model, str)
        assert httpx2.URL(s.url).host and not (isinstance(s.model, float) and math.isnan(s.model))


# -- what a server says, printed ----------------------------------------------------------------------

EVIL = "qwen\x1b]0;pwned\x07\x1b[2J\u202eevil"


def test_a_servers_model_id_with_terminal_escapes_is_printed_escaped(tmp_path):
    with FakeServer("openai", Script(model=EVIL)) as server:
        rc, out, err = command(tmp_path, "servers", "check", server.url)
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "qwen\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil" in out  # shown, so the user sees what it sent

    path = servers_file(Profile.at(tmp_path))  # a hand-edited list
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "servers": [{"name": "box", "url": "http://box:1", "model": EVIL}]}))
    rc, out, _ = command(tmp_path, "servers", "list")
    assert rc == 0 and "\x1b" not in out and "model qwen\\x1b]0;pwned" in out


def test_two_servers_with_one_name_are_both_kept_and_the_user_told(tmp_path):
    from specchat.errors import collect_warnings

    path = servers_file(Profile.at(tmp_path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "servers": [
        {"name": "box", "url": "http://first:8080"}, {"name": "box", "url": "http://second:8080"},
        {"name": "box-2", "url": "http://third:8080"}]}))
    servers = ServerList(path)
    with collect_warnings() as seen:
        listed = {s.name: s.url for s in servers.all()}
    assert listed == {"box": "http://first:8080", "box-3": "http://second:8080", "box-2": "http://third:8080"}
    assert len(seen) == 1 and "two servers are named 'box'" in seen[0] and "'box-3'" in seen[0]

    servers.put(ServerConfig("other", "http://other:1"))  # the next write keeps all of them, renamed once
    with collect_warnings() as seen:
        assert {s.name for s in servers.all()} == {"box", "box-2", "box-3", "other"}
    assert seen == []
