"""Indented JSON text without the standard library's pure-Python indenting encoder.

``json.dumps`` with ``indent`` cannot use its C encoder and walks the value in Python with a
generator per container; the dashboards of a hundred deployments spend most of their time
there. :func:`indented_json` writes the same text (``tests/charts/test_json_text.py`` holds it
equal to ``json.dumps(value, indent=1, sort_keys=True)``), quoting strings with the C encoder's
own function.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

_CONSTANTS: dict[object, str] = {None: "null", True: "true", False: "false"}


def indented_json(value: Any) -> str:
    """``json.dumps(value, indent=1, sort_keys=True)`` for a value whose objects have string
    keys (json would turn other keys into strings; here they are a ``TypeError``)."""
    parts: list[str] = []
    _write(value, "\n", parts.append)
    return "".join(parts)


def _write(value: Any, newline: str, out: Callable[[str], None]) -> None:
    kind = type(value)
    if kind is str:
        out(encode_basestring_ascii(value))
    elif kind is dict:
        _write_object(value, newline, out)
    elif kind is list or kind is tuple:
        _write_array(value, newline, out)
    elif kind is bool or value is None:
        out(_CONSTANTS[value])
    elif kind is int:
        out(int.__repr__(value))
    elif isinstance(value, dict):
        _write_object(value, newline, out)
    elif isinstance(value, (list, tuple)):
        _write_array(value, newline, out)
    else:
        # Floats (NaN and infinities as JSON spells them), subclasses of str, int and float,
        # and anything json refuses (it raises the same error).
        out(json.dumps(value))


def _write_object(value: dict[Any, Any], newline: str, out: Callable[[str], None]) -> None:
    if not value:
        out("{}")
        return
    inner = newline + " "
    separator = "{"
    for key in sorted(value):
        if not isinstance(key, str):
            raise TypeError(f"keys must be str, not {type(key).__name__}")
        out(f"{separator}{inner}{encode_basestring_ascii(key)}: ")
        _write(value[key], inner, out)
        separator = ","
    out(newline + "}")


def _write_array(
    value: list[Any] | tuple[Any, ...], newline: str, out: Callable[[str], None]
) -> None:
    if not value:
        out("[]")
        return
    inner = newline + " "
    separator = "["
    for item in value:
        out(separator + inner)
        _write(item, inner, out)
        separator = ","
    out(newline + "]")
