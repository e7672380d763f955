"""What a chat asks a backend for, and the event that opens every answer.  Qt-free.

:class:`AnswerRequest` is one answer to ask any backend for (a local pair or a server
reads what applies to it); :class:`Started` is the first event of every answer, before
the generation loop's own events (:mod:`.events`).  They live in the engine, beside its
other events, so the remote clients that speak these events need nothing above them.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.context_policy import ContextPolicy
from specchat.metrics import Counts

from .events import Event
from .settings import ControllerSettings, Mode, SamplingSettings


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """One answer to ask a backend for (a local pair or a server reads what applies to it)."""

    messages: tuple[dict[str, str], ...]
    mode: Mode = Mode.AUTO  # local: the speculation mode (a server drafts as it was started)
    sampling: SamplingSettings = SamplingSettings()  # with its JSON schema or grammar, if any
    max_tokens: int = 1024
    reasoning: bool | None = None  # the template's reasoning switch; None: the model's default
    stop: tuple[str, ...] = ()
    # no KV cache reused from the last answer (a bench: prefill measured as on a cold start, and the same
    # floating-point path as a fresh process: llama.cpp's results depend a little on the batch split)
    fresh_prompt: bool = False
    # local: the controller's live settings for this answer (the app's, as they are now); None: as loaded.
    # A server drafts as it was started and ignores it.
    controller: ControllerSettings | None = None
    # local: what is sent once the chat outgrows the context (the oldest turns left out, or not: STOP);
    # a server keeps its own context and gets every message
    context_policy: ContextPolicy = ContextPolicy.STOP
    # a raw prompt instead of ``messages`` through the chat template (the API's /v1/completions);
    # a local pair only: a server backend refuses it
    prompt: str = ""
    # the answer's task tag (a chat's task: code, edit, chat, json, summary, creative or the user's own)
    task: str = "chat"
    # a managed llama-server under auto: this task's answers measured there, oldest first, as (speculation
    # on, their counts), from the stored task runs (backends/server_auto.py); () : the backend's own
    measured: tuple[tuple[bool, Counts], ...] = ()


@dataclass(frozen=True, slots=True)
class Started:
    """The prompt is ready; decoding begins (the first event of every answer)."""

    prompt_tokens: int  # 0 where the backend does not say before it answers (a server)
    starts_in_reasoning: bool  # the template opened the think block in the prompt itself
    left_out: int = 0  # messages of the request the context policy did not send
    left_out_at: int = 0  # the index in the request's messages of the first one not sent (they are contiguous)


AnswerEvent = Started | Event
