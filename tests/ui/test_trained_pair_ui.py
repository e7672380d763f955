"""Issue 34: a pair whose draft is a trained head (here EAGLE-3) is used from the Models dialog with no
setting to find: the chat runs in SpecChat's llama-server with the head's own --spec-type, and says so."""

from __future__ import annotations

from helpers.tiny_drafters import Tokenizer, write_eagle3, write_qwen3_target
from specchat.remote.llama_server import MANAGED


def test_using_a_pair_with_a_trained_head_runs_the_chat_in_llama_server(qtbot, fake_app, tmp_path, qwen_draft):
    tok = Tokenizer.from_gguf(qwen_draft)
    target = write_qwen3_target(tmp_path / "target.gguf", tok, seed=1)
    head = write_eagle3(tmp_path / "eagle3-target.gguf", tok, seed=2)
    app = fake_app()
    w = app.start(qtbot).window
    w._pair_chosen(target, head)  # what Models → Use pair does
    settings = w.pane.settings()
    assert (settings.target, settings.draft) == (target, head)
    assert settings.backend == MANAGED and settings.server_spec_type == "draft-eagle3"
    assert w.pane.header.pair_label.text().endswith("· llama-server")
    assert w.pane.header.speculation.isEnabled()  # speculation off is plain decoding on the same server
    w._pair_chosen(*app.model_files())  # an ordinary pair: SpecChat's own loop again
    assert w.pane.settings().backend == "" and not w.pane.header.pair_label.text().endswith("llama-server")


def test_the_library_names_an_installed_head_and_offers_it_for_its_target(tmp_path, qwen_draft):
    from specchat.models.registry import Registry
    from specchat.ui.models_dialog import library_text

    tok = Tokenizer.from_gguf(qwen_draft)
    target = write_qwen3_target(tmp_path / "target.gguf", tok, seed=1)
    head = write_eagle3(tmp_path / "eagle3-target.gguf", tok, seed=2)
    registry = Registry(tmp_path / "registry.json")
    t, h = registry.add(target), registry.add(head)
    assert (t.drafter, h.drafter) == ("", "draft-eagle3")
    assert "trained head: drafts with llama-server --spec-type draft-eagle3" in library_text(h)
    assert "trained head" not in library_text(t)
    assert Registry(tmp_path / "registry.json").models()  # the new field reads back


def test_a_pair_verdict_cached_by_the_tokenizer_rule_is_checked_again_by_the_head_rule(tmp_path, qwen_draft):
    import json

    from specchat.models.registry import Registry

    tok = Tokenizer.from_gguf(qwen_draft)
    target = write_qwen3_target(tmp_path / "target.gguf", tok, seed=1)
    head = write_eagle3(tmp_path / "eagle3-target.gguf", tok, seed=2)
    registry = Registry(tmp_path / "registry.json")
    assert registry.compatibility(target, head)  # checked as a head, and cached with its rule
    doc = json.loads((tmp_path / "registry.json").read_text())
    (entry,) = doc["pairs"].values()
    entry.pop("rule")  # as an older SpecChat cached it
    entry["compatible"], entry["reason"] = False, "tokenizer type differs"
    (tmp_path / "registry.json").write_text(json.dumps(doc))
    assert Registry(tmp_path / "registry.json").compatibility(target, head)  # not the stale verdict


def test_the_fit_estimate_counts_a_heads_own_blocks_not_its_targets(tmp_path, qwen_draft):
    """An MTP sidecar keeps its target's block_count: counted as the target's, its KV cache was the
    target's again (a 27B pair would look twice its size in cache)."""
    from helpers.tiny_drafters import write_mtp_sidecar, write_qwen35_mtp_target
    from specchat.models.fit import model_facts
    from specchat.models.gguf_header import read_file_header

    tok = Tokenizer.from_gguf(qwen_draft)
    target = read_file_header(write_qwen35_mtp_target(tmp_path / "t.gguf", tok, seed=1))
    sidecar = read_file_header(write_mtp_sidecar(tmp_path / "mtp-t.gguf", tok, seed=2))
    assert sidecar.arch_int("block_count", 0) == target.arch_int("block_count", 0)
    blocks = {t.name.split(".")[1] for t in sidecar.tensors if t.name.startswith("blk.")}
    assert model_facts(sidecar).n_layers == len(blocks) < model_facts(target).n_layers
