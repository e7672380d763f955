"""A hostile server on 127.0.0.1 (raw sockets: header-level hostility too), one mode per defect class.

GETs answer as a plain OpenAI-compatible server (``/v1/models``) unless the mode is about them;
``POST /v1/chat/completions`` misbehaves as ``mode`` says:

* ``no_headers``: never answers; ``trickle_headers``: a header byte every 0.5 s, for ever;
* ``endless_line``: one good chunk, then one ``data:`` line that never ends;
* ``huge_counts``: llama-server chunks whose running ``timings.predicted_n`` claims 10^7 tokens;
* ``huge_error``: HTTP 401 with a body of 4 GB (sent until the client leaves);
* ``past_max_tokens``: content chunks for ever, never a finish;
* ``deep_json`` (GET ``/v1/models``): 100,000 nested arrays;  ``slow_models``: its body a byte every 0.5 s.

``requested`` is set once the chat request arrived; ``gone`` once the client hung up.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "system"}]}).encode()
LLAMA_HEALTH = b'{"status": "ok"}'


def _chunk(content: str, **extra: object) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}], **extra}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


class HostileServer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requested = threading.Event()
        self.gone = threading.Event()
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True, name="hostile-server")
        self._thread.start()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head = data.split(b"\r\n", 1)[0].decode()
            method, path = head.split()[:2]
            if method == "GET":
                self._get(conn, path)
            else:
                self.requested.set()
                self._post(conn)

    def _send(self, conn: socket.socket, status: str, body: bytes, ctype: str = "application/json") -> None:
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + body)

    def _get(self, conn: socket.socket, path: str) -> None:
        if path == "/v1/models" and self.mode == "deep_json":
            self._send(conn, "200 OK", b"[" * 100_000 + b"]" * 100_000)
        elif path == "/v1/models" and self.mode == "slow_models":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            self._drip(conn, b"[")
        elif path == "/v1/models":
            self._send(conn, "200 OK", MODELS)
        elif path == "/health" and self.mode == "huge_counts":
            self._send(conn, "200 OK", LLAMA_HEALTH)
        else:
            self._send(conn, "404 Not Found", b'{"detail": "Not Found"}')

    def _drip(self, conn: socket.socket, byte: bytes) -> None:
        while not self._stop.wait(0.5):
            conn.sendall(byte)

    def _stream_head(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")

    def _post(self, conn: socket.socket) -> None:
        try:
            if self.mode == "no_headers":
                while not self._stop.wait(0.05) and conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b"":
                    pass
            elif self.mode == "trickle_headers":
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                self._drip(conn, b"a")
            elif self.mode == "endless_line":
                self._stream_head(conn)
                conn.sendall(_chunk("kept") + b"data: ")
                self._flood(conn, b"a" * 65536)
            elif self.mode == "huge_counts":
                self._stream_head(conn)
                conn.sendall(_chunk("kept", timings={"predicted_n": 1, "predicted_ms": 1.0}))
                conn.sendall(_chunk("x", timings={"predicted_n": 10**7, "predicted_ms": 2.0}))
                self._flood(conn, b": ping\n\n")
            elif self.mode == "huge_error":
                conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/html\r\n"
                             b"Content-Length: 4000000000\r\n\r\n<html>no key</html>")
                self._flood(conn, b"x" * 65536)
            elif self.mode == "past_max_tokens":
                self._stream_head(conn)
                self._flood(conn, _chunk("word "))
        except OSError:
            self.gone.set()

    def _flood(self, conn: socket.socket, piece: bytes) -> None:
        end = time.monotonic() + 60
        while not self._stop.is_set() and time.monotonic() < end:
            conn.sendall(piece)


def ask_chat(url: str, *extra: str) -> list[str]:
    """The ``specchat chat --server URL`` command line (for a child process)."""
    return ["chat", "--server", url, *extra, "hi"]
