"""llama.cpp's library loads before numpy in every entry point (specchat/__init__.py says why).

On a CUDA build, numpy imported first segfaults the model load; on a CPU the crash does not
show, so each entry point runs in a child process with an audit hook that records, in order,
the first ``import numpy`` and the ``ctypes.dlopen`` of libllama.  The entry points are run as
a user runs them (the console script's ``main``, the PyInstaller entry script, the GPU kit,
pytest itself) on paths that import numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Runs in the child: the hook first, then the entry point given as JSON in argv[1].
_PROBE = textwrap.dedent("""
    import json, os, sys
    seen = []
    def hook(event, args):
        if event == "import" and args[0] == "numpy" and "numpy" not in seen:
            seen.append("numpy")
        elif event == "ctypes.dlopen" and "libllama" in os.path.basename(str(args[0])) and "libllama" not in seen:
            seen.append("libllama")
    sys.addaudithook(hook)
    kind, target, argv = json.loads(sys.argv[1])
    import atexit, runpy
    atexit.register(lambda: print("ORDER " + json.dumps(seen), file=sys.stderr, flush=True))
    sys.argv = [target, *argv]
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "pytest":
        import pytest
        sys.exit(pytest.main(argv))
    else:
        runpy.run_path(target, run_name="__main__")
""")


def load_order(kind: str, target: str, argv: list[str], tmp_path: Path) -> list[str]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=os.pathsep.join([str(ROOT / "app"),
                                                                                     str(ROOT / "scripts")]))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env[var] = str(tmp_path / var.lower())
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([kind, target, argv])], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ORDER ")]
    assert lines, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return json.loads(lines[-1][len("ORDER "):])


def tiny_gguf(tmp_path: Path) -> Path:
    """A header-valid GGUF: enough for a command to read it (and import numpy) before it fails."""
    import gguf

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "c"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


ENTRIES = {
    # the console script (specchat = specchat.__main__:main): the commands that load a model
    "bench": ("module", "specchat", ["bench", "--target", "{gguf}", "--draft", "{gguf}", "--modes", "baseline",
                                     "--max-tokens", "1"]),
    "chat": ("module", "specchat", ["chat", "--target", "{gguf}", "--mode", "baseline", "hi"]),
    "models check": ("module", "specchat", ["models", "check", "{gguf}", "{gguf}"]),
    "models fit": ("module", "specchat", ["models", "fit", "{gguf}"]),
    # the app's own check, which opens the window headless and loads llama.cpp
    "--self-test": ("module", "specchat", ["--self-test"]),
    # the packaged app's entry script (PyInstaller)
    "packaged app": ("path", str(ROOT / "packaging" / "specchat_entry.py"), ["models", "check", "{gguf}", "{gguf}"]),
    # the GPU kit: agreement pairs import numpy to write their matrices
    "gpu kit": ("path", str(ROOT / "scripts" / "gpu_kit.py"), ["pairs", "--shape", "tiny", "--alphas", "0.5",
                                                               "--out", "{tmp}/pairs", "--tokenizer", "{gguf}",
                                                               "--f16"]),
    # the test suite: a test module that imports gguf and numpy at its top
    "pytest": ("pytest", "pytest", ["-q", "--co", "-p", "no:cacheprovider",
                                    str(ROOT / "tests" / "scripts" / "test_gpu_kit.py")]),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_llama_cpp_loads_before_numpy(entry, tmp_path):
    kind, target, argv = ENTRIES[entry]
    gguf_path = tiny_gguf(tmp_path)
    argv = [a.format(gguf=gguf_path, tmp=tmp_path) for a in argv]

    order = load_order(kind, target, argv, tmp_path)

    assert "numpy" in order, f"{entry} never imported numpy: this check would prove nothing"
    assert order.index("libllama") < order.index("numpy") if "libllama" in order else False, (
        f"{entry}: numpy was imported before llama.cpp's library was loaded ({order}): on a CUDA build "
        "the model load segfaults")


def test_the_probe_sees_the_wrong_order_when_numpy_comes_first(tmp_path):
    """The check can fail: a script that imports numpy, then SpecChat, is caught."""
    script = tmp_path / "numpy_first.py"
    script.write_text("import numpy\nimport specchat\n")

    order = load_order("path", str(script), [], tmp_path)

    assert order == ["numpy", "libllama"]


def test_the_package_says_whether_its_library_came_first(tmp_path):
    code = "import {first}, {second}, specchat; print(specchat.native_loaded_first())"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "app"))
    out = [subprocess.run([sys.executable, "-c", code.format(first=a, second=b)], capture_output=True, text=True,
                          env=env, check=True).stdout.strip() for a, b in (("specchat", "numpy"), ("numpy", "json"))]
    assert out == ["True", "False"]
