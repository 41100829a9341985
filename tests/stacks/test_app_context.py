"""Context values of the reference app are checked before anything is built, like a platform
file: every problem at once, each at its context key, as a pydantic ``ValidationError``."""

from __future__ import annotations

import re

import pytest
from aws_cdk import App, Stack
from pydantic import ValidationError

from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.provisioning import NodeProvisioning
from eks_inference.stacks import build_app
from tests.helpers.errors import problems
from tests.helpers.platforms import REFERENCE_PLATFORM

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)


def context_errors(**context: str) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as raised:
        build_app(PLATFORM, app=App(context=context))
    errors: dict[str, list[str]] = {}
    for field, message in problems(raised.value):
        errors.setdefault(field, []).append(message)
    return errors


@pytest.mark.parametrize(
    "arn",
    [
        "*",
        "arn:aws:iam::123456789012:role/*",
        "arn:aws:iam::*:role/Admin",
        "arn:aws:iam::123456789012:user/admin",
        "arn:aws:iam::123456789012:root",
        "arn:aws:sts::123456789012:assumed-role/Admin/session",
        "arn:aws:iam::123456789012:role/ops?/Admin",
    ],
)
def test_admin_role_arn_must_be_one_iam_role(arn: str) -> None:
    errors = context_errors(admin_role_arn=arn)
    assert list(errors) == ["admin_role_arn"]
    (problem,) = errors["admin_role_arn"]
    # A long value is echoed cut short; what is wrong and what would work are kept whole.
    assert problem.startswith(f"context admin_role_arn {arn[:20]!r}"[:-1])
    assert problem.endswith(
        " is not an IAM role ARN; give one role, e.g. arn:aws:iam::123456789012:role/PlatformAdmin"
    )


@pytest.mark.parametrize(
    ("cidr", "message"),
    [
        ("garbage", "is not an IPv4 network in CIDR notation"),
        ("203.0.113.7/24", "has host bits set"),
        ("10.0.0.0/33", "is not an IPv4 network in CIDR notation"),
        ("2001:db8::/32", "is not an IPv4 network in CIDR notation"),
        ("0.0.0.0/0", "opens the endpoint to the whole internet"),
    ],
)
def test_public_access_cidrs_must_each_be_a_network_short_of_the_internet(
    cidr: str, message: str
) -> None:
    errors = context_errors(public_access_cidrs=f"198.51.100.0/24,{cidr}")
    (problem,) = errors["public_access_cidrs"]
    assert problem.startswith(f"context public_access_cidrs entry {cidr!r} ")
    assert message in problem


def test_retain_chart_manifests_is_true_or_false() -> None:
    errors = context_errors(retain_chart_manifests="yes")
    assert errors == {
        "retain_chart_manifests": ["context retain_chart_manifests 'yes' is not true or false"]
    }


def test_every_context_problem_is_reported_at_once() -> None:
    errors = context_errors(
        admin_role_arn="*",
        public_access_cidrs="garbage",
        node_provisioning="fargate",
        retain_chart_manifests="1",
    )
    assert set(errors) == {
        "admin_role_arn",
        "public_access_cidrs",
        "node_provisioning",
        "retain_chart_manifests",
    }


def test_the_cluster_construct_applies_the_same_rules() -> None:
    pools = [NodePool(name="system", instance_types=("m6i.xlarge",), min_size=1)]
    with pytest.raises(ValueError, match=re.escape("admin_role_arn '*' is not an IAM role ARN")):
        InferenceCluster(
            Stack(App(), "Arn"), "Cluster", cluster_name="c", node_pools=pools, admin_role_arn="*"
        )
    whole_internet = re.escape("'0.0.0.0/0' opens the endpoint to the whole internet")
    with pytest.raises(ValueError, match=whole_internet):
        InferenceCluster(
            Stack(App(), "Cidr"),
            "Cluster",
            cluster_name="c",
            node_pools=pools,
            public_access_cidrs=["0.0.0.0/0"],
        )


def test_node_provisioning_is_one_typed_value_with_the_file_spellings() -> None:
    """The context and the platform file spell the modes as before; the spec holds the enum."""
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    assert platform.node_provisioning is NodeProvisioning.MANAGED
    karpenter = platform.with_node_provisioning(NodeProvisioning("karpenter"))
    assert karpenter.node_provisioning is NodeProvisioning.KARPENTER
    assert karpenter.model_dump(mode="json")["node_provisioning"] == "karpenter"
    schema = PlatformSpec.model_json_schema()
    assert schema["$defs"]["NodeProvisioning"]["enum"] == ["managed", "karpenter"]
    assert NodeProvisioning.MANAGED.managed_pools(platform.node_pools) == platform.node_pools
    assert NodeProvisioning.KARPENTER.managed_pools(platform.node_pools) == (platform.system_pool,)
    assert NodeProvisioning.KARPENTER.uses_karpenter
    assert not NodeProvisioning.KARPENTER.runs_cluster_autoscaler
