"""The EFA device plugin: on the pools with EFA only, pinned, with values the pinned chart has.

Its release (multi-node example, both modes) is the pinned chart with its pinned image from
the EKS registry of the stack's region; it selects the pools with EFA by their pool label
(the chart's ``supportedInstanceLabels``, the only placement its template takes), tolerates
their taints and sets only keys the chart's ``values.yaml`` at that version has. A platform
without a pool with EFA (the reference platform, both modes) installs no plugin.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from eks_inference import versions
from eks_inference.names import NODE_POOL_LABEL
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.helm_values import missing_keys
from tests.helpers.platforms import REPO
from tests.helpers.synthesis import (
    PROVISIONING_MODES,
    Synthesized,
    example_group,
    in_provisioning_modes,
)

EXAMPLE = REPO / "examples" / "multi-node.yaml"
EXAMPLE_GROUP = example_group(EXAMPLE)
PINNED_VALUES = REPO / "tests" / "upstream" / "aws-efa-k8s-device-plugin-v0.5.30-values.yaml"
CHART = versions.EFA_DEVICE_PLUGIN_CHART.chart


@pytest.fixture(scope="module")
def synthesized(
    synthesized_platform: Callable[[PlatformSpec], Synthesized],
) -> Callable[[str], Synthesized]:
    return in_provisioning_modes(synthesized_platform, EXAMPLE)


def _text(value: Any) -> str:
    """A template string, with each ``Fn::Join`` part that is a reference written ``${Name}``."""
    if isinstance(value, str):
        return value
    separator, parts = value["Fn::Join"]
    return str(separator).join(p if isinstance(p, str) else f"${{{p['Ref']}}}" for p in parts)


def _releases(synth: Synthesized) -> list[dict[str, Any]]:
    return [
        r["Properties"]
        for _, _, r in synth.all_resources("Custom::AWSCDK-EKS-HelmChart")
        if r["Properties"]["Chart"] == CHART
    ]


@pytest.mark.parametrize("mode", PROVISIONING_MODES)
@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_plugin_runs_on_the_efa_pools_only(
    synthesized: Callable[[str], Synthesized], mode: str
) -> None:
    (release,) = _releases(synthesized(mode))
    assert (release["Repository"], release["Version"], release["Namespace"]) == (
        versions.EFA_DEVICE_PLUGIN_CHART.repository,
        versions.EFA_DEVICE_PLUGIN_CHART.version,
        "kube-system",
    )
    values = json.loads(_text(release["Values"]))
    assert values["supportedInstanceLabels"] == {"keys": [NODE_POOL_LABEL], "values": ["p5", "g6e"]}
    # The chart's template tolerates CriticalAddonsOnly itself; the GPU pools' taint is added.
    assert values["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    assert values["image"] == {
        "repository": (
            f"{versions.EKS_IMAGE_REGISTRY_ACCOUNT}.dkr.ecr.${{AWS::Region}}.${{AWS::URLSuffix}}"
            "/eks/aws-efa-k8s-device-plugin"
        ),
        "tag": versions.EFA_DEVICE_PLUGIN_IMAGE_TAG,
    }


@pytest.mark.parametrize("mode", PROVISIONING_MODES)
@pytest.mark.synth
@EXAMPLE_GROUP
def test_its_values_are_keys_of_the_pinned_chart(
    synthesized: Callable[[str], Synthesized], mode: str
) -> None:
    pinned = yaml.safe_load(PINNED_VALUES.read_text())
    (release,) = _releases(synthesized(mode))
    values = json.loads(_text(release["Values"]))
    assert missing_keys(values, pinned) == []
    # The chart's own default pins the same image tag, and selects by one key list.
    assert pinned["image"]["tag"] == versions.EFA_DEVICE_PLUGIN_IMAGE_TAG
    assert set(pinned["supportedInstanceLabels"]) == set(values["supportedInstanceLabels"])


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_pools_it_selects_carry_that_label(
    synthesized: Callable[[str], Synthesized],
) -> None:
    (release,) = _releases(synthesized("managed"))
    selected = json.loads(_text(release["Values"]))["supportedInstanceLabels"]["values"]
    groups = found(
        r["Properties"] for _, _, r in synthesized("managed").all_resources("AWS::EKS::Nodegroup")
    )
    labelled = {g["Labels"][NODE_POOL_LABEL] for g in groups}
    assert set(selected) <= labelled
    assert "system" in labelled - set(selected)


@pytest.mark.parametrize("mode", PROVISIONING_MODES)
@pytest.mark.synth
def test_no_plugin_without_a_pool_with_efa(request: pytest.FixtureRequest, mode: str) -> None:
    synth: Synthesized = request.getfixturevalue(
        "reference" if mode == "managed" else "reference_karpenter"
    )
    assert found(synth.all_resources("Custom::AWSCDK-EKS-HelmChart"))
    assert _releases(synth) == []
