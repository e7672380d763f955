"""The memory estimate against what llama.cpp really allocates, and the verdicts users see."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specchat.models.fit import GIB, ModelMemory, estimate_files, fit_pair

MEASURE = r"""
import json, sys, psutil
from specchat.engine.runtime import LoadedModel, ModelOptions
proc = psutil.Process()
before = proc.memory_info().rss
models = []
for i, path in enumerate(sys.argv[1:]):
    m = LoadedModel(path, ModelOptions(n_ctx=4096, n_batch=512, n_ubatch=512), n_outputs=16 if i == 0 else 1)
    m.decode([198] * 512, logits="last")  # touch every weight and the compute buffers once
    models.append(m)
print(json.dumps({"growth": proc.memory_info().rss - before}))
"""


@pytest.mark.real_models
def test_estimate_for_the_qwen_pair_is_within_15_percent_of_rss_growth(qwen_target, qwen_draft):
    estimate = sum(m.total for m in estimate_files([qwen_target, qwen_draft], n_ctx=4096))
    out = subprocess.run([sys.executable, "-c", MEASURE, str(qwen_target), str(qwen_draft)], capture_output=True,
                         text=True, timeout=600, check=True)
    growth = json.loads(out.stdout.strip().splitlines()[-1])["growth"]
    print(f"estimate {estimate / GIB:.3f} GiB, RSS growth {growth / GIB:.3f} GiB, "
          f"error {(estimate - growth) / growth:+.1%}")
    assert abs(estimate - growth) / growth < 0.15


def model(weights_gib: float, kv_gib: float = 0.5, layers: int = 32) -> ModelMemory:
    w = int(weights_gib * GIB)
    return ModelMemory("m", w, int(w * 0.9) // layers, layers, int(kv_gib * GIB), int(0.3 * GIB))


def test_fits_fully_on_a_big_gpu():
    v = fit_pair([model(4.5), model(0.6, 0.1)], free_vram=16 * GIB, free_ram=8 * GIB)
    assert v.fits and v.gpu_layers == -1 and v.summary.startswith("fits on the GPU")


def test_partial_offload_names_the_layer_count():
    v = fit_pair([model(18.0, 2.0), model(0.6, 0.1)], free_vram=12 * GIB, free_ram=32 * GIB)
    assert v.fits and 0 < v.gpu_layers < 32
    assert f"fits with {v.gpu_layers} of 32 target layers on the GPU" in v.summary


def test_cpu_only_and_does_not_fit():
    cpu = fit_pair([model(4.5), model(0.6, 0.1)], free_vram=None, free_ram=16 * GIB)
    assert cpu.fits and cpu.gpu_layers is None and "on the CPU" in cpu.summary
    no = fit_pair([model(40.0), model(0.6, 0.1)], free_vram=None, free_ram=16 * GIB)
    assert not no.fits and no.summary.startswith("does not fit: needs")
