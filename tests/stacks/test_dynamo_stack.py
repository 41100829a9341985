"""The example Dynamo platform's stack: the platform add-on's release pinned, its Helm values
all keys of the pinned chart, NATS installed and etcd not, no AWS role for any of it, and the
add-on only where a deployment names ``engine: dynamo``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from eks_inference import names, versions
from eks_inference.charts.serving import engine_needs
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.helm_values import missing_keys
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO
from tests.helpers.synthesis import Synthesized, example_group

EXAMPLE = REPO / "examples" / "dynamo.yaml"
# With the example's own test (tests/stacks/test_examples.py): one synthesis on one worker.
EXAMPLE_GROUP = example_group(EXAMPLE)
PINNED_VALUES = REPO / "tests" / "upstream" / "dynamo-platform-1.5.0-values.yaml"


@pytest.fixture(scope="module")
def example(synthesized_platform: Callable[[PlatformSpec], Synthesized]) -> Synthesized:
    return synthesized_platform(PlatformSpec.from_yaml(EXAMPLE))


def _release(synth: Synthesized) -> dict[str, Any]:
    (release,) = [
        r["Properties"]
        for _, _, r in synth.all_resources("Custom::AWSCDK-EKS-HelmChart")
        if r["Properties"]["Chart"] == versions.DYNAMO_PLATFORM_CHART.chart
    ]
    return dict(release)


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_platform_release_is_pinned_and_its_values_exist(example: Synthesized) -> None:
    release = _release(example)
    pinned = versions.DYNAMO_PLATFORM_CHART
    assert (release["Repository"], release["Version"]) == (pinned.repository, pinned.version)
    assert release["Namespace"] == names.DYNAMO_NAMESPACE
    # The CRDs come with the chart (Helm creates them; too large for a client-side apply).
    assert release.get("SkipCrds") in (None, False)
    values = json.loads(release["Values"])
    assert missing_keys(values, yaml.safe_load(PINNED_VALUES.read_text())) == []
    assert values["global"] == {"nats": {"install": True}, "etcd": {"install": False}}
    assert values["dynamo-operator"]["discoveryBackend"] == "kubernetes"


@pytest.mark.synth
@EXAMPLE_GROUP
def test_no_role_for_the_dynamo_platform(example: Synthesized) -> None:
    associations = {
        r["Properties"]["Namespace"]
        for _, _, r in example.all_resources("AWS::EKS::PodIdentityAssociation")
    }
    assert names.DYNAMO_NAMESPACE not in associations


def test_the_reference_platform_needs_no_dynamo() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    needed = {c for s in platform.deployments for c in engine_needs(s).custom_resources}
    assert names.DYNAMOGRAPHDEPLOYMENT_CRD not in needed
    example = PlatformSpec.from_yaml(EXAMPLE)
    assert {c for s in example.deployments for c in engine_needs(s).custom_resources} == {
        names.DYNAMOGRAPHDEPLOYMENT_CRD
    }
