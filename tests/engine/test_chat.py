"""Chat formatting uses the model's own template and passes the reasoning switch through."""

import pytest

from specchat.engine.chat import ChatFormat, TemplateError

# the shape of Qwen3's template: a generation prompt that closes an empty think block when thinking is off
QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
OPENS_THINK = "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n"


def test_template_with_a_reasoning_switch():
    fmt = ChatFormat(QWEN3_LIKE, "", "<|im_end|>")
    assert fmt.supports_reasoning_switch
    msgs = [{"role": "user", "content": "2+2?"}]
    off = fmt.render(msgs, reasoning=False)
    on = fmt.render(msgs, reasoning=True)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")


def test_template_without_a_switch_ignores_it():
    fmt = ChatFormat("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}", "<s>", "</s>")
    assert not fmt.supports_reasoning_switch
    msgs = [{"role": "user", "content": "hi"}]
    assert fmt.render(msgs, reasoning=True) == fmt.render(msgs, reasoning=False) == "[user] hi\n"


def test_missing_template_falls_back_to_chatml():
    fmt = ChatFormat(None, "", "<|im_end|>")
    assert not fmt.from_model
    assert "<|im_start|>user\nhi<|im_end|>" in fmt.render([{"role": "user", "content": "hi"}])


def test_sandboxed_template_cannot_reach_python_internals():
    fmt = ChatFormat("{{ messages.__class__.__mro__ }}", "", "", name="m.gguf")
    with pytest.raises(TemplateError, match=r"^m.gguf: its chat template failed: access to attribute '__class__'"):
        fmt.render([{"role": "user", "content": "x"}])


def test_a_template_that_does_not_compile_refuses_the_model():
    """Refused, not replaced by ChatML: the model would be prompted in a format it was not
    trained on and answer badly with no sign why."""
    with pytest.raises(TemplateError, match=r"^m.gguf: its chat template failed: .*\(line 1\)$"):
        ChatFormat("{% if %}", "", "", name="m.gguf")
