"""``specchat serve``: the pair (or a server) behind a local OpenAI-compatible API, headless.

The main thread opens the backend and answers requests (:class:`~specchat.serve.lane.BackendLane`);
uvicorn runs on a thread of its own.  Ctrl-C or SIGTERM stops it: requests waiting in line are told,
the one answering is cancelled within a round, the models are freed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from specchat.cli.common import CliError


def add_parser(sub, config, add_model_args, menu_names) -> None:
    from specchat.serve.http import DEFAULT_PORT
    from specchat.serve.lane import WAITING

    p = sub.add_parser("serve", help="serve the pair on localhost with the OpenAI API (chat and completions)")
    add_model_args(p, config)
    p.add_argument("--mode", choices=menu_names, default=str(config["default_mode"]),
                   help=f"speculation for requests that do not choose (default {config['default_mode']}); a request "
                        "chooses with \"specchat\": {\"mode\": ...}, and names its task with \"task\" (code, edit, chat, "
                        "json, summary, creative or your own: auto on --server llama-server decides per task)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; another address lets other "
                        "machines in: set an API key)")
    p.add_argument("--api-key-env", metavar="VAR", default=None,
                   help="require 'Authorization: Bearer KEY', the key read from this environment variable")
    p.add_argument("--queue", type=int, default=WAITING, help=f"requests that may wait in line (default {WAITING})")
    p.add_argument("--server", metavar="NAME|URL", default=None,
                   help="answer on a server instead ('llama-server[:TYPE]': the pair in a llama-server SpecChat starts)")
    p.add_argument("--spec-type", metavar="TYPE", default=None, help="with --server llama-server: its --spec-type")


def _log_line(record) -> None:
    spec = ""
    if record.drafted:
        spec = f" · {record.mode} {record.accepted}/{record.drafted} accepted"
        if record.speedup:
            spec += f" · {record.speedup:.2f}x plain"
    elif record.mode:
        spec = f" · {record.mode}"
    what = (f"{record.tokens} tok · {record.tok_s:.1f} tok/s{spec} · {record.stop}" if record.status == 200
            else record.stop)
    print(f"[{record.number}] {record.status} {record.endpoint} {record.client} · {what}", file=sys.stderr, flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from specchat.cli.common import open_from_args, sampling_from_args
    from specchat.engine.settings import Mode
    from specchat.errors import UserError
    from specchat.serve.http import LOCAL_HOSTS, Api, ApiServer, listen
    from specchat.serve.lane import BackendLane

    key = ""
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "")
        if not key:
            raise CliError(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
    if not 1 <= args.queue <= 1024:
        raise CliError("--queue must be in [1, 1024]")
    if not 0 <= args.port <= 65535:
        raise CliError("--port must be in [0, 65535]")
    sampling = sampling_from_args(args)
    try:
        sock = listen(args.host, args.port)  # before the models load: a port in use is said at once
    except UserError as exc:
        raise CliError(str(exc)) from None
    try:
        backend = open_from_args(args, args.server or "")
    except BaseException:
        sock.close()
        raise
    stop = threading.Event()
    try:
        lane = BackendLane(backend, mode=Mode(args.mode), sampling=sampling, waiting=args.queue)
        api = Api(lane, api_key=key)
        api.traffic.listeners.append(_log_line)
        server = ApiServer(api, args.host, args.port, sock)
        server.start()
        card = lane.card()
        assert card is not None  # the lane is open until run() ends
        print(f"specchat: serving {card.id} at {server.url} (mode {args.mode}"
              f"{', API key required' if key else ''}); Ctrl-C stops", flush=True)
        if args.host not in LOCAL_HOSTS:
            print(f"specchat: warning: listening on {args.host}: other machines can reach it"
                  + ("" if key else ", with no API key"), file=sys.stderr, flush=True)
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            lane.run(stop)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            lane.close()
            server.stop()
    finally:
        backend.close()
    print("specchat: stopped", file=sys.stderr)
    return 0
