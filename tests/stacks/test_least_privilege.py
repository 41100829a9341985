"""Least privilege on the reference app: who may assume each role, and what each
acknowledged wildcard grants."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk import NestedStack, Stack
from aws_cdk import aws_iam as iam

from eks_inference.constructs._nag import flatten_reference
from tests.helpers.synthesis import STACK_NAME, Synthesized

PODS = "pods.eks.amazonaws.com"
ACKNOWLEDGED = "aws:cdk:acknowledged-rules"
WILDCARD_FINDING = "AwsSolutions-IAM5[Resource::"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _in_parent(synthesized: Synthesized, key: str, value: Any) -> Any:
    """``value`` of template ``key`` as the parent stack writes it: a nested stack's parameter
    is replaced by what the parent passes for it."""
    if key == STACK_NAME or not (isinstance(value, dict) and "Ref" in value):
        return value
    (nested,) = [
        c
        for c in synthesized.stack.node.find_all()
        if isinstance(c, NestedStack) and c.node.path == key
    ]
    resource_id = synthesized.stack.get_logical_id(nested.nested_stack_resource)
    resource = synthesized.templates[STACK_NAME]["Resources"][resource_id]
    return resource["Properties"]["Parameters"].get(value["Ref"], value)


def _pod_identity_trusts(synthesized: Synthesized) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(template, role, statement)`` of every trust statement naming Pod Identity."""
    for key, logical_id, role in synthesized.all_resources("AWS::IAM::Role"):
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            services = _as_list(statement.get("Principal", {}).get("Service", []))
            if PODS in services:
                yield key, logical_id, statement


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
@pytest.mark.parametrize("fixture", ["reference", "reference_karpenter"])
def test_every_pod_identity_role_trusts_only_this_clusters_pods(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    parent = synthesized.templates[STACK_NAME]["Resources"]
    (cluster,) = [k for k, r in parent.items() if r["Type"] == "AWS::EKS::Cluster"]
    trusts = list(_pod_identity_trusts(synthesized))
    # The VPC CNI, the Mountpoint driver, the load balancer controller, the API-key reader,
    # the metrics stack and the deployments' pods, plus the node provisioner of each mode.
    assert len({(key, role) for key, role, _ in trusts}) >= 7
    for key, role, statement in trusts:
        assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"], (key, role)
        conditions = statement.get("Condition", {})
        assert set(conditions) == {"StringEquals"}, (key, role)
        equals = conditions["StringEquals"]
        assert equals["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}, (key, role)
        cluster_arn = equals["aws:RequestTag/eks-cluster-arn"]
        assert _in_parent(synthesized, key, cluster_arn) == {"Fn::GetAtt": [cluster, "Arn"]}, (
            key,
            role,
        )


def _acknowledged_wildcards(stack: Stack) -> Iterator[tuple[iam.Role, str, str]]:
    """``(role, resource, reason)`` of each wildcard-resource acknowledgment on a role."""
    for construct in stack.node.find_all():
        if not isinstance(construct, iam.Role):
            continue
        for entry in construct.node.metadata:
            if entry.type != ACKNOWLEDGED:
                continue
            for rule, reason in entry.data.items():
                start = rule.find(WILDCARD_FINDING)
                if start >= 0:
                    resource = rule[start + len(WILDCARD_FINDING) : rule.rindex("]")]
                    yield construct, resource, reason


def _granted(synthesized: Synthesized, role: iam.Role) -> dict[str, set[str]]:
    """The actions granted on each resource, as rendered for cdk-nag, by ``role``'s policies."""
    key = STACK_NAME if Stack.of(role) is synthesized.stack else Stack.of(role).node.path
    template = synthesized.templates[key]["Resources"]
    logical_id = Stack.of(role).get_logical_id(role.node.default_child)  # type: ignore[arg-type]
    granted: dict[str, set[str]] = {}
    for resource in template.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": logical_id} not in resource["Properties"].get("Roles", []):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            for arn in _as_list(statement.get("Resource", [])):
                rendered = flatten_reference(role, arn)
                granted.setdefault(rendered, set()).update(_as_list(statement["Action"]))
    return granted


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_each_bucket_wildcard_acknowledgment_names_exactly_what_is_granted(
    reference: Synthesized,
) -> None:
    acknowledged = [
        (role, resource, reason)
        for role, resource, reason in _acknowledged_wildcards(reference.stack)
        if "ModelBucket" in resource
    ]
    assert acknowledged
    by_role: dict[str, set[str]] = {}
    for role, resource, reason in acknowledged:
        granted = _granted(reference, role)
        assert resource in granted, (role.node.path, resource)
        actions = ", ".join(sorted(granted[resource]))
        assert reason == (
            f"Grants {actions} on {resource} only: the trailing '*' is its one wildcard, "
            f"covering the names that begin with the literal {resource[:-1]}."
        )
        by_role.setdefault(role.node.path, set()).add(resource)
    # Every object wildcard a role holds on the bucket is acknowledged on its own, and no other.
    for role, _, _ in acknowledged:
        wildcards = {r for r in _granted(reference, role) if "ModelBucket" in r and "*" in r}
        assert wildcards == by_role[role.node.path], role.node.path
