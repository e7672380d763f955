"""A stand-in for llama-server, for the fast tier of tests/remote/test_llama_server.py.

``--help`` prints lines copied from the real llama-server of llama-cpp-python 0.3.36's
vendored llama.cpp.  Otherwise it serves ``/health`` (503 while "loading", then 200
``{"status":"ok"}``), ``/props`` and ``/metrics`` on ``--host``/``--port``.  Told by
environment variables what to do:

- ``FAKE_LLAMA_STATE``: a directory; every run appends one JSON line (pid, port, argv,
  the api key file's contents) to ``runs.jsonl`` there;
- ``FAKE_LLAMA_LOAD_S``: seconds of 503 before 200 (default 0.3);
- ``FAKE_LLAMA_START_DELAY_S``: seconds before it does anything (a machine too loaded to start it at once);
- ``FAKE_LLAMA_READY_FILE``: a path; "loading" (503) until a file is there, for a test that must act
  while the model loads, whatever the machine's load;
- ``FAKE_LLAMA_SLOTS``: also serve ``/v1/models`` and ``/slots`` (whether it drafts), so that SpecChat's
  client probes it as a llama-server (it serves no answers);
- ``FAKE_LLAMA_FAIL``: a line to log before exiting 1 while "loading";
- ``FAKE_LLAMA_CRASHES``: the first N runs (counted in the state dir) crash
  ``FAKE_LLAMA_CRASH_AFTER_S`` (default 0.3) seconds after they are ready: exit 134 after a
  GGML_ASSERT line, or killed by ``FAKE_LLAMA_CRASH_SIGNAL`` (e.g. SIGILL) where that is set;
- ``FAKE_LLAMA_IGNORE_TERM``: ignore SIGTERM (only SIGKILL ends it);
- ``FAKE_LLAMA_OMIT``: comma-separated flags whose options the help leaves out.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HELP = """\
----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-t,    --threads N                      number of CPU threads to use during generation (default: -1)
                                        (env: LLAMA_ARG_THREADS)
-c,    --ctx-size N                     size of the prompt context (default: 0, 0 = loaded from model)
                                        (env: LLAMA_ARG_CTX_SIZE)
--rpc SERVERS                           comma-separated list of RPC servers (host:port)
                                        (env: LLAMA_ARG_RPC)
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM, either an exact number,
                                        'auto', or 'all' (default: auto)
                                        (env: LLAMA_ARG_N_GPU_LAYERS)
--repack, -nr, --no-repack              whether to enable weight repacking (default: enabled)
                                        (env: LLAMA_ARG_REPACK)
-m,    --model FNAME                    model path to load
                                        (env: LLAMA_ARG_MODEL)


----- speculative params -----

--spec-draft-n-max N                    number of tokens to draft for speculative decoding (default: 3)
                                        (env: LLAMA_ARG_SPEC_DRAFT_N_MAX)
--spec-draft-model, -md, --model-draft FNAME
                                        draft model for speculative decoding (default: unused)
                                        (env: LLAMA_ARG_SPEC_DRAFT_MODEL)
--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache
                                        comma-separated list of types of speculative decoding to use (default:
                                        none)
<40 spaces>
                                        (env: LLAMA_ARG_SPEC_TYPE)
--spec-ngram-mod-n-min N                minimum number of ngram tokens to use for ngram-based speculative
                                        decoding (default: 48)
--draft, --draft-n, --draft-max N       the argument has been removed. use --spec-draft-n-max or
                                        --spec-ngram-mod-n-max
                                        (env: LLAMA_ARG_DRAFT_MAX)


----- example-specific params -----

--host HOST                             IP addresses to listen on, comma-separated, or UNIX socket paths
                                        ending in .sock; with multiple TCP addresses, :: binds IPv6 only;
                                        overlapping addresses result in undefined behavior (default:
                                        127.0.0.1)
                                        (env: LLAMA_ARG_HOST)
--port PORT                             port to listen (default: 8080)
                                        (env: LLAMA_ARG_PORT)
--api-key KEY                           API key to use for authentication, multiple keys can be provided as a
                                        comma-separated list (default: none)
                                        (env: LLAMA_API_KEY)
--api-key-file FNAME                    path to file containing API keys, one per line; lines starting with a
                                        hash are treated as comments (default: none)
                                        (env: LLAMA_ARG_API_KEY_FILE)
--metrics                               enable prometheus compatible metrics endpoint (default: disabled)
                                        (env: LLAMA_ARG_ENDPOINT_METRICS)
--props                                 enable changing global properties via POST /props (default: disabled)
                                        (env: LLAMA_ARG_ENDPOINT_PROPS)
""".replace("<40 spaces>", " " * 40)  # the real help has that line; ruff would strip it from the source


def help_text(omit: set[str]) -> str:
    """HELP without the options (their spelling line and its continuation lines) naming a flag in ``omit``."""
    out, skipping = [], False
    for line in HELP.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            names = {w.strip(",") for w in line.split()}
            skipping = bool(names & omit)
        elif not line.startswith(" "):
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def arg(argv: list[str], *names: str, default: str = "") -> str:
    for i, a in enumerate(argv):
        if a in names and i + 1 < len(argv):
            return argv[i + 1]
    return default


def log(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    if "--help" in argv:
        omit = {f for f in os.environ.get("FAKE_LLAMA_OMIT", "").split(",") if f}
        sys.stdout.write(help_text(omit))
        return 0
    if os.environ.get("FAKE_LLAMA_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    host, port = arg(argv, "--host", default="127.0.0.1"), int(arg(argv, "--port", default="8080"))
    time.sleep(float(os.environ.get("FAKE_LLAMA_START_DELAY_S", "0")))  # a process slow to start (a loaded machine)
    state = Path(os.environ.get("FAKE_LLAMA_STATE", "."))
    runs = state / "runs.jsonl"
    run_number = (len(runs.read_text().splitlines()) if runs.exists() else 0) + 1
    key_file = arg(argv, "--api-key-file")
    with runs.open("a") as f:
        f.write(json.dumps({"pid": os.getpid(), "port": port, "argv": argv,
                            "key": Path(key_file).read_text() if key_file else None}) + "\n")
    load_s = float(os.environ.get("FAKE_LLAMA_LOAD_S", "0.3"))
    ready_at = time.monotonic() + load_s

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                held = os.environ.get("FAKE_LLAMA_READY_FILE")  # loading until this file exists
                loading = time.monotonic() < ready_at or bool(held and not Path(held).exists())
                code, body = (503, {"error": {"code": 503, "message": "Loading model"}}) if loading \
                    else (200, {"status": "ok"})
            elif self.path == "/v1/models" and os.environ.get("FAKE_LLAMA_SLOTS"):
                code, body = 200, {"object": "list", "data": [{"id": Path(arg(argv, "-m")).name, "object": "model",
                                                               "owned_by": "llamacpp"}]}
            elif self.path == "/slots" and os.environ.get("FAKE_LLAMA_SLOTS"):  # what a drafting server says
                spec_type = arg(argv, "--spec-type")
                drafting = spec_type not in ("", "none") or bool(arg(argv, "-md", "--model-draft", "--spec-draft-model"))
                code, body = 200, [{"id": 0, "speculative": drafting,
                                    "params": {"speculative.n_max": 16, "speculative.types": [spec_type or "none"]}}]
            elif self.path == "/props":
                code, body = 200, {"model_path": arg(argv, "-m"), "total_slots": 1,
                                   "default_generation_settings": {"n_ctx": int(arg(argv, "-c", default="0"))}}
            else:
                code, body = 404, {"error": {"code": 404, "message": "File Not Found"}}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    log("build: 1 (fake) with GNU 12.2.0 for x86_64-linux-gnu")
    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError:
        log(f"srv    start: couldn't bind HTTP server socket, hostname: {host}, port: {port}")
        log("srv    main: exiting due to HTTP server error")
        return 1
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"main: server is listening on http://{host}:{port} - starting the main loop")
    log(f"srv  load_model: loading model '{arg(argv, '-m')}'")
    fail = os.environ.get("FAKE_LLAMA_FAIL")
    if fail:
        time.sleep(min(load_s, 0.2))
        log(fail)
        log("srv    load_model: failed to load model, '" + arg(argv, "-m") + "'")
        log("srv   operator(): operator(): cleaning up before exit...")
        log("main: exiting due to model loading error")
        return 1
    time.sleep(load_s)
    log("main: model loaded")
    crashes = int(os.environ.get("FAKE_LLAMA_CRASHES", "0"))
    if run_number <= crashes:
        time.sleep(float(os.environ.get("FAKE_LLAMA_CRASH_AFTER_S", "0.3")))
        sig = os.environ.get("FAKE_LLAMA_CRASH_SIGNAL")
        if sig:  # a native fault: the process dies from the signal itself, with no word
            signal.signal(getattr(signal, sig), signal.SIG_DFL)
            os.kill(os.getpid(), getattr(signal, sig))
        log("/src/ggml/src/ggml.c:1234: GGML_ASSERT(ctx->mem_buffer != NULL) failed")
        os._exit(134)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
