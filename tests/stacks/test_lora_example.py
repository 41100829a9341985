"""The LoRA adapters example (examples/lora-adapters.yaml) synthesizes credential-free, cdk-nag
and cfn-lint clean (tests/stacks/test_examples.py), with the Mountpoint driver granted the
adapters prefix beside the weights and nothing else."""

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
    """The Mountpoint driver may read the weights' prefix and the adapters prefix and nothing
    else, as the parent stack's estimate counts them."""
    platform: PlatformSpec = example.stack.platform
    granted = ["adapters/llama-3-8b/", "models/llama-3-8b/"]
    assert list(example.stack.mountpoint_prefixes) == granted
    assert sorted(mounted_prefixes(platform.deployments)) == granted
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
    assert sorted(listed) == granted
    check_parent_stack_use(example)
