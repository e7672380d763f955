"""SamplingSettings.validate is the one gate for sampling numbers: every caller (the command line, a
chat's stored settings, the settings dialog, the engine, a server's request) gets finite numbers of
the declared types in their ranges, or one ValueError line naming the field."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specchat.sampling_settings import SamplingSettings, StructuredOutput

FLOATS = ("temperature", "top_p", "min_p", "repeat_penalty")
INTS = ("top_k", "repeat_last_n", "seed")


@pytest.mark.parametrize("field", FLOATS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_for_every_float_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        replace(SamplingSettings(), **{field: value}).validate()


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", "0.7"), ("temperature", True), ("top_p", None), ("repeat_penalty", [1.1]),
    ("top_k", 2.5), ("top_k", "40"), ("seed", 1.0), ("repeat_last_n", False),
])
def test_a_value_of_the_wrong_type_is_a_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        replace(SamplingSettings(), **{field: value}).validate()


def test_ints_past_what_llama_cpp_takes_are_refused():
    with pytest.raises(ValueError, match="top_k"):
        SamplingSettings(top_k=1 << 40).validate()
    with pytest.raises(ValueError, match="seed"):
        SamplingSettings(seed=1 << 70).validate()


def test_a_structured_output_whose_text_is_not_text_is_a_value_error():
    with pytest.raises(ValueError, match="text"):
        SamplingSettings(structured=StructuredOutput("grammar", 5)).validate()  # type: ignore[arg-type]


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(1 << 80), 1 << 80),
                    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e308, True, False]))
ANYTHING = st.one_of(NUMBERS, st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2))


@settings(max_examples=400, derandomize=True, database=None)
@given(field=st.sampled_from(FLOATS + INTS), value=ANYTHING)
def test_hostile_values_are_refused_with_a_value_error_or_accepted_finite_and_in_range(field, value):
    s = replace(SamplingSettings(), **{field: value})
    try:
        s.validate()
    except ValueError as exc:  # the one error type every caller turns into its line
        assert field in str(exc) and "\n" not in str(exc)
        return
    assert not isinstance(value, bool)
    if field in FLOATS:
        assert isinstance(value, int | float) and math.isfinite(value)
        assert {"temperature": value >= 0, "top_p": 0 < value <= 1, "min_p": 0 <= value < 1,
                "repeat_penalty": value > 0}[field]
    else:
        assert isinstance(value, int) and -(1 << 63) <= value < 1 << 64
