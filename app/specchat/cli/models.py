"""``specchat models ...``: the model manager on the command line.

Exit codes (docs/ARCHITECTURE.md): 0 fine, 2 bad input (a missing, truncated or non-GGUF
file, a bad reference, a failed download), 3 an incompatible pair.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specchat.cli.common import EXIT_INCOMPATIBLE, CliError
from specchat.errors import UserError, printable
from specchat.models.catalog import (
    CatalogError,
    CatalogModel,
    add_user_pair,
    find_pair,
    load_catalog,
    load_catalog_lenient,
)
from specchat.models.fit import GIB, estimate_files, fit_pair, free_memory
from specchat.models.gguf_header import GGUFError, validate_file
from specchat.models.registry import Registry


def _is_local(ref: str) -> bool:
    """A path on this machine, unless it has the hub's form (owner/repo/file.gguf) and no such path exists."""
    return Path(ref).exists() or ref.startswith((".", "/", "~")) or not (ref.endswith(".gguf") and ref.count("/") >= 2)


def _gb(n: int | None) -> str:
    return "?" if not n else f"{n / 1e9:.1f} GB"


def _header_cap(args: argparse.Namespace) -> int:
    """The remote_header_cap_mib setting, in bytes (the most one remote header check may read)."""
    from specchat.config import as_int

    return as_int(args.config["remote_header_cap_mib"]) << 20


def cmd_list(args: argparse.Namespace) -> int:
    # a damaged user catalog must not hide the shipped pairs: one warning line per problem
    pairs, problems = load_catalog_lenient(args.profile.user_catalog)
    for problem in problems:
        print(f"specchat: warning: {problem} (skipped)", file=sys.stderr)
    installed = Registry(args.profile.registry).models()
    have = {m.source for m in installed if m.source and m.is_current()}

    def downloaded(p) -> bool:
        return p.target.ref in have and (not p.drafts or any(d.ref in have for d in p.drafts))

    if args.json:
        print(json.dumps({
            "pairs": [{"id": p.id, "name": p.name, "target": p.target.ref, "drafts": [d.ref for d in p.drafts],
                       "size": p.size, "licence": p.licence, "gated": p.gated, "task": p.task, "user": p.user,
                       "spec_type": p.spec_type, "hardware": p.hardware, "published": p.published,
                       "downloaded": downloaded(p)}
                      for p in pairs],
            "installed": [asdict(m) | {"current": m.is_current()} for m in installed],
        }, indent=1))
        return 0
    print("Catalog (specchat models pull ID; then specchat chat --pair ID):")
    for p in pairs:
        mark = (" [yours]" if p.user else "") + (" [downloaded]" if downloaded(p) else "")
        print(f"  {p.id:<20} {_gb(p.size):>8}  {p.name}{mark}")
        if p.gated:
            print(f"  {'':<20} {'':>8}  note: {p.gated}")
        if p.trained_head:
            print(f"  {'':<20} {'':>8}  trained head: runs in llama-server (--spec-type {p.spec_type})")
    print("\nInstalled:" if installed else "\nInstalled: none yet")
    for m in installed:
        state = "" if m.is_current() else "  (changed or missing on disk)"
        print(f"  {m.name:<40} {_gb(m.size):>8}  {m.path}{state}")
    return 0


def _progress_printer():
    last = [0.0]

    def show(p) -> None:
        now = time.monotonic()
        if now - last[0] < 0.5 and p.done_bytes < p.total_bytes:
            return
        last[0] = now
        eta = "" if p.eta_s is None else f", {p.eta_s:.0f} s left"
        pct = p.done_bytes / p.total_bytes if p.total_bytes else 0
        if p.stage == "verifying":
            print(f"\r  {p.filename} ({p.file_index + 1}/{p.file_count}): verifying, "
                  f"{_gb(p.verified_bytes)} checked    ", end="", file=sys.stderr, flush=True)
            return
        print(f"\r  {p.filename} ({p.file_index + 1}/{p.file_count}): {pct:.0%} of {_gb(p.total_bytes)} "
              f"at {p.rate_bytes_s / 1e6:.1f} MB/s{eta}    ", end="", file=sys.stderr, flush=True)

    return show


def _pull_files(args: argparse.Namespace) -> list[CatalogModel]:
    """What 'pull' fetches: a hub reference (never a local path) or a catalog pair's files."""
    try:
        if args.pair.endswith(".gguf"):
            return [CatalogModel.parse(args.pair)]  # refuses absolute paths, '..', '~', backslashes
        pair = find_pair(args.pair, load_catalog(args.profile.user_catalog))
    except CatalogError as exc:
        raise CliError(str(exc)) from None
    if pair.drafts and not 0 <= args.draft_index < len(pair.drafts):
        raise CliError(f"{pair.id} has {len(pair.drafts)} draft(s); --draft-index out of range")
    return list(pair.files(args.draft_index))


def _validated(ref: str, path: Path) -> None:
    """A pulled file must be a whole GGUF model; the refusal names it as the user does (repo/file)."""
    try:
        validate_file(path)
    except GGUFError as exc:
        reason = str(exc).removeprefix(f"{path.name}: ").removeprefix(f"{path}: ")
        raise CliError(f"{ref}: {reason} (downloaded to {path}; it is not a model SpecChat can load)") from None


def cmd_pull(args: argparse.Namespace) -> int:
    from specchat.models.hub import DownloadError, download_files
    from specchat.models.hub_search import entry_of
    from specchat.models.remote import check_remote_pair

    files = _pull_files(args)
    registry = Registry(args.profile.registry)  # a damaged registry stops us before the download
    try:
        # a split model is all its parts (asked from the hub's file list); llama.cpp is given the first
        models = [entry_of(f.hub_file()).files for f in files]
        if len(files) == 2 and not args.no_check:
            verdict, fetched = check_remote_pair(models[0][0], models[1][0], cap_bytes=_header_cap(args))
            print(f"header check ({fetched / 1e6:.1f} MB read): "
                  + ("compatible" if verdict else f"incompatible: {verdict.reason}"), file=sys.stderr)
            if not verdict:
                return EXIT_INCOMPATIBLE
        paths = download_files([part for parts in models for part in parts], progress=_progress_printer())
    except (DownloadError, GGUFError) as exc:
        print(file=sys.stderr)
        raise CliError(str(exc)) from None
    print(file=sys.stderr)
    firsts = []
    for f, parts in zip(files, models, strict=True):
        mine, paths = paths[:len(parts)], paths[len(parts):]
        for part, path in zip(parts, mine, strict=True):
            _validated(part.ref, path)
        registry.add(mine[0], source=f.ref)
        firsts.append(mine[0])
        print(mine[0])
    if registry.last_pair() is None:  # nothing used yet: what was just pulled is the default
        registry.set_last_pair(firsts[0], firsts[1] if len(firsts) > 1 else None)
        print("default pair for 'specchat chat' and 'bench' until another is used: " + args.pair, file=sys.stderr)
    if not args.pair.endswith(".gguf"):
        print(f"ready: specchat chat --pair {args.pair} \"...\"", file=sys.stderr)
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    """Validate every file the registry lists again; drop the missing and the broken ones."""
    report = Registry(args.profile.registry).rebuild()
    print(f"registry rebuilt: {report.summary()}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    registry = Registry(args.profile.registry)
    failed = 0
    results = []
    for path in args.paths:
        try:
            m = registry.add(path)
            results.append({"path": m.path, "ok": True, "name": m.name})
            if not args.json:
                print(f"imported {m.name} ({_gb(m.size)}): {m.path}")
        except GGUFError as exc:
            failed += 1
            results.append({"path": str(path), "ok": False, "reason": str(exc)})
            if not args.json:
                print(f"specchat: {exc}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
    return 2 if failed else 0


def cmd_check(args: argparse.Namespace) -> int:
    """Each reference is read where it is (a local file, or a hub file's header), so a problem names its file."""
    from specchat.models.compatibility import TokenizerInfo, check_tokenizers

    fetched = 0

    def tokenizer(ref: str) -> TokenizerInfo:
        nonlocal fetched
        if _is_local(ref):
            return TokenizerInfo.from_file(ref)
        from specchat.models.remote import read_remote_header

        header, n = read_remote_header(CatalogModel.parse(ref).hub_file(), cap_bytes=_header_cap(args))
        fetched += n
        return TokenizerInfo.from_header(header)

    try:
        verdict = check_tokenizers(tokenizer(args.target), tokenizer(args.draft))
    except UserError as exc:  # an unreadable file, a bad reference, a hub or network problem
        raise CliError(str(exc)) from None
    if args.json:
        doc: dict[str, object] = {"compatible": verdict.compatible, "reason": verdict.reason}
        if not (_is_local(args.target) and _is_local(args.draft)):
            doc["bytes_read"] = fetched
        print(json.dumps(doc))
    else:
        print(("compatible: " if verdict else "incompatible: ") + verdict.reason)
    return 0 if verdict else EXIT_INCOMPATIBLE


def cmd_fit(args: argparse.Namespace) -> int:
    paths = [args.target] + ([args.draft] if args.draft else [])
    try:
        models = estimate_files(paths, n_ctx=args.ctx, flash_attn=not args.no_flash_attn)
    except GGUFError as exc:
        raise CliError(str(exc)) from None
    vram, ram = free_memory()
    verdict = fit_pair(models, free_vram=vram, free_ram=ram)
    if args.json:
        print(json.dumps({
            "fits": verdict.fits, "gpu_layers": verdict.gpu_layers, "summary": verdict.summary,
            "needed": verdict.needed, "free_vram": vram, "free_ram": ram,
            "models": [{"name": m.name, "weights": m.weights, "kv_cache": m.kv_cache, "compute": m.compute,
                        "cpu_repack": m.repack, "total": m.total} for m in models],
        }, indent=1))
    else:
        for m in models:
            print(f"{m.name}: weights {m.weights / GIB:.2f} GiB, KV cache {m.kv_cache / GIB:.2f} GiB "
                  f"at {args.ctx} tokens, compute {m.compute / GIB:.2f} GiB"
                  + (f", CPU repack {m.repack / GIB:.2f} GiB" if m.repack else ""))
        print(verdict.summary)
    return 0 if verdict.fits else 1


def cmd_add(args: argparse.Namespace) -> int:
    try:
        target = CatalogModel.parse(args.target)
        drafts = [CatalogModel.parse(d) for d in args.draft]
        path, moved = add_user_pair(args.id, target, drafts, name=args.name, task=args.task,
                                    user_file=args.profile.user_catalog)
    except UserError as exc:  # a bad reference, id, name or task; a busy or unwritable file
        raise CliError(str(exc)) from None
    if moved is not None:
        print(f"specchat: {path} was damaged; moved it aside to {moved.name} and started a fresh one",
              file=sys.stderr)
    print(f"added '{args.id}' to {path}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from specchat.models.hub_search import search_repos

    try:
        hits = search_repos(args.query, sort=args.sort, limit=args.limit)
    except UserError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps([asdict(h) for h in hits], indent=1))
        return 0
    if not hits:
        print(f"no GGUF repos on the hub match {args.query!r}")
        return 0
    width = max(len(h.repo_id) for h in hits)
    print(f"{'repo':<{width}}  {'downloads':>10}  {'likes':>6}  {'updated':<10}  gated")
    for h in hits:
        print(f"{h.repo_id:<{width}}  {h.downloads:>10,}  {h.likes:>6,}  {h.updated or '?':<10}  {h.gated or '-'}")
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    from specchat.models.hub_search import entry_fit, gated_message, list_gguf_files

    try:
        listing = list_gguf_files(args.repo)
    except UserError as exc:
        raise CliError(str(exc)) from None
    vram, ram = free_memory() if args.fit else (None, 0)
    rows: list[dict[str, Any]] = []
    checks = args.checks if args.fit else 0  # header reads are bounded: a repo may list thousands of files
    for e in listing.entries:
        fit = ""
        if args.fit and checks <= 0:
            fit = "not checked (--checks)"
        elif args.fit:
            checks -= 1
            try:
                fit = entry_fit(e, free_vram=vram, free_ram=ram, n_ctx=args.ctx).label
            except UserError as exc:  # one file's header (gated, unreadable) does not stop the list
                fit = f"unknown ({exc})"
        rows.append({"quant": e.quant, "name": e.name, "size": e.size, "parts": len(e.files), "fit": fit,
                     "files": [f.filename for f in e.files]})
    if args.json:
        print(json.dumps({"repo": listing.repo_id, "gated": listing.gated, "base_models": list(listing.base_models),
                          "entries": rows, "notes": list(listing.notes)}, indent=1))
        return 0
    if listing.gated:
        print("note: " + gated_message(listing.repo_id, listing.gated, has_token=_has_token()))
    quant = None
    for r in rows:
        if r["quant"] != quant:
            quant = r["quant"]
            print(f"{quant}:")
        parts = f"{r['parts']} parts" if r["parts"] > 1 else ""
        print(f"  {printable(r['name']):<60} {_gb(r['size']):>8}  {parts:<8} {printable(r['fit'])}".rstrip())
    if not rows:
        print(f"{listing.repo_id} has no GGUF model files")
    for note in listing.notes:
        print(f"note: {printable(note)}")
    if args.fit and len(rows) > args.checks:
        print(f"note: --fit read the headers of the first {args.checks} of {len(rows)} models; "
              "--checks N reads more")
    return 0


def _has_token() -> bool:
    from huggingface_hub import get_token

    return get_token() is not None


def cmd_drafts(args: argparse.Namespace) -> int:
    from specchat.models.draft_finder import search_drafts, target_entry

    pairs, problems = load_catalog_lenient(args.profile.user_catalog)
    for problem in problems:
        print(f"specchat: warning: {problem} (skipped)", file=sys.stderr)
    local = Path(args.target).expanduser()
    try:
        on_disk = local.exists() or args.target.startswith((".", "/", "~"))
        target = local if on_disk else target_entry(args.target)
        search = search_drafts(target, catalog=pairs, installed=Registry(args.profile.registry).models(),
                               limit_checks=args.checks, progress=lambda msg: print(f"  {msg}", file=sys.stderr))
    except UserError as exc:
        raise CliError(str(exc)) from None
    found = search.candidates
    if search.hub_unreachable:
        print(f"specchat: the hub was unreachable ({search.hub_unreachable}): only installed files and the "
              "catalog were looked at", file=sys.stderr)
    if args.json:
        print(json.dumps([{"ref": c.ref, "files": [f.filename for f in c.entry.files] if c.entry else [c.path],
                           "size": c.size,
                           "ratio": round(c.ratio, 2), "compatible": c.compatible, "reason": c.reason,
                           "note": c.note, "source": c.source, "bytes_read": c.bytes_read} for c in found], indent=1))
        return 0
    good = [c for c in found if c.compatible]
    print("Compatible drafts (best first):" if good else "No compatible draft found.")
    for c in good:
        print(f"  {printable(c.ref)}  {_gb(c.size)}, {c.ratio:.1f}x smaller ({c.source})"
              + (f"; {printable(c.note)}" if c.note else ""))
    refused = [c for c in found if not c.compatible]
    if refused:
        print("Refused:")
    for c in refused:
        print(f"  {printable(c.ref)}  {c.ratio:.1f}x smaller ({c.source}): {printable(c.reason)}")
    if good and good[0].entry is not None:
        print(f"pull with: specchat models pull {good[0].ref}", file=sys.stderr)
    return 0


def run_models(args: argparse.Namespace) -> int:
    return {"list": cmd_list, "pull": cmd_pull, "import": cmd_import, "check": cmd_check, "fit": cmd_fit,
            "add": cmd_add, "rebuild": cmd_rebuild, "search": cmd_search, "files": cmd_files,
            "drafts": cmd_drafts}[args.models_command](args)
