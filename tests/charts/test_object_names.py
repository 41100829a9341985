"""No two deployments render an object of the same kind, namespace and name.

Two objects with one identity are one object to the API server: the later apply overwrites
the earlier, and each deployment's objects end up pointing at the other's (a Service account
with another deployment's IAM role, a Service selecting another's pods). For every engine's
deployment named ``s``, every name among its objects is given to a second deployment of each
engine the same platform file serves (``s-server``, ``s-compile``, ``s-api-key``, ...): the
platform is either refused, with one line naming the ``name`` field, or renders with every
object's identity held by one deployment only.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from eks_inference.charts.render import render_platform
from eks_inference.specification.engine_registry import ENGINES
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.validation import SpecError
from tests.helpers.platforms import EXAMPLES, REFERENCE_PLATFORM, platform_data
from tests.helpers.rendered import CONTEXT

FIRST = "s"


def _identities(platform: PlatformSpec) -> Counter[tuple[str, str | None, str]]:
    identities: Counter[tuple[str, str | None, str]] = Counter()
    for objects in render_platform(platform, CONTEXT).values():
        for item in objects:
            metadata = item["metadata"]
            identities[(item["kind"], metadata.get("namespace"), metadata["name"])] += 1
    return identities


def _with(data: dict[str, Any], deployments: list[dict[str, Any]]) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    changed["deployments"] = deployments
    # Traffic splits name the file's own deployments, which these platforms replace.
    changed.get("endpoint", {}).pop("splits", None)
    # Room for both deployments on every pool: the pools' sizes are not what this checks.
    for pool in changed["node_pools"]:
        pool["max_size"] = max(pool.get("max_size", 1), 16)
    return changed


def _templates() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """One (label, platform data, deployment) for each engine in each platform file."""
    found = []
    for path in (REFERENCE_PLATFORM, *EXAMPLES):
        data = platform_data(path)
        engines: set[str] = set()
        for deployment in data["deployments"]:
            engine = deployment.get("engine", "vllm")
            if engine not in engines:
                engines.add(engine)
                found.append((f"{path.stem}:{deployment['name']}", data, deployment))
    return found


TEMPLATES = _templates()


def test_every_engine_is_tried() -> None:
    engines = {deployment.get("engine", "vllm") for _, _, deployment in TEMPLATES}
    assert engines == set(ENGINES.names())


@pytest.mark.parametrize(("label", "data", "first"), TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_a_second_deployment_named_after_an_object_of_the_first_clashes_with_nothing(
    label: str, data: dict[str, Any], first: dict[str, Any]
) -> None:
    alone = PlatformSpec.model_validate(_with(data, [dict(first, name=FIRST)]))
    names = sorted({name for _, _, name in _identities(alone) if name.startswith(f"{FIRST}-")})
    assert names, f"{label}: deployment {FIRST!r} renders no object named after it"
    # A file system the stack creates has no id to render without the stack.
    seconds = [
        d
        for d in data["deployments"]
        if d["name"] != first["name"] and d["weights"].get("loader") != "fsx"
    ] + [first]
    tried = refused = 0
    for name in names:
        for second in seconds:
            tried += 1
            changed = _with(data, [dict(first, name=FIRST), dict(second, name=name)])
            try:
                platform = PlatformSpec(**changed)
            except SpecError as error:
                refused += 1
                message = str(error)
                assert "\n" not in message
                assert "deployments.1.name" in message, message
                continue
            shared = [key for key, count in _identities(platform).items() if count > 1]
            assert not shared, f"{label} beside {second['name']!r} named {name!r}: {shared}"
    assert tried > refused, f"{label}: every pairing was refused, so nothing was rendered"
