"""The multi-node example (``examples/multi-node.yaml``) synthesizes credential-free in both
provisioning modes, cdk-nag and cfn-lint clean, with the LeaderWorkerSet controller pinned,
its values keys of the pinned chart,
and each group applied after it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from eks_inference import versions
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.helm_values import missing_keys
from tests.helpers.platforms import REPO
from tests.helpers.synthesis import (
    PROVISIONING_MODES,
    Synthesized,
    cfn_lint_errors,
    example_group,
    in_provisioning_modes,
)

EXAMPLE = REPO / "examples" / "multi-node.yaml"
EXAMPLE_GROUP = example_group(EXAMPLE)
PINNED_VALUES = REPO / "tests" / "upstream" / "lws-v0.10.0-values.yaml"
LATEST = re.compile(r"(?<![A-Za-z])latest(?![A-Za-z])")


@pytest.fixture(scope="module")
def synthesized(
    synthesized_platform: Callable[[PlatformSpec], Synthesized],
) -> Callable[[str], Synthesized]:
    return in_provisioning_modes(synthesized_platform, EXAMPLE)


def _releases(synth: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["Chart"]: r["Properties"]
        for _, _, r in synth.all_resources("Custom::AWSCDK-EKS-HelmChart")
    }


@pytest.mark.parametrize("mode", PROVISIONING_MODES)
@pytest.mark.synth
@EXAMPLE_GROUP
def test_both_modes_are_nag_lint_and_pin_clean(
    synthesized: Callable[[str], Synthesized], mode: str
) -> None:
    synth = synthesized(mode)
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in synth.templates.items():
        assert cfn_lint_errors(template) == [], name
        assert not LATEST.findall(json.dumps(template)), name


@pytest.mark.parametrize("mode", PROVISIONING_MODES)
@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_lws_controller_is_pinned_and_its_values_exist(
    synthesized: Callable[[str], Synthesized], mode: str
) -> None:
    release = _releases(synthesized(mode))[versions.LWS_CHART.chart]
    assert (release["Repository"], release["Version"]) == (
        versions.LWS_CHART.repository,
        versions.LWS_CHART.version,
    )
    values = json.loads(release["Values"])
    assert values["image"]["manager"] == {
        "tag": versions.LWS_IMAGE_TAG,
        "pullPolicy": "IfNotPresent",
    }
    assert missing_keys(values, yaml.safe_load(PINNED_VALUES.read_text())) == []


@pytest.mark.parametrize("mode", PROVISIONING_MODES)
@pytest.mark.synth
@EXAMPLE_GROUP
def test_each_group_is_applied_after_the_controller(
    synthesized: Callable[[str], Synthesized], mode: str
) -> None:
    synth = synthesized(mode)
    groups = 0
    for _, _, resource in synth.all_resources("Custom::AWSCDK-EKS-KubernetesResource"):
        manifest = json.dumps(resource["Properties"].get("Manifest", ""))
        if "LeaderWorkerSet" not in manifest:
            continue
        groups += 1
        assert resource.get("DependsOn"), "a LeaderWorkerSet manifest without dependencies"
    assert groups == 2


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_p5_group_is_a_gpu_node_group_of_its_instance_type(
    synthesized: Callable[[str], Synthesized],
) -> None:
    """aws-cdk-lib's Nodegroup does not know P5 as a GPU class: the instance type is written on
    the resource, beside the NVIDIA AMI, in one zone's subnets."""
    groups = {
        tuple(r["Properties"]["InstanceTypes"]): r["Properties"]
        for _, _, r in synthesized("managed").all_resources("AWS::EKS::Nodegroup")
    }
    for instance_type in ("p5.48xlarge", "g6e.48xlarge"):
        group = groups[(instance_type,)]
        assert group["AmiType"] == "AL2023_x86_64_NVIDIA"
        assert len(group["Subnets"]) == 1
