"""The dashboards' indented JSON is the standard library's text, byte for byte.

:func:`~eks_inference.output.json_text.indented_json` is held to
``json.dumps(value, indent=1, sort_keys=True)`` for the dashboard of every deployment of every
platform the chart tests render, and for any JSON value (strings of every escape, non-BMP
characters and lone surrogates, integers beyond 64 bits, floats with NaN and the infinities,
empty and nested containers, tuples).
"""

from __future__ import annotations

import collections
import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eks_inference.observability.dashboards import dashboard
from eks_inference.output.json_text import indented_json
from tests.helpers.written_platforms import PLATFORMS


def _reference(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_every_dashboard_is_the_standard_librarys_text(name: str) -> None:
    for spec in PLATFORMS[name]().deployments:
        board = dashboard(spec)
        assert indented_json(board) == _reference(board), spec.name


_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
_SCALARS = (
    _TEXT
    | st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(_TEXT, inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_any_json_value_is_the_standard_librarys_text(value: Any) -> None:
    assert indented_json(value) == _reference(value)


def test_special_floats_are_spelled_as_json_spells_them() -> None:
    value = {"values": [math.nan, math.inf, -math.inf, 0.1, -0.0, 1e300]}
    assert indented_json(value) == _reference(value)
    assert "NaN" in indented_json(value)


def test_a_key_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="keys must be str, not int"):
        indented_json({"panels": {1: "a"}})


class _Level(enum.IntEnum):
    HIGH = 2


class _Colour(enum.StrEnum):
    RED = "red"


def test_subclasses_of_the_json_types_are_written_as_their_base() -> None:
    row = type("Row", (list,), {})
    value = collections.OrderedDict([("b", row([{"x": 1.5}, ()])), ("a", _Level.HIGH)])
    value["c"] = _Colour.RED
    assert indented_json(value) == _reference(value)
