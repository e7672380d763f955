"""Issue 34: the catalog's pairs with a trained head (MTP, DFlash) name the exact files, what they need and
what others measured, and never become the first pick (they need a llama-server build)."""

from __future__ import annotations

from pathlib import Path

from specchat.models.catalog import SPEC_TYPES, load_catalog

SHIPPED = load_catalog(Path("/nonexistent"))
TRAINED = [p for p in SHIPPED if p.trained_head]


def test_the_shipped_catalog_has_trained_head_pairs_with_exact_files_needs_and_published_speed():
    assert {p.spec_type for p in TRAINED} >= {"draft-mtp", "draft-dflash"}
    assert len({p.target.repo.split("/")[1].split("-GGUF")[0] for p in TRAINED}) >= 2  # a Qwen3.6 and a Gemma 4
    for p in TRAINED:
        assert p.spec_type in SPEC_TYPES and len(p.drafts) == 1
        assert all(m.size and m.file.endswith(".gguf") for m in p.files()), p.id
        assert p.hardware and p.published, p.id
        # llama.cpp's own naming: its sidecar prefixes keep a head from being taken for the main model
        assert p.drafts[0].file.startswith(("mtp-", "dflash-", "dspark-", "eagle3-")), p.id


def test_a_trained_head_pair_is_never_recommended_first():
    import pytest

    pytest.importorskip("PySide6")
    from specchat.ui.models_dialog import catalog_notes, recommended

    gib = 1 << 30
    for free_vram, free_ram in ((80 * gib, 128 * gib), (None, 16 * gib), (24 * gib, 64 * gib)):
        pick = recommended(SHIPPED, free_vram, free_ram)
        assert pick is not None and not pick.trained_head
    notes = catalog_notes(TRAINED[0])
    assert any("llama-server" in n and TRAINED[0].spec_type in n for n in notes)
    assert any(n.startswith("Published: ") for n in notes) and any(n.startswith("Needs: ") for n in notes)
