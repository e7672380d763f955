"""What every step of the GPU kit shares: the paths, the pinned versions, the kit's files, and the
small helpers (JSON out, the site on sys.path, the build tree's layout, the hardware's name).

Standard library only: ``python3 scripts/gpu_kit.py`` imports it before the site is on sys.path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KIT_SCRIPT = ROOT / "scripts" / "gpu_kit.py"  # the command line; ``build --detach`` runs it again
LLAMA_CPP_PYTHON = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
KIT_LIMIT_BYTES = 40 << 20  # the carried working tree is 64 MiB in all; the repo needs the rest
CARRY_LIMIT_BYTES = 58 << 20  # the kit with a prebuilt CUDA tree (the repo's tracked files are about 5 MiB)
DEFAULT_SITE = Path("/tmp/specchat-gpu-kit/site")
DEFAULT_WORK = Path("/tmp/specchat-gpu-kit/work")
TOKENIZER_FILE = "qwen-tokenizer.gguf"
TEST_MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"  # its header holds the real Qwen2.5 tokenizer
KIT_ARCH = 90  # the lent GPUs: H100 and H200


def write_json(path: Path, doc: Any) -> None:
    from specchat.files import write_text_atomically

    write_text_atomically(path, json.dumps(doc, indent=1) + "\n")


def use_site(site: Path) -> None:
    """The carried wheels and the CUDA build first, then SpecChat's own sources."""
    for p in (str(ROOT / "app"), str(site)):
        if p not in sys.path and (p != str(site) or site.is_dir()):
            sys.path.insert(0, p)


def build_dir(site: Path) -> Path:
    return site.parent / "llama.cpp-build"


def tool_path(site: Path, name: str) -> Path:
    """llama-server or llama-bench of the kit's build."""
    return build_dir(site) / "bin" / name


def hardware_name(cpu: bool) -> str:
    if not cpu:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30, check=True).stdout.strip().splitlines()
            if out:
                return out[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
        return "unknown GPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_model_path() -> Path | None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import test_models
    except ImportError:
        return None
    return Path(test_models.cache_dir()) / TEST_MODEL
