"""Readers of the errors the tests expect: a validation error's problems by field path, and the
one ``error:`` line a refused command prints."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from typer.testing import Result

from eks_inference.specification.platform import PlatformSpec


def problems(error: ValidationError) -> list[tuple[str, str]]:
    """``(field path, message)`` of each problem of ``error``, in its order; the path joins
    the location's steps with dots (``deployments.0.weights.prefix``)."""
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in error.errors(include_url=False)]


def errors_by_field(error: ValidationError) -> dict[str, str]:
    """Field path -> message of each problem of ``error``. A path reported twice fails the
    test, since a mapping would keep one of its messages and hide the other."""
    found = problems(error)
    by_field = dict(found)
    assert len(by_field) == len(found), f"a field is reported more than once: {found}"
    return by_field


def problems_of(data: Any, model: type[BaseModel] = PlatformSpec) -> list[tuple[str, str]]:
    """:func:`problems` of ``model`` validating ``data``, which must fail."""
    with pytest.raises(ValidationError) as raised:
        model.model_validate(data)
    return problems(raised.value)


def errors_of(data: Any, model: type[BaseModel] = PlatformSpec) -> dict[str, str]:
    """:func:`errors_by_field` of ``model`` validating ``data``, which must fail."""
    with pytest.raises(ValidationError) as raised:
        model.model_validate(data)
    return errors_by_field(raised.value)


def errors_if_invalid(data: Any, model: type[BaseModel] = PlatformSpec) -> dict[str, str]:
    """:func:`errors_by_field` of ``model`` validating ``data``; empty when ``data`` is valid,
    for a rule that must hold whether or not others fail."""
    try:
        model.model_validate(data)
    except ValidationError as error:
        return errors_by_field(error)
    return {}


def one_line_error(
    result: Result | subprocess.CompletedProcess[str], exit_code: int, *expected: str
) -> str:
    """The line a refused command printed, checked: the command exited with ``exit_code``,
    wrote exactly one line to stderr, ``error: ...`` containing each of ``expected``, printed
    no traceback anywhere, and (in-process) raised nothing but its exit."""
    code = result.exit_code if isinstance(result, Result) else result.returncode
    assert code == exit_code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("error: "), line
    for text in expected:
        assert text in line, line
    assert "Traceback" not in result.stdout + result.stderr
    if isinstance(result, Result):
        assert result.exception is None or isinstance(result.exception, SystemExit)
    return line
