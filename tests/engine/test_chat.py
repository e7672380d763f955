"""Chat formatting uses the model's own template and passes the reasoning switch through."""

from specchat.engine.chat import ChatFormat

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
    fmt = ChatFormat("{{ messages.__class__.__mro__ }}", "", "")
    try:
        out = fmt.render([{"role": "user", "content": "x"}])
    except Exception as exc:  # jinja2's SecurityError
        assert "unsafe" in str(exc).lower() or "security" in type(exc).__name__.lower()
    else:
        assert "object" not in out
