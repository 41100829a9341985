"""Guards for assertions made over a selection, so that a test checks something.

A loop or an ``all(...)`` over a filtered selection passes when the selection is empty, so a
test whose platform loses the objects it selects would keep passing and check nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def found(items: Iterable[T]) -> list[T]:
    """``items`` as a list, failing the test when there are none."""
    listed = list(items)
    assert listed, "the selection is empty: the assertions over it would check nothing"
    return listed
