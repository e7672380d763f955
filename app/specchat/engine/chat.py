"""Chat formatting with the GGUF's own chat template.

Uses llama-cpp-python's sandboxed Jinja formatter (``Jinja2ChatFormatter``).
The rendered prompt already holds any BOS the template wants, so it is
tokenized once, with the target, without adding special tokens again (the same
rule llama-cpp-python's chat handlers follow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from llama_cpp import llama_types
from llama_cpp.llama_chat_format import CHATML_CHAT_TEMPLATE, Jinja2ChatFormatter

from .reasoning import OPEN_TAG
from .runtime import LoadedModel


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    text: str
    tokens: list[int]
    starts_in_reasoning: bool  # the template opened a <think> block for the model


class ChatFormat:
    def __init__(self, template: str | None, bos_token: str, eos_token: str) -> None:
        self.template = template or CHATML_CHAT_TEMPLATE
        self.from_model = template is not None
        self._formatter = Jinja2ChatFormatter(self.template, eos_token=eos_token, bos_token=bos_token)

    @classmethod
    def for_model(cls, model: LoadedModel) -> ChatFormat:
        vocab_bos = model.meta("tokenizer.ggml.bos_token_id")
        vocab_eos = model.meta("tokenizer.ggml.eos_token_id")
        bos = model.token_text(int(vocab_bos)) if vocab_bos is not None else ""
        eos = model.token_text(int(vocab_eos)) if vocab_eos is not None else ""
        return cls(model.chat_template(), bos, eos)

    @property
    def supports_reasoning_switch(self) -> bool:
        """True when the template takes ``enable_thinking`` (Qwen3 and friends)."""
        return "enable_thinking" in self.template

    def render(self, messages: list[dict[str, str]], *, reasoning: bool | None = None) -> str:
        kwargs: dict[str, Any] = {}  # extra template variables, beside the formatter's own parameters
        if reasoning is not None and self.supports_reasoning_switch:
            kwargs["enable_thinking"] = reasoning
        # the formatter hands the messages to Jinja as they are: role/content dicts are what it reads
        typed = cast("list[llama_types.ChatCompletionRequestMessage]", messages)
        return self._formatter(messages=typed, **kwargs).prompt

    def prompt(self, model: LoadedModel, messages: list[dict[str, str]], *, reasoning: bool | None = None) -> ChatPrompt:
        text = self.render(messages, reasoning=reasoning)
        tokens = model.tokenize(text, add_special=False, parse_special=True)
        return ChatPrompt(text, tokens, text.rstrip().endswith(OPEN_TAG))
