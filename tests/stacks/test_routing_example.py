"""The routing example (examples/prefix-routing.yaml) synthesizes with the InferencePool CRD
applied by its add-on, the deployment's router manifest after it, and the parent stack within
its estimate."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from eks_inference import names
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.deployed import manifest_resources
from tests.helpers.platforms import EXAMPLES_DIR
from tests.helpers.synthesis import STACK_NAME, Synthesized, example_group
from tests.stacks.test_cloudformation_limits import check_parent_stack_use

EXAMPLE = EXAMPLES_DIR / "prefix-routing.yaml"
EXAMPLE_GROUP = example_group(EXAMPLE)


@pytest.fixture(scope="module")
def example(synthesized_platform: Callable[[PlatformSpec], Synthesized]) -> Synthesized:
    return synthesized_platform(PlatformSpec.from_yaml(EXAMPLE))


def _text(resource: dict[str, Any]) -> str:
    return json.dumps(resource["Properties"]["Manifest"])


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_crd_is_applied_once_in_the_parent_stack(example: Synthesized) -> None:
    main = example.templates[STACK_NAME]
    crds = [k for k, r in manifest_resources(main).items() if names.INFERENCEPOOL_CRD in _text(r)]
    assert len(crds) == 1
    (deployment,) = [
        k
        for k, r in main["Resources"].items()
        if r["Type"] == "AWS::CloudFormation::Stack" and "llamarouted" in k
    ]
    assert crds[0] in main["Resources"][deployment].get("DependsOn", [])


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_deployments_stack_applies_the_router_after_the_server(example: Synthesized) -> None:
    (nested,) = [t for k, t in example.templates.items() if k != STACK_NAME]
    # One manifest resource holds the deployment's objects, in the order they are applied.
    (manifest,) = manifest_resources(nested).values()
    text = _text(manifest)
    assert "InferencePool" in text
    assert text.index("PodDisruptionBudget") < text.index("EndpointPickerConfig")


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_parent_stack_is_within_its_estimate(example: Synthesized) -> None:
    check_parent_stack_use(example)
