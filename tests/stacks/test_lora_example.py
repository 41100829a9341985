"""The LoRA adapters example (examples/lora-adapters.yaml) synthesizes credential-free, cdk-nag
and cfn-lint clean (tests/stacks/test_examples.py), with the Mountpoint driver granted the
adapters prefix beside nothing but what else the platform mounts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from eks_inference.specification.cloudformation_limits import mounted_prefixes
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO
from tests.helpers.synthesis import Synthesized, example_group
from tests.stacks.test_cloudformation_limits import check_parent_stack_use

EXAMPLE = REPO / "examples" / "lora-adapters.yaml"
EXAMPLE_GROUP = example_group(EXAMPLE)


@pytest.fixture(scope="module")
def example(synthesized_platform: Callable[[PlatformSpec], Synthesized]) -> Synthesized:
    return synthesized_platform(PlatformSpec.from_yaml(EXAMPLE))


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_driver_reads_the_adapters_prefix_and_no_more(example: Synthesized) -> None:
    """The weights load with the Run:ai streamer, so the adapters prefix is the one prefix the
    Mountpoint driver may read, as the parent stack's estimate counts it."""
    platform: PlatformSpec = example.stack.platform
    assert example.stack.mountpoint_prefixes == ("adapters/llama-3-8b/",)
    assert mounted_prefixes(platform.deployments) == ["adapters/llama-3-8b/"]
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in example.resources("AWS::IAM::Policy").values()
        if "MountpointRole" in p["Properties"]["Roles"][0]["Ref"]
    ]
    (policy,) = policies
    listed = [
        s["Condition"]["StringLike"]["s3:prefix"][0]
        for s in policy
        if s["Action"] == "s3:ListBucket"
    ]
    assert listed == ["adapters/llama-3-8b/"]
    check_parent_stack_use(example)
