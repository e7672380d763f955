"""The command line for servers: ``specchat servers add|list|check|remove|build``, ``chat --server``
and ``bench --server URL [--baseline-server URL2]``.

A server is given by the name the user saved it under or by its URL.  Every failure is one
line (a ServerError) and exit 2, as for bad files.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from specchat.errors import printable
from specchat.remote.errors import ServerError
from specchat.remote.llama_server import MANAGED
from specchat.remote.servers import Keychain, ServerConfig, ServerList, servers_file


def add_parsers(sub: argparse._SubParsersAction) -> None:
    servers = sub.add_parser("servers", help="inference servers (llama-server, vLLM, SGLang) to chat with")
    ssub = servers.add_subparsers(dest="servers_command", required=True)
    add = ssub.add_parser("add", help="save a server under a name (replaces one of that name)")
    add.add_argument("name")
    add.add_argument("url", help="base URL, e.g. http://gpu-box:8080")
    add.add_argument("--model", default="", help="the model id to ask for (default: the first it serves)")
    add.add_argument("--no-verify-tls", action="store_true", help="accept any TLS certificate (a LAN box)")
    add.add_argument("--ca-file", default="", help="a CA bundle that signed the server's certificate")
    add.add_argument("--dcgm-url", default="", help="the box's dcgm-exporter /metrics URL, for its GPU memory")
    add.add_argument("--api-key-stdin", action="store_true",
                     help="read the API key from stdin and keep it in the OS keychain")
    lst = ssub.add_parser("list", help="the saved servers")
    lst.add_argument("--json", action="store_true")
    check = ssub.add_parser("check", help="connect and say what the server is and what it reports")
    check.add_argument("server", help="a saved name or a URL")
    check.add_argument("--json", action="store_true")
    rm = ssub.add_parser("remove", help="forget a server (and its key)")
    rm.add_argument("name")
    build = ssub.add_parser("build", help="build llama-server from the llama.cpp that llama-cpp-python vendors")
    accel = build.add_mutually_exclusive_group()
    for name in ("cuda", "metal", "vulkan"):
        accel.add_argument(f"--{name}", dest="accel", action="store_const", const=name)
    build.add_argument("--sdist", type=Path, default=None, help="a llama-cpp-python sdist (default: download it)")


def cmd_servers(args: argparse.Namespace) -> int:
    servers = ServerList(servers_file(args.profile))
    keys = Keychain()
    command = args.servers_command
    if command == "add":
        server = ServerConfig(name=args.name, url=args.url, verify_tls=not args.no_verify_tls,
                              ca_file=args.ca_file, model=args.model, dcgm_url=args.dcgm_url)
        if args.api_key_stdin:
            keys.set(server.name, sys.stdin.readline().strip())
        servers.put(server)
        print(f"saved server {server.name} ({server.url})" + (", its key in the OS keychain" if args.api_key_stdin
                                                             else ""))
        return 0
    if command == "list":
        listed = servers.all()
        if args.json:
            print(json.dumps([s.to_json() for s in listed], indent=1))
        elif not listed:
            print("no servers yet: 'specchat servers add NAME URL'")
        for s in listed if not args.json else ():
            extra = [x for x in (s.model and f"model {s.model}", not s.verify_tls and "TLS not verified",
                                 s.dcgm_url and "GPU exporter") if x]
            print(f"{s.name:<20} {s.url}" + (f"  ({printable(', '.join(extra))})" if extra else ""))
        return 0
    if command == "check":
        return _check(servers.resolve(args.server), keys, as_json=args.json)
    if command == "remove":
        found = servers.remove(args.name)
        keys.delete(args.name)
        print(f"removed server {args.name}" if found else f"no server named {args.name}")
        return 0 if found else 2
    if command == "build":
        from specchat.remote.build import build_llama_server, default_build_root

        binary = build_llama_server(default_build_root(), accel=args.accel or "cpu", sdist=args.sdist,
                                    log=lambda line: print(line, file=sys.stderr, flush=True))
        converter = Path(binary).parent.parent / "src" / "convert_hf_to_gguf.py"
        if converter.is_file():  # the same llama.cpp's converter: EAGLE-3 heads are published as weights
            print(f"its GGUF converter (EAGLE-3, DFlash heads): {converter}", file=sys.stderr)
        print(binary)
        return 0
    raise ServerError(f"unknown servers command {command!r}")


def _check(server: ServerConfig, keys: Keychain, *, as_json: bool) -> int:
    from specchat.remote.client import ServerClient

    with ServerClient(server, keys.get(server.name)) as client:
        caps = client.probe()
    if as_json:
        doc = {k: getattr(caps, k) for k in ("engine", "models", "model", "n_ctx", "speculative", "speculation",
                                             "n_max", "metrics", "vram", "build", "notes")}
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{server.name}: {printable(caps.describe())}")
    print(f"  live rounds: {'rebuilt from the stream' if caps.per_round else 'no'}; server counters: "
          f"{'yes' if caps.metrics else 'no'}; GPU memory: {'yes' if caps.vram else 'no'}")
    for note in caps.notes:
        print(f"  note: {printable(note)}")
    return 0


def server_events(backend, args: argparse.Namespace, messages: list[dict[str, str]], *, fresh: bool = False):
    """One answer of a server contender of the bench: the server as it was started.  A managed llama-server
    with a drafter is asked for its drafter (the draft mode), so that ``auto`` does not turn it off for a
    task it measured slower (backends/server_auto.py): the row measures the drafter in every answer."""
    from specchat.engine.answer import AnswerRequest
    from specchat.engine.pair import CancelToken
    from specchat.engine.settings import Mode

    reasoning = None if getattr(args, "reasoning", None) is None else args.reasoning == "on"
    mode = Mode.DRAFT if getattr(backend, "auto", None) is not None else Mode.AUTO
    request = AnswerRequest(messages=tuple(messages), mode=mode, sampling=args.sampling, max_tokens=args.max_tokens,
                            reasoning=reasoning, stop=tuple(getattr(args, "stop", ()) or ()), fresh_prompt=fresh)
    return backend.answer(request, CancelToken())


def server_labels(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(label, NAME|URL) of every ``--server`` (server, server-2, ...; ``llama-server:TYPE`` as itself) and
    ``--baseline-server`` (server-plain)."""
    servers = args.server or []
    if isinstance(servers, str):
        servers = [servers]
    out = [(s if s.startswith(MANAGED) else "server" if i == 0 else f"server-{i + 1}", s)
           for i, s in enumerate(servers)]  # a llama-server SpecChat starts is named by its drafter
    return out + ([("server-plain", args.baseline_server)] if args.baseline_server else [])


def bench_servers(args: argparse.Namespace, prompts, local_contenders, print_table) -> list:
    """The server contenders (``--server``, and ``--baseline-server`` as its plain reference) after the
    local ones, in one interleaved run."""
    from specchat.cli.common import open_from_args
    from specchat.harness.bench import run_contenders

    contenders = list(local_contenders)
    backends = []
    try:
        for label, flag in server_labels(args):
            if flag:
                backend = open_from_args(args, flag)
                backends.append(backend)
                print(f"{label}: {printable(backend.info.server.summary if backend.info.server else backend.info.backend)}",
                      flush=True)

                def run(prompt, backend=backend):
                    return server_events(backend, args, list(prompt.messages), fresh=True)
                contenders.append((label, run))

        def progress(run) -> None:
            acc = "" if run.token_acceptance is None else f", {run.token_acceptance:.0%} accepted"
            print(f"  {run.prompt_id:<16} {run.mode:<12} #{run.repeat}: {run.tokens} tok, "
                  f"{run.decode_tok_s:.1f} tok/s{acc}", file=sys.stderr, flush=True)

        return run_contenders(contenders, prompts, repeat=args.repeat, progress=progress)
    finally:
        for b in backends:
            b.close()


def bench_with_servers(args: argparse.Namespace, prompts, modes, sampling) -> int:
    """Servers in the bench: alone (``--server`` [``--baseline-server``]), or after this machine's engine
    in the given modes when a model is named (``--target``/``--pair``): one interleaved run, one table."""
    from contextlib import nullcontext

    from specchat.cli.common import CliError
    from specchat.cli.common import load_pair_from_args as _load_pair
    from specchat.cli.common import models_from_args as _models
    from specchat.engine.settings import Mode
    from specchat.harness.bench import format_table, local_runner, memory_line, summarize

    args.sampling = sampling
    local = bool(args.target or args.pair)
    if local and Mode.DRAFT in modes and _models(args)[1] is None:
        raise CliError("mode 'draft' needs a draft model: --draft FILE, or a pair with one")
    pair = _load_pair(args) if local else None
    with pair if pair is not None else nullcontext():
        contenders = [(m.value, local_runner(pair, m, max_tokens=args.max_tokens, sampling=sampling,
                                             first_sight=args.first_sight))
                      for m in modes] if pair is not None else []
        if pair is not None:
            print(f"local: target {args.target.name}" + (f", draft {args.draft.name}" if args.draft else "")
                  + f"; threads {pair.target.n_threads}, ctx {pair.target.n_ctx}", flush=True)
            print(memory_line(modes, args.first_sight, servers=True), flush=True)
        runs = bench_servers(args, prompts, contenders, format_table)
    labels = [label for label in [m.value for m in modes] if local] + \
        [label for label, _ in server_labels(args)]
    base = Mode.BASELINE.value if local and Mode.BASELINE in modes else "server-plain"
    rows = summarize(runs, labels, base=base)
    print(f"temp {sampling.temperature}, max tokens {args.max_tokens}, repeat {args.repeat}; x plain against "
          f"{'this machine' if base == Mode.BASELINE.value else 'the baseline server'}'s plain decoding")
    print(format_table(rows))
    if args.json:
        doc = {"server": (args.server or [None])[0], "servers": dict(server_labels(args)),
               "baseline_server": args.baseline_server,
               "target": args.target.name if local else None,
               "draft": args.draft.name if local and args.draft else None,
               "temp": sampling.temperature, "max_tokens": args.max_tokens, "repeat": args.repeat,
               "first_sight": args.first_sight, "base": base, "summary": [asdict(r) for r in rows], "runs": [r.to_json() for r in runs]}
        args.json.write_text(json.dumps(doc, indent=1))
    return 0
