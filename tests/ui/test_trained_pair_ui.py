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
