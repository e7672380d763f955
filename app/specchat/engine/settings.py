"""Settings the engine takes: sampling (with structured output) and the draft-length controller.

Plain frozen dataclasses with defaults; the UI and the config file build them.  Sampling and
structured output are defined in the leaf :mod:`specchat.sampling_settings` (a chat stores the
same type) and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from specchat.modes import Drafter, Mode  # the names live in one leaf (specchat/modes.py)
from specchat.sampling_settings import (
    MAX_STRUCTURED_BYTES,
    STRUCTURED_LABELS,
    GrammarError,
    SamplingSettings,
    Structured,
    StructuredOutput,
)

__all__ = ["MAX_STRUCTURED_BYTES", "STRUCTURED_LABELS", "ControllerSettings", "Drafter", "GrammarError", "Mode",
           "SamplingSettings", "Structured", "StructuredOutput"]


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    k_max: int = 8  # longest draft
    k_min: int = 1  # shortest draft in the forced modes (draft, lookup)
    p_min: float = 0.6  # the draft stops early when its top probability is below this
    lookup_ngram: int = 3  # longest n-gram prompt lookup matches
    # longest prompt-lookup draft: behind a long match (a copy) most of 16 tokens are accepted, and on a
    # GPU a 16-token verify costs about what 8 do (H100: 2.4x one token for 8 to 16)
    lookup_k_max: int = 16
    window_rounds: int = 16  # rounds in the acceptance window of the guard rails
    min_token_acceptance: float = 0.5  # below this over the window: fall back
    min_sequence_acceptance: float = 0.6  # below this over the window: fall back
    cooldown_tokens: int = 64  # plain tokens after a fallback before trying again (0: the rails never fall back)
    fallback_warning_share: float = 0.15  # warn when more rounds than this fell back
    probe_interval_tokens: int = 64  # auto: re-probe a drafter it has stopped using (x4 for a model)
    min_gain: float = 1.05  # auto speculates only if it expects this speed-up (lookup mode: up to 1.0; 0: always)
    explore_z: float = 1.0  # auto plans with the acceptance estimate plus this many standard deviations

    def load_part(self) -> ControllerSettings:
        """Only what loading a pair depends on (:data:`LOAD_FIELDS`), the rest at its default: two
        pair configs whose controllers differ in live fields alone load the same pair."""
        return ControllerSettings(**{name: getattr(self, name) for name in LOAD_FIELDS})

    def with_live(self, other: ControllerSettings) -> ControllerSettings:
        """These settings with ``other``'s live fields (every field but :data:`LOAD_FIELDS`); k_min
        never above this k_max."""
        live = {f.name: getattr(other, f.name) for f in fields(self) if f.name not in LOAD_FIELDS}
        live["k_min"] = min(live["k_min"], self.k_max)
        return replace(self, **live)

    def validate(self) -> None:
        if not 1 <= self.k_min <= self.k_max <= 32:
            raise ValueError("need 1 <= k_min <= k_max <= 32")
        if not 1 <= self.lookup_k_max <= 32:
            raise ValueError("need 1 <= lookup_k_max <= 32")
        for name in ("p_min", "min_token_acceptance", "min_sequence_acceptance", "fallback_warning_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1]")


# What a loaded pair is built with: the batch sizes its calibration measures (up to the larger K
# max), the lookup drafter's n-gram and the acceptance windows' length. Every other field is live:
# a change of it (in Settings) takes effect from the next answer, with no reload
# (SpeculativePair.retune, from each answer's request).
LOAD_FIELDS = frozenset({"k_max", "lookup_k_max", "lookup_ngram", "window_rounds"})
