"""The drafter registry: a drafter registered there is offered by the loop and by the simulator."""

from __future__ import annotations

from pathlib import Path

from helpers.fakes import FakeSpec, fake_pair
from specchat.engine import Mode, RoundStats
from specchat.engine import drafters as registry
from specchat.engine.drafting import Drafted, DrafterKind, Offer, PlanView, ReplayContext, Replayed
from specchat.engine.pair import PairConfig
from specchat.engine.settings import ControllerSettings, Drafter
from specchat.harness.simulate import Clock, CostProfile, Policy, answer, controller_for
from specchat.harness.suite import BenchPrompt
from specchat.harness.trace import record_prompt

MSGS = ({"role": "user", "content": "hello"},)
K = 3
SETTINGS = ControllerSettings(k_min=K, k_max=K, lookup_k_max=K, p_min=0.0, min_token_acceptance=0.0,
                              min_sequence_acceptance=0.0, fallback_warning_share=1.0, min_gain=0.0)
PROFILE = CostProfile("t", "t", "published", 0.010, {1: 1.0, 2: 1.1, 4: 1.2}, 0.15)


class RepeatLast:
    """A fake drafter: the newest committed token, k times."""

    name = Drafter.LOOKUP  # registered in prompt lookup's place (the names are the leaf's)
    cheap_prefill = True

    def __init__(self) -> None:
        self.offers = 0

    def start(self) -> None:
        pass

    def forget(self) -> None:
        pass

    def prefill(self, prompt: list[int], rows: int = 0) -> tuple[int, ...]:
        return ()

    def offer(self, history: list[int], k_cap: int, settings: ControllerSettings) -> Offer:
        self.offers += 1
        return Offer(min(k_cap, settings.k_max))

    def draft(self, history: list[int], plan: PlanView) -> Drafted:
        return Drafted([history[-1]] * plan.k)


class RepeatLastReplay:
    offers = 0

    def __init__(self, ctx: ReplayContext) -> None:
        self.tokens = ctx.trace.tokens
        self.settings = ctx.settings

    def offer(self, i: int, k_cap: int) -> Offer:
        RepeatLastReplay.offers += 1
        return Offer(min(k_cap, self.settings.k_max))

    def draft(self, i: int, plan: PlanView) -> Replayed:
        ok = 0
        while ok < plan.k and i + 1 + ok < len(self.tokens) and self.tokens[i + 1 + ok] == self.tokens[i]:
            ok += 1
        return Replayed(plan.k, ok)


def shape(r: RoundStats) -> tuple:
    return (r.drafter.value, r.k, r.drafted, r.accepted, r.emitted)


def test_a_registered_drafter_is_offered_by_the_loop_and_the_simulator(monkeypatch):
    built: list[RepeatLast] = []

    def build(target, draft, settings):
        built.append(RepeatLast())
        return built[-1]

    kind = DrafterKind(Drafter.LOOKUP, build, RepeatLastReplay)
    monkeypatch.setattr(registry, "DRAFTERS", (kind,))
    monkeypatch.setitem(registry.KINDS, Drafter.LOOKUP, kind)
    # a pair without a draft model: the registry's one drafter is the fake
    pair = fake_pair(PairConfig(Path("t.gguf"), None, controller=SETTINGS), FakeSpec(answer_tokens=40))
    assert list(pair.drafters) == [Drafter.LOOKUP] and pair.drafters[Drafter.LOOKUP] is built[0]
    prompt = pair.chat_prompt(list(MSGS)).tokens
    events = list(pair.generate(prompt, mode=Mode.LOOKUP, max_tokens=40))
    engine = [e for e in events if isinstance(e, RoundStats)]
    drafted = [r for r in engine if r.drafted]
    # it offered and drafted in every round with room for a draft (not the last, which has one token left)
    assert built[0].offers == len(drafted) == len(engine) - 1 > 0
    assert all(r.drafter is Drafter.LOOKUP and 1 <= r.drafted <= K for r in drafted)
    assert drafted[0].drafted == K  # K while the answer has room for it

    pt = record_prompt(pair.target, None, BenchPrompt("p", "chat", MSGS), prompt, max_tokens=40, k_max=16,
                       lookup_ngram=SETTINGS.lookup_ngram)
    policy = Policy("x", "x", Mode.LOOKUP, SETTINGS)
    clock = Clock(PROFILE, 0)
    simulated: list[RoundStats] = []
    answer(controller_for(policy, clock), policy, pt, clock, on_round=simulated.append)
    assert RepeatLastReplay.offers == len(simulated) - 1
    assert [shape(r) for r in simulated] == [shape(r) for r in engine]
