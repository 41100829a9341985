"""Immutable cdk8s value objects (quantities, durations, sizes, probes...), built once each.

Every cdk8s object lives in the Node.js process behind jsii, and each factory call such as
``Duration.seconds(10)`` is a round trip to it. These objects are plain values, bound to no
construct and never modified once built, so one instance can serve every chart of every app
in the process: each factory here builds its object on the first call with given arguments
and returns that same object afterwards. Rendering a chart then costs a round trip per
object it creates, not per value it mentions.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s


@cache
def quantity(amount: str) -> k8s.Quantity:
    """``k8s.Quantity.from_string(amount)``."""
    return k8s.Quantity.from_string(amount)


@cache
def int_or_string(number: int) -> k8s.IntOrString:
    """``k8s.IntOrString.from_number(number)``."""
    return k8s.IntOrString.from_number(number)


@cache
def seconds(amount: int) -> cdk8s.Duration:
    """``cdk8s.Duration.seconds(amount)``."""
    return cdk8s.Duration.seconds(amount)


@cache
def mebibytes(amount: int) -> cdk8s.Size:
    """``cdk8s.Size.mebibytes(amount)``."""
    return cdk8s.Size.mebibytes(amount)


@cache
def gibibytes(amount: int) -> cdk8s.Size:
    """``cdk8s.Size.gibibytes(amount)``."""
    return cdk8s.Size.gibibytes(amount)


@cache
def cpu_millis(amount: int) -> kplus.Cpu:
    """``kplus.Cpu.millis(amount)``."""
    return kplus.Cpu.millis(amount)


@cache
def env_value(value: str) -> kplus.EnvValue:
    """``kplus.EnvValue.from_value(value)``."""
    return kplus.EnvValue.from_value(value)


@cache
def command_handler(*command: str) -> kplus.Handler:
    """``kplus.Handler.from_command(list(command))``."""
    return kplus.Handler.from_command(list(command))


@cache
def http_get_probe(
    path: str, *, port: int, period_seconds: int, timeout_seconds: int, failure_threshold: int
) -> kplus.Probe:
    """``kplus.Probe.from_http_get(path, ...)`` with the given port, timing and threshold."""
    return kplus.Probe.from_http_get(
        path,
        port=port,
        period_seconds=seconds(period_seconds),
        timeout_seconds=seconds(timeout_seconds),
        failure_threshold=failure_threshold,
    )


@cache
def rolling_update(*, max_surge: int, max_unavailable: int) -> kplus.DeploymentStrategy:
    """A rolling update with absolute ``max_surge`` and ``max_unavailable`` pod counts."""
    return kplus.DeploymentStrategy.rolling_update(
        max_surge=kplus.PercentOrAbsolute.absolute(max_surge),
        max_unavailable=kplus.PercentOrAbsolute.absolute(max_unavailable),
    )


def json_patch_add(path: str, value: Any) -> cdk8s.JsonPatch:
    """``cdk8s.JsonPatch.add(path, value)`` for a JSON value (patches are applied to copies)."""
    return _json_patch_add(path, json.dumps(value))


@cache
def _json_patch_add(path: str, value_json: str) -> cdk8s.JsonPatch:
    return cdk8s.JsonPatch.add(path, json.loads(value_json))


@cache
def quantity_patch_add(path: str, amount: str) -> cdk8s.JsonPatch:
    """``cdk8s.JsonPatch.add(path, quantity(amount))``."""
    return cdk8s.JsonPatch.add(path, quantity(amount))
