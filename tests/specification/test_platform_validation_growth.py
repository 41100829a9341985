"""Refusing a platform takes work in proportion to its size, however many node pools it has.

A platform of 3,900 small pools (98 KiB, within every limit of the file reader) took 30 s to
refuse: each pool was looked for among all the pools (``pool in managed_pools``, an equality
test of every field per pool). The work is counted, not timed: the Python function calls of
one validation, for n pools and for 4n, whose ratio is about 4 when it grows linearly and 16
when it grows with the square.
"""

from __future__ import annotations

import copy
import sys
from types import FrameType
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM

REFERENCE = yaml.safe_load(REFERENCE_PLATFORM.read_text())
# Linear growth makes the ratio 4 (a little less: the reference part is fixed); quadratic, 16.
_MAX_RATIO = 6


def _with_pools(count: int, **pool: Any) -> dict[str, Any]:
    data = copy.deepcopy(REFERENCE)
    data["node_pools"] += [
        {"name": f"cpu-{i}", "instance_types": ["m6i.xlarge"], **pool} for i in range(count)
    ]
    return data


def _calls_to_refuse(data: dict[str, Any]) -> int:
    calls = 0

    def count(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        PlatformSpec.model_validate(data)
    except ValidationError:
        pass
    else:
        raise AssertionError("the platform was accepted")
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize(
    "pool",
    [
        {},
        {"min_size": 3, "max_size": 2},
        {"capacity_type": "RESERVED"},
    ],
    ids=["too-many-pools", "every-pool-broken", "every-pool-unmanageable"],
)
def test_the_work_grows_linearly_with_the_pools(pool: dict[str, Any]) -> None:
    small, large = (
        _calls_to_refuse(_with_pools(200, **pool)),
        _calls_to_refuse(_with_pools(800, **pool)),
    )
    assert large / small < _MAX_RATIO, (small, large)


def test_the_work_grows_linearly_with_pools_and_deployments_together() -> None:
    """Deployments placed on pools are found through one index, not pools times
    deployments."""

    def platform(count: int) -> dict[str, Any]:
        data = _with_pools(count)
        data["deployments"] = [
            {**REFERENCE["deployments"][1], "name": f"mistral-{i}"} for i in range(count // 10)
        ]
        return data

    small, large = _calls_to_refuse(platform(200)), _calls_to_refuse(platform(800))
    assert large / small < _MAX_RATIO, (small, large)
