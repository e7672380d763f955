"""A chat template is code from the model file: every way it can fail is one line naming
the model, it cannot run long, write or build without bound, and a failure frees the model."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import gguf
import psutil
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from helpers.fakes import FakeModel, FakeSpec, fake_pair
from specchat.engine import chat
from specchat.engine.chat import ChatFormat, TemplateCancelled, TemplateError
from specchat.engine.pair import PairConfig, SpeculativePair
from specchat.engine.runtime import LoadCancelled, LoadedModel, ModelOptions
from specchat.errors import UserError

MSGS = [{"role": "user", "content": "hi"}]
QWEN = "qwen.gguf"


def render(template: str, **kwargs) -> str:
    return ChatFormat(template, "<s>", "</s>", name=QWEN).render(MSGS, **kwargs)


def failure(template: str) -> str:
    with pytest.raises(TemplateError) as caught:
        render(template)
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in message and message.startswith(f"{QWEN}: ")
    assert caught.value.__context__ is None and caught.value.__cause__ is None  # no frames kept
    return message


@pytest.mark.parametrize(("template", "says"), [
    ("{% for m in messages %}{{ m.content }", "its chat template failed: unexpected '}' (line 1)"),
    ("{{ messages|no_such_filter }}", "its chat template failed: No filter named 'no_such_filter'"),
    ("{{ no_such_function() }}", "its chat template failed: 'no_such_function' is undefined"),
    ("{{ raise_exception('Conversation roles must alternate user/assistant') }}",
     "its chat template raised: Conversation roles must alternate user/assistant"),
    ("{{ 1 + 'a' }}", "its chat template failed: TypeError: unsupported operand"),
    ("{{ 1 // 0 }}", "its chat template failed: ZeroDivisionError"),
    ("{{ messages.__class__.__mro__ }}", "its chat template failed: access to attribute '__class__'"),
    ("{{ ().__class__.__base__.__subclasses__() }}", "its chat template failed: access to attribute '__class__'"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "its chat template failed: RecursionError"),
])
def test_every_template_error_is_one_line_naming_the_model(template, says):
    assert says in failure(template)


@pytest.mark.parametrize("template", [
    "{{ 'x' * 10**9 }}",
    "{{ ['x'] * 10**9 }}",
    "{{ 3 ** (10**8) }}",
    "{% set ns = namespace(n=3) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n }}",
    "{{ '%999999999s' % 'a' }}",
    "{{ '%*s' % (999999999, 'a') }}",
    "{{ '{:>999999999}'.format('a') }}",
    "{{ '{a:>999999999}'.format_map({'a': 1}) }}",
    "{{ 'a'|center(10**9) }}",
    "{{ 'a'|indent(10**9) }}",
    "{{ ('x' * 4000000)|replace('', 'yyyy') }}",
    "{{ ('x' * 4000000).replace('x', 'yyyy') }}",
    "{{ (['x' * 4000000] * 1000)|join }}",
    "{{ ''.join(['x' * 4000000] * 1000) }}",
    "{{ ('a\n' * 1000000)|indent('x' * 1000) }}",
    "{{ '%s'|format('x') ~ ('%999999999d'|format(1)) }}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}{% endmacro %}{{ d('x', 64) }}",
])
def test_a_template_cannot_build_a_huge_value(template):
    """Refused before the value exists (or stopped by the output cap): the process never
    holds gigabytes, and the render ends at once instead of at the deadline."""
    rss0 = psutil.Process().memory_info().rss
    t0 = time.monotonic()
    message = failure(template)
    assert any(s in message for s in ("at most", "more than", "bits")), message
    assert time.monotonic() - t0 < chat.RENDER_SECONDS + 1.0
    assert psutil.Process().memory_info().rss - rss0 < 1 << 30


@pytest.mark.parametrize("template", [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% if i < 0 %}x{% endif %}{% endfor %}{% endfor %}",
    "{% macro d(n) %}{% if n %}{{ d(n - 1) }}{{ d(n - 1) }}{% else %}xxxxxxxx{% endif %}{% endmacro %}{{ d(40) }}",
])
def test_a_template_that_loops_is_stopped_at_the_deadline(template, monkeypatch):
    monkeypatch.setattr(chat, "RENDER_SECONDS", 0.3)
    t0 = time.monotonic()
    assert "its chat template did not finish within 0.3 s" in failure(template)
    assert time.monotonic() - t0 < 2.0  # not the 10**10 iterations


def test_the_output_is_capped(monkeypatch):
    monkeypatch.setattr(chat, "MAX_PROMPT_CHARS", 10_000)
    assert "produced more than 10000 characters" in failure("{% for i in range(5000) %}xxxxxxxx{% endfor %}")


def test_a_huge_template_is_refused_before_compiling(monkeypatch):
    monkeypatch.setattr(chat, "MAX_TEMPLATE_CHARS", 1000)
    with pytest.raises(TemplateError, match="its chat template is 1001 characters"):
        ChatFormat("x" * 1001, "", "", name=QWEN)


def test_cancel_stops_a_slow_render_at_once(monkeypatch):
    """What shutdown relies on: a cancel from another thread ends a render that is running.

    Events, not clocks: the other thread cancels once the render has started, and the render's
    own deadline is pushed far out, so only the cancel can end it, however loaded the machine.
    """
    monkeypatch.setattr(chat, "RENDER_SECONDS", 600.0)
    fmt = ChatFormat("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "", "",
                     name=QWEN)
    started, flag = threading.Event(), threading.Event()

    def cancelled() -> bool:
        started.set()
        return flag.is_set()

    def cancel_once_running() -> None:
        started.wait(60)
        flag.set()

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TemplateCancelled, match=f"{QWEN}: rendering its chat template was cancelled"):
            fmt.render(MSGS, cancelled=cancelled)
    finally:
        flag.set()
        canceller.join()
    assert time.monotonic() - t0 < 60  # the cancel, not the (600 s) deadline, ended it


def test_cancel_while_compiling_is_a_cancelled_load():
    with pytest.raises(LoadCancelled):
        ChatFormat("{{ 1 }}", "", "", name=QWEN, cancelled=lambda: True)


def test_the_tracer_is_removed_after_every_render():
    import sys

    before = sys.gettrace()
    render("{{ messages[0].content }}")
    failure("{{ raise_exception('no') }}")
    assert sys.gettrace() is before


@pytest.mark.parametrize("template", [
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{{ bos_token }}{% for m in messages %}[{{ m.role|upper }}] {{ m.content|trim }}{{ eos_token }}{% endfor %}"
    "{{ messages|tojson }}{% if tools is none %}no tools{% endif %}{{ '%05d'|format(42) }}{{ '{:>4}'.format(1) }}"
    "{% generation %}kept{% endgeneration %}{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}"
    "{% endfor %}{{ 'ab' * 3 }}{{ 2 ** 10 }}{{ [1, 2] + [3] }}{{ 'a' ~ 'b' }}{{ (messages|length) * 4 }}",
])
def test_rendering_is_llama_cpp_pythons_formatter(template):
    """The same environment and variables as llama-cpp-python's Jinja2ChatFormatter."""
    theirs = Jinja2ChatFormatter(template, eos_token="</s>", bos_token="<s>")(messages=MSGS).prompt  # type: ignore[arg-type]
    assert render(template) == theirs


# -- the model is freed on every failure path ---------------------------------------------------


class ClosingFake(FakeModel):
    """A fake model that answers with a given chat template and counts its closes."""

    def __init__(self, path: Path, template: str | None) -> None:
        super().__init__(path, FakeSpec())
        self.template = template
        self.closes = 0

    def chat_template(self) -> str | None:
        return self.template

    def close(self) -> None:
        self.closes += 1
        super().close()


def test_a_pair_whose_template_does_not_compile_closes_its_models():
    target, draft = ClosingFake(Path("t.gguf"), "{% if %}"), ClosingFake(Path("d.gguf"), None)
    costs = fake_pair(PairConfig(Path("t.gguf"))).costs
    with pytest.raises(TemplateError, match="t.gguf: its chat template failed"):
        SpeculativePair.from_models(PairConfig(Path("t.gguf"), Path("d.gguf")), target, draft, costs)
    assert target.closes == 1 and draft.closes == 1


def test_a_real_load_closes_the_target_when_the_template_fails(monkeypatch, tmp_path):
    """SpeculativePair's own load: the template is compiled right after the target loads,
    before the draft and the calibration; a failure closes what was loaded."""
    made: list[ClosingFake] = []

    def fake_load(path, options=None, **_):
        made.append(ClosingFake(Path(path), "{{ x }"))
        return made[-1]

    import specchat.engine.pair as pair_module

    monkeypatch.setattr(pair_module, "LoadedModel", fake_load)
    calibrated = []
    monkeypatch.setattr(pair_module, "calibrate", lambda *a: calibrated.append(a))
    with pytest.raises(TemplateError, match="t.gguf: its chat template failed"):
        SpeculativePair(PairConfig(tmp_path / "t.gguf"))
    assert [m.closes for m in made] == [1] and calibrated == []


@pytest.mark.parametrize("fails_at", ["draft", "calibration", "cancelled calibration"])
def test_every_failed_load_closes_what_it_loaded(monkeypatch, tmp_path, fails_at):
    import specchat.engine.pair as pair_module
    from specchat.engine.runtime import LlamaError

    made: list[ClosingFake] = []

    def fake_load(path, options=None, **_):
        if fails_at == "draft" and made:
            raise LlamaError("d.gguf: llama.cpp could not load the model")
        made.append(ClosingFake(Path(path), None))
        return made[-1]

    def fake_calibrate(*_):
        raise LoadCancelled("loading was cancelled") if "cancelled" in fails_at else LlamaError("decode failed")

    monkeypatch.setattr(pair_module, "LoadedModel", fake_load)
    monkeypatch.setattr(pair_module, "calibrate", fake_calibrate)
    monkeypatch.setattr(pair_module, "check_pair", lambda *_: type("Ok", (), {"__bool__": lambda s: True})())
    with pytest.raises(LoadCancelled if "cancelled" in fails_at else LlamaError):
        SpeculativePair(PairConfig(tmp_path / "t.gguf", tmp_path / "d.gguf"))
    assert made and all(m.closes == 1 for m in made)


def test_a_loaded_model_dropped_unclosed_is_freed_by_its_finalizer(monkeypatch):
    freed = []
    handles = __import__("specchat.engine.runtime", fromlist=["_Handles"])._Handles
    monkeypatch.setattr(handles, "free", lambda self: freed.append(self))
    model = LoadedModel.__new__(LoadedModel)
    model._handles = handles(None)
    import weakref

    model._finalizer = weakref.finalize(model, model._handles.free)
    del model
    gc.collect()
    assert len(freed) == 1


# -- a real model: RSS stays flat over repeated failures --------------------------------------


def with_chat_template(src: Path, dst: Path, template: str) -> Path:
    """A copy of the GGUF ``src`` whose ``tokenizer.chat_template`` is ``template``."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    for f in reader.fields.values():
        if f.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.Tokenizer.CHAT_TEMPLATE) or f.name.startswith("GGUF."):
            continue
        kind = f.types[0]
        writer.add_key_value(f.name, f.contents(), kind,
                             sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.add_chat_template(template)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return dst


def test_a_broken_template_on_a_real_model_leaks_nothing(smollm, tmp_path):
    """Five loads that fail at the template, five that fail at the render: RSS stays flat
    after the first (which maps the file and warms llama.cpp up)."""
    config = lambda path: PairConfig(path, None, ModelOptions(n_ctx=256),  # noqa: E731
                                     calibration_cache=tmp_path / "c.json")
    no_compile = with_chat_template(smollm, tmp_path / "broken.gguf", "{% for m in messages %}{{ m.content }")
    raises = with_chat_template(smollm, tmp_path / "raises.gguf", "{{ raise_exception('only user and assistant') }}")
    rss = []
    for _ in range(5):
        with pytest.raises(TemplateError, match="broken.gguf: its chat template failed"):
            SpeculativePair(config(no_compile))
        gc.collect()
        rss.append(psutil.Process().memory_info().rss)
    for _ in range(5):
        with SpeculativePair(config(raises)) as pair, pytest.raises(TemplateError, match="raised: only user"):
            pair.chat_prompt(MSGS)
        gc.collect()
        rss.append(psutil.Process().memory_info().rss)
    growth = [(r - rss[1]) >> 20 for r in rss[1:]]
    assert max(growth) < 50, f"RSS growth after attempt 2, MiB: {growth}"
