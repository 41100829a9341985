"""Collect every problem of a spec, then raise them together with their field paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


class Problems:
    """Accumulates rule violations so that one validation reports all of them at once.

    Each problem carries the field path it belongs to (``("limits", "max_model_len")``) and a
    message that says what would work. Raising a :class:`pydantic.ValidationError` from a
    validator lets pydantic prefix the path of the enclosing object, so a deployment inside a
    platform reports ``deployments.2.tensor_parallel_size``.
    """

    def __init__(self, title: str) -> None:
        self._title = title
        self._errors: list[InitErrorDetails] = []

    def add(self, loc: Sequence[str | int], message: str, value: Any = None) -> None:
        self._errors.append(
            InitErrorDetails(
                type=PydanticCustomError("deployment_rule", "{message}", {"message": message}),
                loc=tuple(loc),
                input=value,
            )
        )

    def __len__(self) -> int:
        return len(self._errors)

    def raise_if_any(self) -> None:
        if self._errors:
            raise ValidationError.from_exception_data(self._title, self._errors)
