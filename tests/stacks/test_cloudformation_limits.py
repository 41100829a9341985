"""The CloudFormation quota estimate against real templates: every count exact, sizes close.

The estimate is what validation refuses platforms by (before synth), so it is checked on the
shapes that exercise each of its terms: the reference app in both provisioning modes (every
add-on, three pools, one deployment of each main kind) and a wider platform (nine pools of every
accelerator, 40 deployments, enough Mountpoint prefixes to overflow into managed policies).
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.platforms import generated_platform
from eks_inference.specification.cloudformation_limits import NESTED_STACK_BOUND, parent_stack_use
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.synthesis import STACK_NAME, Synthesized, cdk_context, synthesize

pytestmark = pytest.mark.synth
# The tests of the reference app share its synthesis; the wide platform is this module's own.
REFERENCE_GROUP = pytest.mark.xdist_group("synth")

# The size estimate may overshoot (it refuses early rather than late) by at most this much.
SIZE_MARGIN = 1.10


def _wide_platform() -> PlatformSpec:
    base = generated_platform(40)
    extra: list[dict[str, Any]] = [
        {"name": "cpu-a", "instance_types": ["m6i.xlarge"], "max_size": 2},
        {"name": "cpu-b", "instance_types": ["m7i.xlarge", "m7i.2xlarge"], "max_size": 2},
        {"name": "gpu-big", "instance_types": ["g6e.12xlarge"], "max_size": 2},
        {"name": "inf2-small", "instance_types": ["inf2.8xlarge"], "max_size": 2},
        {"name": "spot", "instance_types": ["g6e.4xlarge"], "capacity_type": "SPOT", "max_size": 2},
        {"name": "cpu-c", "instance_types": ["m6i.xlarge"], "min_size": 1, "max_size": 3},
    ]
    data = base.model_dump(mode="json", exclude_unset=True)
    data["node_pools"] = [*data["node_pools"], *extra]
    return PlatformSpec.model_validate(data)


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    from aws_cdk import App

    from eks_inference.stacks import build_app

    outdir = tmp_path_factory.mktemp("cdk.out.wide")
    app, stack = build_app(_wide_platform(), app=App(context=cdk_context(), outdir=str(outdir)))
    return synthesize(app, stack, outdir)


def check_parent_stack_use(synth: Synthesized) -> None:
    """The estimate of the synthesized platform's parent stack: counts exact, size close;
    every nested stack within its bound."""
    platform: PlatformSpec = synth.stack.platform
    use = parent_stack_use(
        platform.node_pools,
        platform.node_provisioning,
        platform.deployments,
        platform.endpoint,
        platform.routes(),
        platform.splits(),
    ).total
    parent = synth.templates[STACK_NAME]
    assert use.resources == len(parent["Resources"])
    assert use.outputs == len(parent.get("Outputs", {}))
    real = synth.template_bytes[STACK_NAME]
    assert real <= use.template_bytes <= real * SIZE_MARGIN
    nested = [key for key in synth.templates if key != STACK_NAME]
    assert len(nested) == len(platform.deployments)
    for key in nested:
        template = synth.templates[key]
        assert len(template["Resources"]) <= NESTED_STACK_BOUND.resources, key
        assert len(template.get("Outputs", {})) <= NESTED_STACK_BOUND.outputs, key
        assert synth.template_bytes[key] <= NESTED_STACK_BOUND.template_bytes, key


@REFERENCE_GROUP
def test_the_reference_app(reference: Synthesized) -> None:
    check_parent_stack_use(reference)


@REFERENCE_GROUP
def test_the_reference_app_in_karpenter_mode(reference_karpenter: Synthesized) -> None:
    check_parent_stack_use(reference_karpenter)


def test_a_wide_platform_with_overflowing_grants(wide: Synthesized) -> None:
    overflow = wide.resources("AWS::IAM::ManagedPolicy")
    assert any("MountpointRoleOverflowPolicy" in key for key in overflow)
    check_parent_stack_use(wide)
