"""What travels to the GPU machine: ``pack`` makes the carry folder ``gpu-kit/`` (the stripped sdist,
the tokenizer GGUF, the wheels); a CUDA tree built here (``build --cuda-from-index``) is packed into
it as one archive, and ``build`` on the GPU machine unpacks it and links that machine's CUDA runtime.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from .common import (
    KIT_ARCH,
    KIT_LIMIT_BYTES,
    LLAMA_CPP_PYTHON,
    SDIST_NAME,
    TEST_MODEL,
    TOKENIZER_FILE,
    build_dir,
    folder_size,
    test_model_path,
)
from .models import write_tokenizer_gguf

# The wheels SpecChat's engine and CLI import that the GPU image lacks (the image has numpy, jinja2,
# psutil, filelock, pyyaml, tqdm, requests, typing-extensions, nvidia-ml-py): gguf (models.gguf_header),
# diskcache (llama_cpp imports it), platformdirs (specchat.profile); and for the bench against
# llama-server (remote/): httpx2 and httpcore2, truststore, prometheus-client, keyring (servers.py)
# with jaraco.classes, jaraco.functools, jaraco.context and more-itertools (H100 run, 2026-11-24).
KIT_WHEELS = ("gguf", "diskcache", "platformdirs", "httpx2", "httpcore2", "truststore", "prometheus-client",
              "keyring", "jaraco.classes", "jaraco.functools", "jaraco.context", "more-itertools")


# --------------------------------------------------------------------------------------------
# the stripped sdist and the wheels
# --------------------------------------------------------------------------------------------

# Paths below the sdist's top folder that a CUDA build of the library never reads.  llama.cpp's
# own models/ (tokenizer test vocabularies, 75 MB), docs/ (38 MB) and the git history the sdist
# carries (.git/, 38 MB packed) are most of the 217 MB.
_DROP_PREFIXES = (
    ".git/", "docs/", "examples/", "tests/", "docker/", "scripts/", ".github/", "vendor/llama.cpp/.git/",
    "vendor/llama.cpp/models/", "vendor/llama.cpp/docs/", "vendor/llama.cpp/tests/",
    "vendor/llama.cpp/benches/", "vendor/llama.cpp/examples/",
    "vendor/llama.cpp/pocs/", "vendor/llama.cpp/media/", "vendor/llama.cpp/gguf-py/",
    "vendor/llama.cpp/conversion/", "vendor/llama.cpp/ci/",
    "vendor/llama.cpp/skills/", "vendor/llama.cpp/requirements/", "vendor/llama.cpp/app/",
    "vendor/llama.cpp/.github/", "vendor/llama.cpp/.devops/", "vendor/llama.cpp/grammars/",
)
_GGML_BACKENDS = "vendor/llama.cpp/ggml/src/"
_KEPT_BACKENDS = {"ggml-cpu", "ggml-cuda"}


def sdist_keeps(member: str) -> bool:
    """Whether a path of the sdist (``llama_cpp_python-X/...``) stays in the stripped copy."""
    _top, _, rel = member.partition("/")
    if not rel:
        return True
    if rel.startswith(_DROP_PREFIXES) or rel.endswith((".gguf", ".png", ".jpg", ".mp4", ".gif", ".webp", ".pdf",
                                                        ".wav", ".mp3")):
        return False
    if rel.startswith("vendor/llama.cpp/convert_"):
        return False
    # llama-server and llama-bench are built from the same tree (tools/); the server's web UI is off,
    # so of tools/ui (800 files) only its top-level build files stay, and of scripts/ the cmake ones
    if rel.startswith("vendor/llama.cpp/tools/ui/"):
        return "/" not in rel[len("vendor/llama.cpp/tools/ui/"):]
    if rel.startswith("vendor/llama.cpp/scripts/"):
        return rel.endswith(".cmake") or rel.endswith("/")
    if rel.startswith(_GGML_BACKENDS):
        backend = rel[len(_GGML_BACKENDS):].split("/", 1)
        if len(backend) == 2 and backend[0].startswith("ggml-") and backend[0] not in _KEPT_BACKENDS:
            return False
    return True


def strip_sdist(sdist: Path, out: Path) -> tuple[int, int]:
    """Copy the sdist's kept members into ``out`` (tar.xz); return (members kept, dropped)."""
    kept = dropped = 0
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(sdist, "r:*") as src, tarfile.open(tmp, "w:xz", preset=6) as dst:
        for member in src:
            if not (member.isfile() or member.isdir()) or not sdist_keeps(member.name):
                dropped += 1
                continue
            if ".." in Path(member.name).parts or member.name.startswith("/"):
                raise SystemExit(f"{sdist}: unsafe member {member.name!r}: fetch the sdist again")
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            kept += 1
    tmp.replace(out)
    return kept, dropped


def fetch_sdist(dest: Path) -> Path:
    """``pip download`` of the sdist (the one network step of the kit)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"llama_cpp_python=={LLAMA_CPP_PYTHON}", "-d", str(dest)], check=True)
    found = sorted(dest.glob(f"{SDIST_NAME}.tar.gz"))
    if not found:
        raise SystemExit(f"pip download left no {SDIST_NAME}.tar.gz in {dest}")
    return found[0]


def fetch_wheels(dest: Path, names: Iterable[str] = KIT_WHEELS) -> list[Path]:
    """The installed versions of ``names`` as pure-Python wheels (the GPU image has no network)."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{n}=={importlib.metadata.version(n)}" for n in names]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "py", "-d", str(dest), *pins], check=True)
    return sorted(dest.glob("*.whl"))


# --------------------------------------------------------------------------------------------
# the prebuilt CUDA tree: packed here, unpacked on the GPU machine
# --------------------------------------------------------------------------------------------

PREBUILT = f"prebuilt-cuda-sm{KIT_ARCH}.tar.xz"  # in the kit: a CUDA tree built here (``prebuild``)


def _carried(bin_dir: Path) -> list[Path]:
    """What runs on the GPU machine: the shared libraries (and their soname links), llama-server, llama-bench."""
    keep = [p for p in sorted(bin_dir.iterdir()) if re.fullmatch(r"lib(llama|ggml|mtmd)[\w.-]*\.so[\d.]*", p.name)]
    return keep + [bin_dir / n for n in ("llama-server", "llama-bench") if (bin_dir / n).is_file()]


def pack_prebuilt(site: Path, kit: Path) -> Path:
    """The CUDA tree built here (``build --cuda-from-index``), stripped of symbols, with the bindings, as one
    archive in the carry folder: ``bin/`` (libraries and tools, found by RPATH $ORIGIN) and ``llama_cpp/``."""
    out_bin = build_dir(site) / "bin"
    files = _carried(out_bin)
    if not any(p.name.startswith("libggml-cuda") for p in files):
        raise SystemExit(f"{out_bin}: no libggml-cuda: run 'gpu_kit.py build --cuda-from-index' here first")
    strip = shutil.which("strip")
    dest = kit / PREBUILT
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "bin"
        stage.mkdir()
        for f in files:
            if f.is_symlink():
                (stage / f.name).symlink_to(os.readlink(f))
                continue
            shutil.copy2(f, stage / f.name)
            with f.open("rb") as head:
                elf = head.read(4) == b"\x7fELF"
            if strip and elf:
                subprocess.run([strip, "--strip-unneeded", str(stage / f.name)], check=True)
        part = dest.with_name(dest.name + ".part")
        with tarfile.open(part, "w:xz", preset=6) as tar:
            tar.add(stage, arcname="bin")
            tar.add(site / "llama_cpp", arcname="llama_cpp", filter=lambda t: None if t.name == "llama_cpp/lib" else t)
        part.replace(dest)
    return dest


def unpack_prebuilt(kit: Path, site: Path) -> None:
    """``pack_prebuilt``'s archive laid out as ``build`` lays a tree: the build's bin/, the bindings over it."""
    out_dir = build_dir(site)
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(site / "llama_cpp", ignore_errors=True)
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(kit / PREBUILT, "r:xz") as tar:
        tar.extractall(out_dir, members=[m for m in tar.getmembers() if m.name.startswith("bin")], filter="data")
        tar.extractall(site, members=[m for m in tar.getmembers() if m.name.startswith("llama_cpp")], filter="data")
    (site / "llama_cpp" / "lib").symlink_to(out_dir / "bin", target_is_directory=True)
    link_cuda_runtime(out_dir / "bin")


CUDA_RUNTIME = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")


def link_cuda_runtime(bin_dir: Path) -> list[str]:
    """Links in ``bin_dir`` (the RPATH's $ORIGIN) to this machine's CUDA 13 runtime and cuBLAS: the
    toolkit's, else the Python ``nvidia`` packages' (PyTorch's).  Returns the names it found nowhere."""
    from specchat.remote import cuda_toolchain

    roots = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")), cuda_toolchain.default_root()]
    if shutil.which("nvcc"):
        roots.append(Path(shutil.which("nvcc") or "").resolve().parent.parent)
    try:
        import nvidia  # type: ignore[import-not-found]

        roots += [Path(p) for p in getattr(nvidia, "__path__", [])]
    except ImportError:
        pass
    missing = []
    for name in CUDA_RUNTIME:
        if (bin_dir / name).exists():
            continue
        found = next((f for r in roots if r.is_dir() for f in r.rglob(name) if f.is_file()), None)
        if found is None:
            missing.append(name)
            continue
        (bin_dir / name).unlink(missing_ok=True)
        (bin_dir / name).symlink_to(found)
    if missing:
        print(f"warning: no {', '.join(missing)} on this machine: llama.cpp's CUDA library will not load", flush=True)
    return missing


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------

def cmd_pack(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    stripped = out / f"{SDIST_NAME}-stripped.tar.xz"
    t0 = time.perf_counter()
    if args.sdist is not None:
        if not args.sdist.is_file():
            raise SystemExit(f"{args.sdist}: no such sdist: give the {SDIST_NAME}.tar.gz file, or no --sdist")
        kept, dropped = strip_sdist(args.sdist, stripped)
    else:
        with tempfile.TemporaryDirectory() as tmp:  # 76 MB, needed only until it is stripped
            kept, dropped = strip_sdist(fetch_sdist(Path(tmp)), stripped)
    print(f"{stripped.name}: {kept} members kept, {dropped} dropped, {stripped.stat().st_size / 2**20:.1f} MiB "
          f"({time.perf_counter() - t0:.0f} s)")
    source = args.tokenizer_from or test_model_path()
    if source is None or not source.is_file():
        raise SystemExit(f"no {TEST_MODEL} to copy the tokenizer from: run scripts/test_models.py, "
                         "or give --tokenizer-from FILE")
    tok = write_tokenizer_gguf(source, out / TOKENIZER_FILE)
    print(f"{TOKENIZER_FILE}: {tok.n_tokens} tokens, {len(tok.fields)} keys from {source.name}, "
          f"{(out / TOKENIZER_FILE).stat().st_size / 2**20:.1f} MiB")
    wheels = fetch_wheels(out / "wheels")
    print("wheels: " + ", ".join(w.name for w in wheels))
    size = folder_size(out)
    print(f"{out}: {size / 2**20:.1f} MiB (limit {KIT_LIMIT_BYTES >> 20} MiB)")
    return 0 if size <= KIT_LIMIT_BYTES else 1
