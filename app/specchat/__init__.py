"""SpecChat: local GGUF chat with visible, lossless speculative decoding.

llama.cpp's native libraries are loaded here, before anything of ours can import numpy.

Why: on a CUDA build (H100, CUDA 13, driver 580, numpy 2.5.2, Python 3.12; docs/benchmarks.md,
"The numpy-first crash"), a process that imports numpy before llama_cpp segfaults inside
``llama_model_load_from_file`` right after llama.cpp logs ``init_tokenizer``; importing llama_cpp
first works, and so does every later numpy import.  It was reproduced in isolation with two
builds and with GGML_OPENMP=OFF (so not an OpenMP runtime clash).  gguf, sentencepiece,
pyqtgraph, ``models.compatibility`` and the bench all import numpy, so the order cannot be left
to whichever module a command happens to import first: ``specchat bench`` and ``--self-test``
crashed that way.  Every entry point (the ``specchat`` command and app, ``--self-test``, the
PyInstaller entry, scripts/gpu_kit.py, the test suite's conftest) imports this package first,
and ``import llama_cpp`` loads libllama through ctypes before its own ``llama.py`` imports
numpy.  tests/test_native_order.py checks the order in child processes (on a CPU the crash
itself does not show).

A missing or broken llama.cpp build is not an error here: the server clients and the store work
without it, and the engine's runtime raises the real error, in one line, where a model loads.
"""

import contextlib as _contextlib
import sys as _sys

__version__ = "0.1.0"

# RuntimeError: llama_cpp's "Failed to load shared library"
with _contextlib.suppress(ImportError, OSError, RuntimeError):
    import llama_cpp as _llama_cpp  # noqa: F401  (loaded for its side effect: the native libraries)


def native_loaded_first() -> bool:
    """Whether llama.cpp's library was loaded before numpy in this process (--self-test says so).

    ``sys.modules`` ends in the order imports finished (importlib moves a module's key to the
    end when it is loaded); ``llama_cpp.llama_cpp``, which loads the library, finishes before
    ``llama_cpp.llama`` imports numpy.
    """
    names = list(_sys.modules)
    if "llama_cpp.llama_cpp" not in _sys.modules:
        return False
    return "numpy" not in _sys.modules or names.index("llama_cpp.llama_cpp") < names.index("numpy")
