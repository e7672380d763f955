"""The GPU kit's code, one module per step; ``scripts/gpu_kit.py`` is its command line (see its docstring)."""
