"""The names of speculation: modes, drafters, and which drafters each mode may use.

A Qt-free leaf (it imports nothing of SpecChat's): the engine, the store, the config, the
CLI and the UI all derive their lists from it, so a mode or a drafter is named once.

- :class:`Mode`: what a chat asks for (stored with it as ``speculation``).
- :class:`Drafter`: who proposed a round's draft (``NONE``: a plain round).
- :data:`MODES`: one row per mode, in the order menus show them: its label, its one-line
  help, and the drafters it may use, in the order the loop offers them to the controller
  (an earlier drafter wins a tie).  The engine's drafter registry
  (``specchat.engine.drafters.DRAFTERS``) says how each drafter is built, priced and replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    BASELINE = "baseline"  # plain decoding, no drafter
    DRAFT = "draft"  # a draft model proposes tokens
    LOOKUP = "lookup"  # n-gram prompt lookup proposes tokens
    AUTO = "auto"  # the controller picks drafter and K (0 included) by expected speed


class Drafter(StrEnum):
    """Who proposed a round's draft (``NONE``: a plain round)."""

    NONE = "none"
    MODEL = "model"  # a small draft model with the same tokenizer
    LOOKUP = "lookup"  # n-gram prompt lookup


@dataclass(frozen=True, slots=True)
class ModeInfo:
    mode: Mode
    label: str  # what a menu shows
    help: str  # one line: what it does
    drafters: tuple[Drafter, ...]  # the drafters it may use, in the order they are offered


MODES: tuple[ModeInfo, ...] = (
    ModeInfo(Mode.AUTO, "Speculation: auto", "speculate only where it pays", (Drafter.MODEL, Drafter.LOOKUP)),
    ModeInfo(Mode.DRAFT, "Draft model", "always the draft model", (Drafter.MODEL,)),
    ModeInfo(Mode.LOOKUP, "Prompt lookup", "n-grams from the prompt", (Drafter.LOOKUP,)),
    ModeInfo(Mode.BASELINE, "Plain (no speculation)", "plain decoding", ()),
)

PLAIN_MODE = Mode.BASELINE.value
MODE_NAMES: tuple[str, ...] = tuple(m.value for m in Mode)  # as stored: "baseline" first
MENU_NAMES: tuple[str, ...] = tuple(m.mode.value for m in MODES)  # as menus and --mode list them
MODE_DRAFTERS: dict[Mode, tuple[Drafter, ...]] = {m.mode: m.drafters for m in MODES}
LEGACY_MODES = {"off": PLAIN_MODE}  # what chats and answers of schema 1 called plain decoding
MODES_HELP = "; ".join(f"{m.mode.value}: {m.help}" for m in MODES)
