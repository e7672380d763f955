"""Replay an agreement trace against a cost profile, with the real controller deciding.

A trace (:mod:`specchat.harness.trace`) says, position by position, which draft
tokens the target would accept; a cost profile says what a verify of n tokens,
a draft token and SpecChat's loop cost per round on some machine.  The
simulator plays each answer with the engine's own round
(:class:`~specchat.engine.round.Rounds`, which :func:`generate` plays too) and
the very :class:`DraftController` the engine uses (``answer_plan``, ``plan``,
``observe``).  Only the decodes are replaced (:class:`TraceDecodes`): the
trace says what the target accepts, and the profile what each decode costs,
with its measurement noise (:class:`Clock`).

Each drafter replays itself from the trace (its ``Replay`` in the drafter
registry, ``drafters.DRAFTERS``).  What the draft model costs in a round
mirrors :class:`ModelDrafter` (:class:`~.drafters.ModelReplay`).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from specchat import files
from specchat.engine.calibration import batch_sizes
from specchat.engine.controller import CostModel, DraftController, Plan
from specchat.engine.drafters import KINDS
from specchat.engine.drafting import Offer, Replay, ReplayContext
from specchat.engine.events import RoundStats
from specchat.engine.round import Draft, Rounds, Verified
from specchat.engine.settings import ControllerSettings, Drafter, Mode
from specchat.errors import UserError
from specchat.metrics import Counts

from .trace import PromptTrace, Trace, agreement_trace

PROFILE_VERSION = 1
PROFILE_KINDS = ("published", "measured-cpu", "measured-gpu")
DRAFTER_COSTS_VERSION = 1
# a drafter's kind as llama-server's --spec-type names it (draft-simple: a separate draft model)
DRAFTER_KINDS = ("draft-simple", "draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")
MAX_BLOCK = 256
MAX_PROFILE_BYTES = 1 << 20
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")
CAL_DRAFTER = "model"


class ProfileError(UserError, ValueError):
    """A cost profile that cannot be read or makes no sense."""


# -- cost profiles -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrafterCosts:
    """What one draft call of a drafter costs, in multiples of one target token: a fixed cost per call
    and a cost per pass (a token it drafts).  A draft model costs per decode (``call_x`` 0, ``token_x`` its
    ``draft_x``); an MTP or EAGLE-3 head one light pass per token; a DFlash drafter a block of up to
    ``block`` tokens in one pass (``call_x``, ``token_x`` about 0)."""

    kind: str  # one of DRAFTER_KINDS
    call_x: float  # one call, fixed / token_s
    token_x: float  # each pass / token_s
    block: int = 0  # the most tokens one call drafts (0: as many as the controller asks)
    title: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def head(self) -> bool:
        """A trained drafter (no draft model of its own to catch up)."""
        return self.kind != "draft-simple"

    def describe(self) -> str:
        block = f", blocks of up to {self.block}" if self.block else ""
        return f"drafter {self.kind}: a call {self.call_x:.2f}x + {self.token_x:.3f}x a pass{block}"

    def to_json(self, *, standalone: bool = False) -> dict:
        def num(key: str, value: float) -> object:
            src = self.sources.get(key)
            return {"value": value, "source": src} if src else value

        head = {"specchat_drafter_costs": DRAFTER_COSTS_VERSION} if standalone else {}
        return {**head, "kind": self.kind, "title": self.title, "call_x": num("call_x", self.call_x),
                "token_x": num("token_x", self.token_x), **({"block": self.block} if self.block else {}),
                "notes": list(self.notes)}


@dataclass(frozen=True, slots=True)
class CostProfile:
    """What decoding costs on one machine for one pair (seconds, and multiples of one target token)."""

    name: str
    title: str
    kind: str
    token_s: float  # one target token: a verify of 1
    verify_x: dict[int, float]  # a verify of n tokens / token_s, at the sizes given
    draft_x: float  # one draft-model token / token_s
    overhead_s: float = 0.0  # SpecChat's loop per round, outside llama.cpp
    lookup_s: float = 0.0  # one prompt-lookup proposal
    noise: float = 0.0  # relative standard deviation of one measured cost
    # seconds a change of batch shape costs one decode where llama.cpp replays CUDA graphs (0: shapes
    # cost nothing, a CPU); with it the simulator runs the loop of engine/shapes.py: verify batches
    # padded to a held size, short draft catch-ups one token at a time
    recapture_s: float = 0.0
    hardware: str = ""
    target: str = ""
    draft: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    drafter: DrafterCosts | None = None  # the drafter's own cost shape; None: a draft model at draft_x

    def verify_s(self, n: int) -> float:
        """A target decode of n tokens: linear between the given sizes, the last slope beyond them."""
        return CostModel(dict(self.verify_x)).verify(n) * self.token_s

    @property
    def draft_s(self) -> float:
        """One draft decode (a trained drafter's: one pass)."""
        return (self.drafter.token_x if self.drafter is not None else self.draft_x) * self.token_s

    @property
    def draft_call_s(self) -> float:
        """A drafter's fixed cost per call (0 for a draft model: it costs per decode)."""
        return self.drafter.call_x * self.token_s if self.drafter is not None else 0.0

    @property
    def draft_block(self) -> int:
        return self.drafter.block if self.drafter is not None else 0

    def head_draft_s(self, passes: int) -> float | None:
        """One call of a trained drafter with ``passes`` passes; None for a draft model."""
        d = self.drafter
        if d is None or not d.head:
            return None
        return (d.call_x + d.token_x * passes) * self.token_s

    @property
    def gpu(self) -> bool:
        return self.kind != "measured-cpu"

    def to_json(self) -> dict:
        def num(key: str, value: float) -> object:
            src = self.sources.get(key)
            return {"value": value, "source": src} if src else value

        return {
            "specchat_cost_profile": PROFILE_VERSION, "name": self.name, "title": self.title, "kind": self.kind,
            "hardware": self.hardware, "target": self.target, "draft": self.draft,
            "token_s": num("token_s", self.token_s),
            "verify_x": {str(n): num(f"verify_x.{n}", x) for n, x in sorted(self.verify_x.items())},
            "draft_x": num("draft_x", self.draft_x), "overhead_s": num("overhead_s", self.overhead_s),
            "lookup_s": num("lookup_s", self.lookup_s), "noise": num("noise", self.noise),
            **({"recapture_s": num("recapture_s", self.recapture_s)} if self.recapture_s else {}),
            **({"drafter": self.drafter.to_json()} if self.drafter is not None else {}),
            "notes": list(self.notes),
        }


# what a cost profile's numbers may be (profile_from_json refuses others): the GPU kit's profile writer holds its
# measurements to the same bounds (scripts/gpukit/cost_profile.py), so that what it writes always loads
PROFILE_BOUNDS: dict[str, tuple[float, float]] = {
    "token_s": (1e-6, 60.0), "verify_x": (0.01, 1000.0), "draft_x": (0.0, 100.0), "overhead_s": (0.0, 10.0),
    "lookup_s": (0.0, 10.0), "noise": (0.0, 1.0), "recapture_s": (0.0, 10.0)}


def _number(doc: dict, key: str, where: str, sources: dict[str, str], lo: float, hi: float, *,
            default: float | None = None, label: str | None = None) -> float:
    label = label or key
    raw = doc.get(key, default)
    if isinstance(raw, dict):
        src = raw.get("source")
        if isinstance(src, str) and src.strip():
            sources[label] = src.strip()[:1000]
        raw = raw.get("value")
    if raw is None:
        raise ProfileError(f"{where}: '{label}' is missing")
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or not lo <= raw <= hi:
        raise ProfileError(f"{where}: '{label}' must be a number from {lo:g} to {hi:g}")
    return float(raw)


def profile_from_json(doc: object, where: str) -> CostProfile:
    if not isinstance(doc, dict) or doc.get("specchat_cost_profile") != PROFILE_VERSION:
        raise ProfileError(f"{where}: not a SpecChat cost profile (no \"specchat_cost_profile\": {PROFILE_VERSION})")
    name, kind = doc.get("name"), doc.get("kind")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ProfileError(f"{where}: 'name' must be lower-case letters, digits, '.', '_' or '-'")
    if kind not in PROFILE_KINDS:
        raise ProfileError(f"{where}: 'kind' must be one of {', '.join(PROFILE_KINDS)}")
    sources: dict[str, str] = {}
    token_s = _number(doc, "token_s", where, sources, *PROFILE_BOUNDS["token_s"])
    raw_curve = doc.get("verify_x")
    if not isinstance(raw_curve, dict) or not raw_curve:
        raise ProfileError(f"{where}: 'verify_x' must map batch sizes to costs relative to one token")
    curve: dict[int, float] = {}
    for key in raw_curve:
        if not isinstance(key, str) or not re.fullmatch(r"[1-9][0-9]{0,2}", key):
            raise ProfileError(f"{where}: verify_x size {str(key)[:20]!r} is not a batch size from 1 to 999")
        curve[int(key)] = _number(raw_curve, key, where, sources, *PROFILE_BOUNDS["verify_x"], label=f"verify_x.{key}")
    if curve.get(1) != 1.0:
        raise ProfileError(f"{where}: verify_x must give \"1\": 1.0 (the costs are relative to one token)")
    sizes = sorted(curve)
    if any(curve[b] < curve[a] * 0.999 for a, b in zip(sizes, sizes[1:], strict=False)):
        raise ProfileError(f"{where}: verify_x must not fall as the batch grows")
    profile = CostProfile(
        name=name, title=str(doc.get("title", name))[:200], kind=kind, token_s=token_s, verify_x=curve,
        draft_x=_number(doc, "draft_x", where, sources, *PROFILE_BOUNDS["draft_x"]),
        overhead_s=_number(doc, "overhead_s", where, sources, *PROFILE_BOUNDS["overhead_s"], default=0.0),
        lookup_s=_number(doc, "lookup_s", where, sources, *PROFILE_BOUNDS["lookup_s"], default=0.0),
        noise=_number(doc, "noise", where, sources, *PROFILE_BOUNDS["noise"], default=0.0),
        recapture_s=_number(doc, "recapture_s", where, sources, *PROFILE_BOUNDS["recapture_s"], default=0.0),
        hardware=str(doc.get("hardware", ""))[:200], target=str(doc.get("target", ""))[:200],
        draft=str(doc.get("draft", ""))[:200], sources=sources,
        notes=tuple(str(n)[:500] for n in doc.get("notes", []) if isinstance(n, str))
        if isinstance(doc.get("notes"), list) else (),
        drafter=drafter_costs_from_json(doc["drafter"], f"{where}: drafter", version=False)
        if doc.get("drafter") is not None else None,
    )
    return profile


def drafter_costs_from_json(doc: object, where: str, *, version: bool = True) -> DrafterCosts:
    """A drafter's costs: a file of their own (``version``: it says ``"specchat_drafter_costs": 1``), or a
    profile's ``"drafter"`` object.  Every number finite and in range; one line naming the field if not."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: not a drafter's costs (a JSON object with kind, call_x and token_x)")
    if version and doc.get("specchat_drafter_costs") != DRAFTER_COSTS_VERSION:
        raise ProfileError(f"{where}: not a SpecChat drafter-costs file "
                           f"(no \"specchat_drafter_costs\": {DRAFTER_COSTS_VERSION})")
    kind = doc.get("kind")
    if kind not in DRAFTER_KINDS:
        raise ProfileError(f"{where}: 'kind' must be one of {', '.join(DRAFTER_KINDS)}")
    sources: dict[str, str] = {}
    call_x = _number(doc, "call_x", where, sources, lo=0.0, hi=100.0)
    token_x = _number(doc, "token_x", where, sources, lo=0.0, hi=100.0)
    if call_x + token_x < 1e-6:
        raise ProfileError(f"{where}: 'call_x' and 'token_x' are both 0: drafting is never free")
    if kind == "draft-simple" and call_x:
        raise ProfileError(f"{where}: a draft model (draft-simple) costs per decode: 'call_x' must be 0")
    block = doc.get("block", 0)
    if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block <= MAX_BLOCK:
        raise ProfileError(f"{where}: 'block' must be a whole number of tokens from 1 to {MAX_BLOCK} (0: none)")
    notes = doc.get("notes", [])
    return DrafterCosts(kind, call_x, token_x, block, title=str(doc.get("title", ""))[:200], sources=sources,
                        notes=tuple(str(n)[:500] for n in notes if isinstance(n, str)) if isinstance(notes, list)
                        else ())


def load_drafter_costs(path: Path) -> DrafterCosts:
    """A drafter-costs file (``specchat simulate --drafter-costs FILE``)."""
    return drafter_costs_from_json(_read_json(path, "drafter-costs file"), str(path))


def with_drafter(profile: CostProfile, costs: DrafterCosts) -> CostProfile:
    """The profile's machine and target with another drafter's cost shape."""
    return replace(profile, drafter=costs, title=f"{profile.title}; drafting: {costs.title or costs.kind}")


def shipped_profiles() -> list[str]:
    """Names of the profiles that ship with SpecChat (``specchat simulate --profile NAME``)."""
    folder = resources.files("specchat.harness") / "profiles"
    if not folder.is_dir():
        return []
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_profile(spec: str) -> CostProfile:
    """A shipped profile by name, or a profile file."""
    if _NAME.fullmatch(spec) and not spec.endswith(".json"):
        entry = resources.files("specchat.harness") / "profiles" / f"{spec}.json"
        if not entry.is_file():
            raise ProfileError(f"no shipped cost profile '{spec}' (shipped: {', '.join(shipped_profiles()) or 'none'};"
                               " or give a profile file)")
        return profile_from_json(json.loads(entry.read_text(encoding="utf-8")), spec)
    path = Path(spec)
    if not path.exists():
        raise ProfileError(f"{spec}: no such cost profile (shipped: {', '.join(shipped_profiles()) or 'none'})")
    return profile_from_json(_read_json(path, "cost profile"), spec)


def _read_json(path: Path, what: str) -> object:
    """A small JSON file (a cost profile, a drafter's costs): ProfileError, one line, when it is not one."""
    try:
        raw, more = files.read_capped(path, MAX_PROFILE_BYTES)
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if more:
        raise ProfileError(f"{path}: larger than {MAX_PROFILE_BYTES >> 10} KiB, not a {what}")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProfileError(f"{path}: not JSON ({str(exc)[:120]})") from None


# -- policies -----------------------------------------------------------------------



def _no_guards(k: int, p_min: float) -> ControllerSettings:
    """Always k tokens asked for (prompt lookup: whenever it has a proposal), and no guard rail ever falls back."""
    return ControllerSettings(k_min=k, k_max=k, lookup_k_max=k, p_min=p_min, min_token_acceptance=0.0,
                              min_sequence_acceptance=0.0, cooldown_tokens=0, fallback_warning_share=1.0,
                              min_gain=0.0)


@dataclass(frozen=True, slots=True)
class Policy:
    """One way to decode: a mode and controller settings, plus how the draft's confidence stop reads."""

    key: str  # short id: "plain", "k3", "llama-default", "auto"
    label: str
    mode: Mode
    settings: ControllerSettings
    p_top10: bool = False  # the p_min test reads the draft's top-10 softmax (llama.cpp) instead of the whole vocab
    n_min: int = 0  # drafts shorter than this are dropped (llama.cpp's --spec-draft-n-min)

    @property
    def needs_k(self) -> int:
        return self.settings.k_max if self.mode in (Mode.DRAFT, Mode.AUTO) else 0


def fixed_k(k: int) -> Policy:
    """Always K draft-model tokens: no confidence stop, no guard rails (the classic fixed-length baseline)."""
    return Policy(f"k{k}", f"K={k}", Mode.DRAFT, _no_guards(k, 0.0))


def llama_cpp(n_max: int, n_min: int, p_min: float, label: str, key: str) -> Policy:
    """llama.cpp's draft-simple: up to n_max tokens, stop below p_min (top-10 softmax), drop drafts under n_min."""
    return Policy(key, label, Mode.DRAFT, _no_guards(n_max, p_min), p_top10=True, n_min=n_min)


# common/common.h of the llama.cpp that llama-cpp-python 0.3.36 vendors: n_max 3, n_min 0, p_min 0.0
LLAMA_DEFAULT = llama_cpp(3, 0, 0.0, "llama.cpp defaults (n_max 3, p_min 0)", "llama-default")
# llama-swap's speculative-decoding example (2.47x for Qwen2.5-Coder-32B + 0.5B on a 3090): 16 / 4 / 0.4
LLAMA_PUBLISHED = llama_cpp(16, 4, 0.4, "llama.cpp 16/4/0.4 (published)", "llama-published")


def standard_policies(settings: ControllerSettings | None = None) -> list[Policy]:
    """plain, K = 1..8, llama.cpp's two settings, SpecChat's draft and lookup modes, and auto."""
    s = settings or ControllerSettings()
    return [Policy("plain", "plain", Mode.BASELINE, s), *(fixed_k(k) for k in range(1, 9)), LLAMA_DEFAULT,
            LLAMA_PUBLISHED, Policy("draft", "SpecChat draft", Mode.DRAFT, s),
            Policy("lookup", "SpecChat lookup", Mode.LOOKUP, s), Policy("auto", "SpecChat auto", Mode.AUTO, s)]


# -- one answer ---------------------------------------------------------------------


class Clock:
    """Costs as a run would measure them: the profile's figure times a mean-1 log-normal noise."""

    def __init__(self, profile: CostProfile, seed: int) -> None:
        self.profile = profile
        self._rng = random.Random(seed)

    def __call__(self, seconds: float) -> float:
        sd = self.profile.noise
        if sd <= 0 or seconds <= 0:
            return seconds
        return seconds * math.exp(sd * self._rng.gauss(0.0, 1.0) - sd * sd / 2)

    def calibration(self, k_max: int) -> CostModel:
        """What a calibration at load time would measure on this profile's machine."""
        p = self.profile
        costs = CostModel({n: self(p.verify_s(n)) for n in batch_sizes(k_max)},
                          {CAL_DRAFTER: self(p.draft_s), Drafter.LOOKUP.value: 0.0})
        if p.draft_call_s:  # a trained drafter's fixed cost per call, as its calibration would time it
            costs.draft_call_s[CAL_DRAFTER] = self(p.draft_call_s)
        costs.recapture_s = self(p.recapture_s)  # a calibration on a shape-sensitive backend measures it
        return costs


def controller_for(policy: Policy, clock: Clock) -> DraftController:
    """A controller as a freshly loaded pair has it: costs from a calibration on the profile's machine."""
    s = policy.settings
    return DraftController(s, clock.calibration(max(s.k_max, s.lookup_k_max)))  # as SpeculativePair calibrates


class TraceDecodes:
    """A round's decodes replayed from an agreement trace and charged on a cost profile (the simulated
    clock): the simulator's side of :class:`~specchat.engine.round.Rounds`, as :class:`PairDecodes
    <specchat.engine.generate.PairDecodes>` is the loop's.  Each drafter replays itself (its ``Replay``)."""

    room = 1 << 30  # a trace has no context to fill

    def __init__(self, pt: PromptTrace, clock: Clock, replays: dict[Drafter, Replay]) -> None:
        self.pt = pt
        self.clock = clock
        self.replays = replays
        self.i = 0  # index of id_last, the newest committed token
        self.n_generated = 1
        self._accepted = 0  # of the draft in flight: what the trace says the target accepts
        # the verify sizes of the two calls before (0: the prompt's prefill, another shape): llama.cpp's CUDA
        # backend replays a graph from the third call of a shape, whichever loop feeds it, so plain decoding
        # pays its first two calls after the prompt as the speculative loop does (shared notes, "CUDA graphs")
        self._shapes = (0, 0)

    def offer(self, drafter: Drafter, k_cap: int) -> Offer:
        return self.replays[drafter].offer(self.i, k_cap)

    def draft(self, drafter: Drafter, plan: Plan) -> Draft:
        got = self.replays[drafter].draft(self.i, plan)
        self._accepted = got.accepted
        return Draft(got.drafted, got.seconds, got.catch_up, got.decoded, got.spare)

    def verify(self, draft: Draft, rows: int, fresh: bool) -> Verified:
        accepted, self._accepted = min(self._accepted, draft.n), 0
        profile, n_tokens = self.clock.profile, len(self.pt.tokens)
        # the clock charges what the backend does (the loop's ``fresh`` is its own view of the same rule)
        recaptured = not rows == self._shapes[0] == self._shapes[1]
        self._shapes = (rows, self._shapes[0])
        seconds = self.clock(profile.verify_s(rows) + (profile.recapture_s if recaptured else 0.0))
        last = self.i + accepted + 1  # the target's own token after the accepted drafts ...
        emitted = accepted + 1
        if last > n_tokens - 1:  # ... unless the accepted drafts already ended the answer
            last, emitted = n_tokens - 1, accepted
        self.n_generated += emitted - (1 if self.pt.ended and last == n_tokens - 1 else 0)
        committed = tuple(self.pt.tokens[self.i + 1 : last + 1])
        self.i = last
        return Verified(accepted, emitted, seconds, committed)

    def overhead(self, draft_s: float, verify_s: float) -> float:
        return self.clock(self.clock.profile.overhead_s)


def answer(controller: DraftController, policy: Policy, pt: PromptTrace, clock: Clock,
           on_round: Callable[[RoundStats], None] | None = None) -> Counts:
    """One answer, the engine's rounds (:class:`~specchat.engine.round.Rounds`) on the trace: its counts as
    the engine would report them (and each round's stats to ``on_round``)."""
    plan = controller.answer_plan(policy.mode, has_model=bool(pt.draft_match))
    controller.start_answer()
    # auto measures the prompt's agreement at prefill where its draft model may run and decodes replay CUDA
    # graphs (engine/generate.py)
    if (policy.mode is Mode.AUTO and clock.profile.recapture_s and pt.prompt_agreement is not None
            and any(KINDS[d].needs_model for d in plan.drafters)):
        controller.new_prompt(pt.prompt_agreement)
    if pt.ended and len(pt.tokens) == 1:
        return Counts.of_answer(0, 0.0, prompt_tokens=pt.prompt_tokens)
    shaped = bool(clock.profile.recapture_s)  # the profile replays CUDA graphs: engine/shapes.py's loop runs
    ctx = ReplayContext(pt, clock.profile, clock, controller.settings, shaped=shaped, p_top10=policy.p_top10,
                        n_min=policy.n_min)
    decodes = TraceDecodes(pt, clock, {name: KINDS[name].replay(ctx) for name in plan.drafters})
    rounds = Rounds(controller, policy.mode, decodes, plan.drafters, shaped=shaped and bool(plan.drafters))
    decode_s = 0.0
    while decodes.i < len(pt.tokens) - 1:
        played = rounds.play(pt.max_tokens - decodes.n_generated - 1)
        decode_s += played.stats.wall_s
        if on_round is not None:
            on_round(played.stats)
    return rounds.counts + Counts.of_answer(pt.visible_tokens, decode_s, prompt_tokens=pt.prompt_tokens)


# -- tables ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """Per policy and task (and "all"), the pooled counts of the simulated answers."""

    profile: CostProfile
    trace: Trace
    policies: list[Policy]
    counts: dict[str, dict[str, Counts]]  # policy key -> task -> counts

    @property
    def tasks(self) -> list[str]:
        return list(dict.fromkeys(p.task for p in self.trace.prompts)) + ["all"]

    def rate(self, key: str, task: str) -> float:
        return self.counts[key][task].decode_tok_s or 0.0

    def multiplier(self, key: str, task: str) -> float:
        plain = self.rate("plain", task)
        return self.rate(key, task) / plain if plain else 0.0

    def best_fixed(self, task: str) -> tuple[str, float]:
        fixed = [p.key for p in self.policies if re.fullmatch(r"k[0-9]+", p.key)]
        best = max(fixed, key=lambda k: self.rate(k, task))
        return best, self.rate(best, task)


def simulate(trace: Trace, profile: CostProfile, policies: Sequence[Policy] | None = None, *,
             seed: int = 0) -> Result:
    """Each policy answers every prompt of the trace in order, on its own controller (one loaded pair)."""
    usable = []
    for p in policies or standard_policies():
        if p.needs_k <= trace.k_max:
            usable.append(p)
        elif p.key in ("draft", "lookup", "auto"):  # SpecChat's own modes: at the trace's depth, and said
            s = replace(p.settings, k_max=trace.k_max, k_min=min(p.settings.k_min, trace.k_max))
            usable.append(replace(p, settings=s, label=f"{p.label} (K<={trace.k_max})"))
    counts: dict[str, dict[str, Counts]] = {}
    for policy in usable:
        clock = Clock(profile, seed)  # the same draws for every policy: differences are the policies
        controller = controller_for(policy, clock)
        per_task: dict[str, Counts] = {}
        for pt in trace.prompts:
            c = answer(controller, policy, pt, clock)
            per_task[pt.task] = per_task.get(pt.task, Counts()) + c
            per_task["all"] = per_task.get("all", Counts()) + c
        counts[policy.key] = per_task
    return Result(profile, trace, usable, counts)


def simulate_agreement(alphas: Sequence[float], profile: CostProfile, *, seed: int = 0, tokens: int = 256,
                       prompts: int = 8) -> Result:
    """The GPU kit's measurement, simulated: per agreement share a freshly loaded pair answers its own
    prompts (as ``gpu_kit.py measure`` runs one bench per alpha); the columns are the shares."""
    merged: dict[str, dict[str, Counts]] = {}
    policies: list[Policy] = []
    all_prompts: list[PromptTrace] = []
    trace = None
    for alpha in alphas:
        trace = agreement_trace(alpha, prompts=prompts, tokens=tokens, seed=seed)
        result = simulate(trace, profile, seed=seed)
        policies = result.policies
        all_prompts += trace.prompts
        task = trace.prompts[0].task
        for key, per_task in result.counts.items():
            merged.setdefault(key, {})[task] = per_task[task]
            merged[key]["all"] = merged[key].get("all", Counts()) + per_task[task]
    if trace is None:
        raise ProfileError("no agreement share to simulate")
    shares = ", ".join(f"{a:g}" for a in alphas)
    return Result(profile, replace(trace, draft=f"agreement-pair drafts, alpha {shares}", prompts=all_prompts),
                  policies, merged)


# the goals of issue 22 on the kit's agreement pairs: (share, modes, at least this x plain)
AGREEMENT_GOALS = ((0.9, ("draft", "auto"), 1.30), (0.8, ("draft", "auto"), 1.10), (0.6, ("auto",), 0.99))


def replay_bench(trace: Trace, profile: CostProfile, modes: Sequence[Mode], *, repeat: int,
                 settings: ControllerSettings | None = None, seed: int = 0) -> dict[str, dict[str, Counts]]:
    """The bench's own schedule on one controller (one loaded pair): prompts in order, each repeated, the
    modes alternating direction per repeat; per (prompt, mode) the median-rate repeat counts, as in the bench.
    Returns mode -> task (and "all") -> pooled counts."""
    s = settings or ControllerSettings()
    if s.k_max > trace.k_max:
        raise ProfileError(f"the trace drafts up to {trace.k_max} tokens and the controller up to {s.k_max}: "
                           "record the trace with a larger --trace-k-max")
    clock = Clock(profile, seed)
    policies = {m: Policy(m.value, m.value, m, s) for m in modes}
    controller = controller_for(next(iter(policies.values())), clock)
    runs: dict[tuple[str, str], list[Counts]] = {}
    for pt in trace.prompts:
        for r in range(repeat):
            for mode in (modes if r % 2 == 0 else list(reversed(modes))):
                runs.setdefault((pt.id, mode.value), []).append(answer(controller, policies[mode], pt, clock))
    tasks = {pt.id: pt.task for pt in trace.prompts}
    out: dict[str, dict[str, Counts]] = {}
    for (pid, mode_key), group in runs.items():
        median = sorted(group, key=lambda c: c.decode_tok_s or 0.0)[(len(group) - 1) // 2]
        per_task = out.setdefault(mode_key, {})
        for task in (tasks[pid], "all"):
            per_task[task] = per_task.get(task, Counts()) + median
    return out


def goals(result: Result) -> list[tuple[str, bool, str]]:
    """The issue's goals for this profile: (goal, met, figures)."""
    out: list[tuple[str, bool, str]] = []
    tasks = result.tasks
    keys = {p.key for p in result.policies}
    if "auto" not in keys:
        return out
    if any(t.startswith("a=") for t in tasks):  # agreement pairs: the kit's goals per share
        for share, modes, least in AGREEMENT_GOALS:
            task = f"a={share:.2f}"
            if task in tasks:
                got = {m: result.multiplier(m, task) for m in modes if m in keys}
                out.append((f"{' and '.join(got)} >= {least:.2f}x plain at alpha {share:g}",
                            all(v >= least for v in got.values()),
                            ", ".join(f"{m} {v:.2f}x" for m, v in got.items())))
        return out
    if result.profile.gpu:
        if any(k.startswith("k") and k[1:].isdigit() for k in keys):
            ratios = {t: result.rate("auto", t) / result.best_fixed(t)[1] for t in tasks if result.best_fixed(t)[1]}
            worst = min(ratios, key=lambda t: ratios[t])
            out.append(("auto >= 0.97x the best fixed K per task", all(v >= 0.97 for v in ratios.values()),
                        f"worst {ratios[worst]:.3f}x on {worst}"))
        for key in ("llama-default", "llama-published"):
            if key in keys:
                ratios = {t: result.rate("auto", t) / result.rate(key, t) for t in tasks if result.rate(key, t)}
                worst = min(ratios, key=lambda t: ratios[t])
                out.append((f"auto >= {key}", all(v >= 1.0 for v in ratios.values()),
                            f"worst {ratios[worst]:.3f}x on {worst}"))
    else:
        ratios = {t: result.multiplier("auto", t) for t in tasks}
        worst = min(ratios, key=lambda t: ratios[t])
        out.append(("auto >= 0.97x plain per task", all(v >= 0.97 for v in ratios.values()),
                    f"worst {ratios[worst]:.3f}x on {worst}"))
    return out


def format_result(result: Result) -> str:
    """The simulator's table: x plain per policy (rows) and task (columns), then the goals."""
    p, t = result.profile, result.trace
    tasks = result.tasks
    lines = [f"profile {p.name} ({p.kind}): {p.title}",
             f"trace: target {t.target}, draft {t.draft or '-'}, {len(t.prompts)} prompts, drafts up to {t.k_max}",
             f"one target token {p.token_s * 1e3:.2f} ms; verify 2/4/8/16 tokens "
             + "/".join(f"{p.verify_s(n) / p.token_s:.2f}x" for n in (2, 4, 8, 16))
             + (f"; {p.drafter.describe()}" if p.drafter is not None else f"; draft token {p.draft_x:.2f}x")
             + f"; loop {p.overhead_s * 1e3:.2f} ms/round; noise {p.noise:.0%}",
             ""]
    width = max(len(x.label) for x in result.policies) + 2
    head = "x plain".ljust(width) + "".join(f"{task[:9]:>10}" for task in tasks)
    lines += [head, "-" * len(head)]
    for pol in result.policies:
        lines.append(pol.label.ljust(width) + "".join(f"{result.multiplier(pol.key, task):>9.2f}x" for task in tasks))
    lines.append("plain tok/s".ljust(width) + "".join(f"{result.rate('plain', task):>10.1f}" for task in tasks))
    keys = {x.key for x in result.policies}
    if "auto" in keys:
        acc = [result.counts["auto"][task].token_acceptance for task in tasks]
        lines.append("auto token acc.".ljust(width) + "".join(f"{'-' if a is None else f'{a:.0%}':>10}" for a in acc))
        if "k1" in keys:
            lines.append("best fixed K".ljust(width) + "".join(
                f"{'K=' + result.best_fixed(task)[0][1:]:>10}" for task in tasks))
            lines.append("auto / best K".ljust(width) + "".join(
                f"{result.rate('auto', task) / (result.best_fixed(task)[1] or 1):>9.2f}x" for task in tasks))
        for key in ("llama-default", "llama-published"):
            if key in keys:
                lines.append(f"auto / {key}".ljust(width) + "".join(
                    f"{result.rate('auto', task) / (result.rate(key, task) or 1):>9.2f}x" for task in tasks))
    for goal, met, figures in goals(result):
        lines.append(f"goal: {goal}: {'met' if met else 'MISSED'} ({figures})")
    return "\n".join(lines)


def result_json(result: Result) -> dict:
    return {
        "profile": result.profile.to_json(),
        "trace": {"target": result.trace.target, "draft": result.trace.draft, "k_max": result.trace.k_max,
                  "prompts": len(result.trace.prompts)},
        "policies": [{"key": p.key, "label": p.label} for p in result.policies],
        "rows": [{"policy": p.key, "task": task, "decode_tok_s": result.rate(p.key, task),
                  "multiplier": result.multiplier(p.key, task),
                  "token_acceptance": result.counts[p.key][task].token_acceptance,
                  "sequence_acceptance": result.counts[p.key][task].sequence_acceptance,
                  "mean_k": result.counts[p.key][task].mean_k, **result.counts[p.key][task].to_dict()}
                 for p in result.policies for task in result.tasks],
        "goals": [{"goal": g, "met": met, "figures": f} for g, met, f in goals(result)],
    }


# -- a profile from a bench run ---------------------------------------------------------


def _median(values: Iterable[float]) -> float | None:
    xs = sorted(values)
    return xs[len(xs) // 2] if xs else None


def measured_profile(name: str, title: str, rounds: Sequence[RoundStats], calibration: CostModel, *,
                     kind: str = "measured-cpu", hardware: str = "", target: str = "", draft: str = "",
                     source: str = "", min_samples: int = 5) -> CostProfile:
    """A profile from the rounds a bench run measured, the load-time calibration filling sizes it did not use.

    Verify costs per batch size are the median of the measured rounds (at least ``min_samples`` of them) and
    the calibration's figure scaled to the measured one-token cost elsewhere; a draft token is the median
    cost per draft decode of model rounds that needed no catch-up; the noise is the robust spread (1.4826 x
    the median absolute deviation) of the plain rounds' verify times.
    """
    by_size: dict[int, list[float]] = {}
    for r in rounds:
        by_size.setdefault(r.drafted + 1, []).append(r.verify_s)
    one = _median(by_size.get(1, [])) or calibration.verify(1)
    scale = one / calibration.verify(1)
    sizes = set(calibration.verify_s) | {n for n, v in by_size.items() if len(v) >= min_samples}
    curve = {}
    for n in sorted(sizes):
        measured = by_size.get(n, [])
        v = _median(measured) if len(measured) >= min_samples else calibration.verify(n) * scale
        curve[n] = max(v / one, 1.0)  # type: ignore[operator]
    for a, b in zip(sorted(curve), sorted(curve)[1:], strict=False):  # noise must not make the curve fall
        curve[b] = max(curve[b], curve[a])
    curve[1] = 1.0
    per_decode = [r.draft_s / (r.drafted if r.drafted == r.k else r.drafted + 1)
                  for r in rounds if r.drafter is Drafter.MODEL and r.drafted and r.catch_up == 0]
    draft_token = _median(per_decode) or calibration.draft_s.get(CAL_DRAFTER, 0.0)
    lookup = _median(r.draft_s for r in rounds if r.drafter is Drafter.LOOKUP) or 0.0
    overhead = _median(r.overhead_s for r in rounds) or 0.0
    plain = by_size.get(1, [])
    mad = _median(abs(v - one) for v in plain) or 0.0
    noise = min(1.4826 * mad / one, 1.0) if plain else 0.0
    src = source or "measured by specchat bench"
    sources = {"token_s": f"{src}: median plain-round verify ({len(plain)} rounds)",
               "draft_x": f"{src}: median draft decode of {len(per_decode)} model rounds / token_s",
               "overhead_s": f"{src}: median loop time per round ({len(rounds)} rounds)",
               "lookup_s": f"{src}: median prompt-lookup proposal",
               "noise": f"{src}: 1.4826 x MAD / median of the plain rounds' verify times"}
    for n in curve:
        k = len(by_size.get(n, []))
        sources[f"verify_x.{n}"] = (f"{src}: median of {k} rounds" if k >= min_samples
                                    else f"{src}: load-time calibration, scaled to the measured one-token cost")
    return CostProfile(name=name, title=title, kind=kind, token_s=one, verify_x=curve,
                       draft_x=draft_token / one, overhead_s=overhead, lookup_s=lookup, noise=noise,
                       hardware=hardware, target=target, draft=draft, sources=sources,
                       notes=("sizes beyond the largest measured one follow the last slope",))


def save_profile(profile: CostProfile, path: Path) -> None:
    files.write_text_atomically(path, json.dumps(profile.to_json(), indent=1) + "\n")


def with_noise(profile: CostProfile, noise: float) -> CostProfile:
    return replace(profile, noise=noise)
