"""One choice of backend for the window and the command line: a chat's settings (or flags) to the
config of the backend that answers, every refusal one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.gguf_samples import write_tiny
from specchat.backends.choose import ChoiceError, choose, for_chat
from specchat.backends.pairs import PairError
from specchat.backends.remote import RemoteConfig
from specchat.config import AppConfig, ConfigError
from specchat.engine.pair import PairConfig
from specchat.profile import Profile
from specchat.remote.llama_server import MANAGED
from specchat.remote.servers import ServerConfig, ServerList, servers_file
from specchat.store import ChatSettings


@pytest.fixture
def profile(tmp_path) -> Profile:
    return Profile.at(tmp_path / "profile")


@pytest.fixture
def models(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "m").mkdir()
    return write_tiny(tmp_path / "m" / "target.gguf"), write_tiny(tmp_path / "m" / "draft.gguf", n_tensors=2)


def test_a_chat_on_this_machine_gets_its_pair_with_the_apps_settings(profile, models):
    config = AppConfig.defaults()
    chosen = for_chat(ChatSettings(target=models[0], draft=models[1]), config, profile)
    assert isinstance(chosen, PairConfig)
    assert (chosen.target, chosen.draft) == models
    assert chosen.target_options.n_ctx == config["n_ctx"] and chosen.calibration_cache == profile.calibration_cache


def test_the_command_line_overrides_win_over_the_settings_and_are_checked(profile, models):
    chosen = choose(AppConfig.defaults(), profile, target=models[0], n_ctx=2048, k_max=3)
    assert isinstance(chosen, PairConfig) and chosen.target_options.n_ctx == 2048 and chosen.controller.k_max == 3
    with pytest.raises(ConfigError):
        choose(AppConfig.defaults(), profile, target=models[0], n_ctx=-5)


def test_a_managed_llama_server_gets_the_chats_pair_its_drafter_and_the_context(profile, models):
    settings = ChatSettings(target=models[0], draft=models[1], backend=MANAGED, server_spec_type="draft-simple")
    chosen = for_chat(settings, AppConfig.defaults(), profile)
    assert isinstance(chosen, RemoteConfig) and chosen.managed is not None
    spec = chosen.managed
    assert (spec.target, spec.draft, spec.spec_type) == (*models, "draft-simple")
    assert spec.n_ctx == AppConfig.defaults()["n_ctx"] and spec.log_dir == profile.cache_dir / "llama-server-logs"
    cli = choose(AppConfig.defaults(), profile, backend=MANAGED, target=models[0], n_ctx=1024, gpu_layers=0)
    assert isinstance(cli, RemoteConfig) and cli.managed is not None
    assert (cli.managed.n_ctx, cli.managed.gpu_layers, cli.managed.draft) == (1024, 0, None)


def test_a_named_server_or_a_url_is_connected_to_as_it_is(profile):
    ServerList(servers_file(profile)).put(ServerConfig("box", "http://box:8080"))
    named = choose(AppConfig.defaults(), profile, backend="box")
    assert isinstance(named, RemoteConfig) and named.server.url == "http://box:8080" and named.managed is None
    url = for_chat(ChatSettings(backend="http://other:9000"), AppConfig.defaults(), profile)
    assert isinstance(url, RemoteConfig) and url.server.url == "http://other:9000"


@pytest.mark.parametrize("settings, error, words", [
    (ChatSettings(), PairError, "no model pair chosen"),
    (ChatSettings(backend=MANAGED), PairError, "no model pair chosen"),
    (ChatSettings(target=Path("/nonexistent/t.gguf")), PairError, "no such file"),
    (ChatSettings(backend="gone"), ChoiceError, "no server named 'gone'"),
])
def test_what_cannot_be_chosen_is_one_line_saying_why(profile, settings, error, words):
    with pytest.raises(error, match=words) as caught:
        for_chat(settings, AppConfig.defaults(), profile)
    assert "\n" not in str(caught.value) and isinstance(caught.value, ValueError)  # the answer service's one line


@pytest.fixture(scope="module")
def heads(tmp_path_factory, qwen_draft) -> dict[str, Path]:
    """A tiny qwen3 target, an EAGLE-3 head that fits it and one that does not (tests/helpers/tiny_drafters.py)."""
    from helpers.tiny_drafters import Tokenizer, write_eagle3, write_qwen3_target

    out = tmp_path_factory.mktemp("heads")
    tok = Tokenizer.from_gguf(qwen_draft)
    return {"target": write_qwen3_target(out / "target.gguf", tok, seed=1),
            "eagle3": write_eagle3(out / "eagle3.gguf", tok, seed=2),
            "eagle3-two-layers": write_eagle3(out / "eagle3-two.gguf", tok, seed=3, target_layers=(1, 3))}


def test_a_trained_head_as_the_draft_runs_the_pair_in_llama_server_with_the_heads_spec_type(profile, heads):
    """Models → Use this pair with an EAGLE-3 head, or 'specchat chat --draft head.gguf': no setting to find."""
    from specchat.backends.choose import trained_head_spec

    assert trained_head_spec(heads["eagle3"]) == "draft-eagle3" and trained_head_spec(heads["target"]) == ""
    assert trained_head_spec(None) == "" and trained_head_spec(Path("/nonexistent.gguf")) == ""
    chosen = for_chat(ChatSettings(target=heads["target"], draft=heads["eagle3"]), AppConfig.defaults(), profile)
    assert isinstance(chosen, RemoteConfig) and chosen.managed is not None
    assert (chosen.managed.draft, chosen.managed.spec_type) == (heads["eagle3"], "draft-eagle3")


def test_a_head_that_does_not_fit_is_refused_before_download_and_before_start_with_the_field(profile, heads):
    from specchat.models.compatibility import check_pair

    assert check_pair(heads["target"], heads["eagle3"])  # what the download's header check says, locally
    verdict = check_pair(heads["target"], heads["eagle3-two-layers"])
    assert not verdict and "eagle3.target_layers" in verdict.reason
    with pytest.raises(PairError, match="eagle3.target_layers has 2 entries"):
        for_chat(ChatSettings(target=heads["target"], draft=heads["eagle3-two-layers"]), AppConfig.defaults(), profile)


def test_a_draft_free_drafter_starts_llama_server_without_the_draft_model(profile, models):
    """ngram-mod (or none) drafts from the text: the draft model would only take memory."""
    for spec_type in ("ngram-mod", "none"):
        chosen = choose(AppConfig.defaults(), profile, backend=MANAGED, target=models[0], draft=models[1],
                        spec_type=spec_type)
        assert isinstance(chosen, RemoteConfig) and chosen.managed is not None
        assert (chosen.managed.draft, chosen.managed.spec_type) == (None, spec_type)


def test_the_bench_names_each_managed_llama_server_by_its_drafter():
    import argparse

    from specchat.cli.servers import server_labels

    args = argparse.Namespace(server=["llama-server:ngram-mod", "box", "llama-server:draft-mtp"],
                              baseline_server="plain-box")
    assert server_labels(args) == [("llama-server:ngram-mod", "llama-server:ngram-mod"), ("server-2", "box"),
                                   ("llama-server:draft-mtp", "llama-server:draft-mtp"),
                                   ("server-plain", "plain-box")]


def test_speculation_off_on_spechats_llama_server_is_that_server_without_its_drafter(profile, models, heads):
    """llama-server reads no per-request switch: plain decoding is the same build restarted with --spec-type none
    (a changed config: the answer service restarts it), and on again restarts it with the drafter."""
    on = ChatSettings(target=models[0], draft=models[1], backend=MANAGED, server_spec_type="draft-simple")
    off = for_chat(on.replaced(speculation="baseline"), AppConfig.defaults(), profile)
    assert isinstance(off, RemoteConfig) and off.managed is not None
    assert (off.managed.spec_type, off.managed.draft) == ("none", None)
    assert off != for_chat(on, AppConfig.defaults(), profile)
    head = ChatSettings(target=heads["target"], draft=heads["eagle3"], speculation="baseline")
    plain = for_chat(head, AppConfig.defaults(), profile)
    assert isinstance(plain, RemoteConfig) and plain.managed is not None and plain.managed.spec_type == "none"
    local = for_chat(ChatSettings(target=models[0], draft=models[1], speculation="baseline"), AppConfig.defaults(),
                     profile)
    assert not isinstance(local, RemoteConfig)  # SpecChat's own loop switches per answer, no restart
