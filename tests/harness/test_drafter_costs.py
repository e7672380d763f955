"""A trained drafter's cost shape in the simulator (``specchat simulate --drafter-costs FILE``, or a profile's
``"drafter"``): a fixed cost per draft call and a cost per pass, with no catch-up, and a DFlash block."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specchat.engine.settings import Drafter
from specchat.harness.simulate import (
    Clock,
    DrafterCosts,
    ProfileError,
    answer,
    controller_for,
    drafter_costs_from_json,
    load_drafter_costs,
    load_profile,
    profile_from_json,
    simulate,
    standard_policies,
    with_drafter,
    with_noise,
)
from specchat.harness.trace import agreement_trace

GPU = "rtx3090-qwen32b-q4_k_m"  # a draft model token 0.14x of the target's, a nearly flat verify


def dflash(call_x: float = 0.15, block: int = 16) -> DrafterCosts:
    """A whole block for about what the profile's draft model charges for one token."""
    return DrafterCosts("draft-dflash", call_x, 0.0, block)


def x_plain(profile, policy: str, alpha: float = 0.9) -> float:
    """The policy's multiplier on the kit's agreement pair at ``alpha`` (4 answers of 256 tokens)."""
    result = simulate(agreement_trace(alpha, prompts=4), profile,
                      [p for p in standard_policies() if p.key in ("plain", policy)])
    return result.multiplier(policy, "all")


@pytest.mark.parametrize("policy", ["draft", "auto"])
def test_a_cheap_block_predicts_more_than_the_draft_model_on_the_same_agreement_trace(policy):
    profile = load_profile(GPU)
    model, block = x_plain(profile, policy), x_plain(with_drafter(profile, dflash()), policy)
    assert block > model * 1.05, (model, block)
    # and a block as dear as 20 draft-model tokens predicts less: the costs are read, not a label
    assert x_plain(with_drafter(profile, dflash(call_x=20 * profile.draft_x)), policy) < model


def test_a_call_costs_the_same_for_every_length_and_a_head_catches_nothing_up():
    profile = with_noise(with_drafter(load_profile(GPU), dflash(block=6)), 0.0)
    clock = Clock(profile, 0)
    policy = next(p for p in standard_policies() if p.key == "k8")  # asks 8: the block caps it at 6
    rounds = []
    answer(controller_for(policy, clock), policy, agreement_trace(0.9, prompts=1, tokens=128).prompts[0], clock,
           on_round=rounds.append)
    drafted = [r for r in rounds if r.drafted]
    assert drafted and {r.catch_up for r in drafted} == {0} and max(r.drafted for r in drafted) == 6
    assert all(math.isclose(r.draft_s, 0.15 * profile.token_s) for r in drafted)


def test_an_mtp_head_pays_per_pass():
    profile = with_noise(with_drafter(load_profile(GPU), DrafterCosts("draft-mtp", 0.0, 0.05)), 0.0)
    clock = Clock(profile, 0)
    policy = next(p for p in standard_policies() if p.key == "k4")
    rounds = []
    answer(controller_for(policy, clock), policy, agreement_trace(0.9, prompts=1, tokens=64).prompts[0], clock,
           on_round=rounds.append)
    for r in (r for r in rounds if r.drafted):
        passes = r.drafted if r.drafted == 4 else r.drafted + 1
        assert math.isclose(r.draft_s, 0.05 * passes * profile.token_s) and r.draft_decoded == passes


def test_a_profile_carries_its_drafter_and_a_file_round_trips(tmp_path: Path):
    costs = drafter_costs_from_json({"specchat_drafter_costs": 1, "kind": "draft-dflash", "title": "t",
                                     "call_x": {"value": 0.8, "source": "derived"}, "token_x": 0, "block": 16}, "f")
    assert costs == DrafterCosts("draft-dflash", 0.8, 0.0, 16, title="t", sources={"call_x": "derived"})
    path = tmp_path / "c.json"
    path.write_text(json.dumps(costs.to_json(standalone=True)))
    assert load_drafter_costs(path) == costs
    profile = with_drafter(load_profile(GPU), costs)
    assert profile_from_json(profile.to_json(), "p").drafter == costs  # a profile may state it itself
    assert profile.draft_call_s == 0.8 * profile.token_s and profile.draft_block == 16


GOOD = {"specchat_drafter_costs": 1, "kind": "draft-mtp", "call_x": 0.0, "token_x": 0.05}


@pytest.mark.parametrize(("change", "names"), [
    ({"specchat_drafter_costs": 2}, "not a SpecChat drafter-costs file"),
    ({"kind": "medusa"}, "'kind' must be one of"),
    ({"token_x": float("nan")}, "'token_x' must be a number from 0 to 100"),
    ({"token_x": -0.1}, "'token_x' must be a number"),
    ({"call_x": 1e9}, "'call_x' must be a number from 0 to 100"),
    ({"call_x": True}, "'call_x' must be a number"),
    ({"token_x": None}, "'token_x' is missing"),
    ({"token_x": 0}, "both 0"),
    ({"block": 2.5}, "'block' must be a whole number"),
    ({"block": 100000}, "'block' must be a whole number"),
    ({"kind": "draft-simple", "call_x": 0.5}, "'call_x' must be 0"),
])
def test_a_bad_costs_file_is_one_line_naming_the_field(tmp_path: Path, change, names):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(GOOD | change))
    with pytest.raises(ProfileError) as e:
        load_drafter_costs(path)
    assert names in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("content", "names"), [
    (None, "no such drafter-costs file"),
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a drafter's costs"),
    (b" " * (2 << 20), "larger than 1024 KiB"),
])
def test_a_file_that_is_not_costs_is_one_line(tmp_path: Path, content, names):
    path = tmp_path / "c.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ProfileError) as e:
        load_drafter_costs(path)
    assert names in str(e.value) and "\n" not in str(e.value)


def test_the_controller_prices_a_call_once_a_round():
    """auto's plan reads the call's fixed cost (CostModel.draft_call_s): a block as dear as 3 target tokens
    has a lower best case than one at 0.15, and a round of K tokens costs the call once, whatever K."""
    auto = next(p for p in standard_policies() if p.key == "auto")
    best = {}
    for call_x in (0.15, 3.0):
        profile = with_noise(with_drafter(load_profile(GPU), dflash(call_x=call_x)), 0.0)
        controller = controller_for(auto, Clock(profile, 0))
        best[call_x] = controller.best_case_multiplier(Drafter.MODEL)
        costs = controller.costs
        assert math.isclose(costs.draft_cost(Drafter.MODEL, 2, 0.9), costs.draft_cost(Drafter.MODEL, 12, 0.9))
        assert math.isclose(costs.draft_cost(Drafter.MODEL, 2, 0.9), call_x * profile.token_s)
    assert best[3.0] < best[0.15]
