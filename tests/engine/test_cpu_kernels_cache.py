"""The kept CPU-kernel verdict is JSON SpecChat stores: a file nested past any bound is damaged, asked again,
never a RecursionError at the first load (issue 37)."""

from __future__ import annotations

from specchat.engine import cpu_kernels
from specchat.engine.cpu_kernels import CpuVerdict


def test_a_kept_verdict_nested_thousands_deep_is_probed_again(monkeypatch, tmp_path):
    kept = tmp_path / cpu_kernels.CACHE_NAME
    kept.write_text('{"key": "k", "verdict": ' + "[" * 5000 + "]" * 5000 + "}")
    found = CpuVerdict("runs", True, ("CPU_REPACK",), "", "llama.cpp's extra buffer types: on")
    monkeypatch.delenv(cpu_kernels.ENV, raising=False)
    monkeypatch.setattr(cpu_kernels, "_verdict", None)
    monkeypatch.setattr(cpu_kernels, "cache_file", lambda: kept)
    monkeypatch.setattr(cpu_kernels, "machine_key", lambda: "k")
    monkeypatch.setattr(cpu_kernels, "probe", lambda: found)
    assert cpu_kernels.known() is None  # before: RecursionError, in the About box
    assert cpu_kernels.verdict() == found  # probed again, and kept whole
    monkeypatch.setattr(cpu_kernels, "_verdict", None)
    assert cpu_kernels.known() == found
