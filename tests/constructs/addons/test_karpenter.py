"""KarpenterNodeProvisioning as synthesized in the Karpenter-mode reference app.

The controller's policies are compared with Karpenter's documented reference policy of the
pinned release, action by action and resource by resource under identical conditions: no
statement may grant more, and everything documented (but the zonal shift read, which is off)
is granted. The interruption queue and rules are those of the same reference template.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from eks_inference import names, versions
from eks_inference.charts.karpenter import karpenter_chart
from eks_inference.constructs.addons.karpenter import (
    ATTACHED_POLICIES,
    SERVICE_ACCOUNT,
    documented_policy,
    fill,
)
from eks_inference.constructs.cluster import NODE_POLICIES
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import STACK_NAME, Synthesized

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM).with_node_provisioning("karpenter")
HELM = "Custom::AWSCDK-EKS-HelmChart"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


def _resources(synth: Synthesized, kind: str, containing: str = "Karpenter") -> dict[str, Any]:
    return {k: r for k, r in synth.resources(kind).items() if containing in k}


def _one(synth: Synthesized, kind: str, containing: str = "Karpenter") -> tuple[str, Any]:
    (found,) = _resources(synth, kind, containing).items()
    return found


def _placeholders(value: Any, names_by_id: dict[str, str]) -> Any:
    """A template value with intrinsics written back as the reference template's ``${...}``."""
    if isinstance(value, list):
        return [_placeholders(v, names_by_id) for v in value]
    if isinstance(value, dict):
        if set(value) == {"Ref"} and str(value["Ref"]).startswith("AWS::"):
            return "${" + value["Ref"] + "}"
        if set(value) == {"Fn::GetAtt"}:
            resource, attribute = value["Fn::GetAtt"]
            return "${" + names_by_id[resource] + "." + attribute + "}"
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return str(separator).join(_placeholders(p, names_by_id) for p in parts)
        return {k: _placeholders(v, names_by_id) for k, v in value.items()}
    return value


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


Grant = tuple[str, str, str, str]  # effect, action, resource, conditions (JSON)


def _grants(statements: list[dict[str, Any]]) -> Iterator[Grant]:
    for statement in statements:
        conditions = json.dumps(statement.get("Condition", {}), sort_keys=True)
        for action in _as_list(statement["Action"]):
            for resource in _as_list(statement["Resource"]):
                yield statement["Effect"], action, resource, conditions


@pytest.fixture(scope="module")
def controller(reference_karpenter: Synthesized) -> tuple[str, list[dict[str, Any]]]:
    """The controller role's logical id and its statements, written with placeholders."""
    _, association = _one(reference_karpenter, "AWS::EKS::PodIdentityAssociation")
    assert association["Properties"]["ServiceAccount"] == SERVICE_ACCOUNT
    assert association["Properties"]["Namespace"] == "kube-system"
    role = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    node_role, _ = _one(reference_karpenter, "AWS::IAM::Role", "KarpenterNodeRole")
    queue, _ = _one(reference_karpenter, "AWS::SQS::Queue")
    ids = {node_role: "KarpenterNodeRole", queue: "KarpenterInterruptionQueue"}
    statements = []
    for kind in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
        for logical_id, policy in reference_karpenter.resources(kind).items():
            if {"Ref": role} in policy["Properties"].get("Roles", []):
                assert kind == "AWS::IAM::ManagedPolicy", logical_id
                assert policy["Properties"]["Roles"] == [{"Ref": role}]
                document = _placeholders(policy["Properties"]["PolicyDocument"], ids)
                statements += document["Statement"]
    role_props = reference_karpenter.templates[STACK_NAME]["Resources"][role]["Properties"]
    assert "ManagedPolicyArns" not in role_props
    assert "Policies" not in role_props
    return role, statements


def _documented_grants() -> set[Grant]:
    literal = {"ClusterName": PLATFORM.cluster_name}
    keep = {
        name: "${" + name + "}"
        for name in (
            "AWS::Partition",
            "AWS::Region",
            "AWS::AccountId",
            "KarpenterNodeRole.Arn",
            "KarpenterInterruptionQueue.Arn",
        )
    }
    policies = documented_policy()["policies"]
    return {
        grant
        for name in ATTACHED_POLICIES
        for grant in _grants(fill(policies[name], {**keep, **literal})["Statement"])
    }


def test_no_statement_grants_more_than_the_documented_controller_policy(
    controller: tuple[str, list[dict[str, Any]]],
) -> None:
    _, statements = controller
    granted = set(_grants(statements))
    documented = _documented_grants()
    assert granted - documented == set()
    # And all of it, so the controller can work; the zonal shift read alone is left out.
    assert documented - granted == set()
    zonal = {
        a
        for _, a, _, _ in _grants(documented_policy()["policies"]["ZonalShiftPolicy"]["Statement"])
    }
    assert zonal == {"arc-zonal-shift:GetManagedResource"}
    assert not {a for _, a, _, _ in granted} & zonal


def test_the_documented_policy_is_kept_with_its_provenance() -> None:
    document = documented_policy()
    assert document["version"] == versions.KARPENTER_VERSION
    assert document["commit"] in document["source"]
    assert "/website/content/en/v1.14/" in document["source"]
    assert set(ATTACHED_POLICIES) < set(document["policies"])


def test_the_controller_reads_only_the_interruption_queue(
    reference_karpenter: Synthesized, controller: tuple[str, list[dict[str, Any]]]
) -> None:
    _, statements = controller
    queue_grants = {
        (action, resource)
        for _, action, resource, _ in _grants(statements)
        if action.startswith("sqs:")
    }
    assert queue_grants == {
        (action, "${KarpenterInterruptionQueue.Arn}")
        for action in ("sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage")
    }
    # No other role of the stack may receive from it.
    queue, _ = _one(reference_karpenter, "AWS::SQS::Queue")
    role, _ = controller
    others = [
        (logical_id, policy)
        for kind in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy")
        for logical_id, policy in reference_karpenter.resources(kind).items()
        if {"Ref": role} not in policy["Properties"].get("Roles", [])
    ]
    for logical_id, policy in found(others):
        assert queue not in json.dumps(policy["Properties"]["PolicyDocument"]), logical_id


def test_the_interruption_queue_is_encrypted_and_fed_by_the_documented_rules(
    reference_karpenter: Synthesized,
) -> None:
    queue_id, queue = _one(reference_karpenter, "AWS::SQS::Queue")
    documented = documented_policy()
    assert queue["Properties"] == {
        "MessageRetentionPeriod": documented["interruption_queue"]["MessageRetentionPeriod"],
        "SqsManagedSseEnabled": True,
    }
    rules = _resources(reference_karpenter, "AWS::Events::Rule")
    patterns = sorted(
        (r["Properties"]["EventPattern"]["source"], r["Properties"]["EventPattern"]["detail-type"])
        for r in rules.values()
    )
    assert patterns == sorted(
        (p["source"], p["detail-type"]) for p in documented["interruption_rules"].values()
    )
    detail_types = {d for _, types in patterns for d in types}
    assert {
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "AWS Health Event",
    } <= detail_types
    for rule in rules.values():
        (target,) = rule["Properties"]["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    _, policy = _one(reference_karpenter, "AWS::SQS::QueuePolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    deny_plain = [s for s in statements if s["Effect"] == "Deny"]
    assert deny_plain[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    senders = [s for s in statements if s["Effect"] == "Allow"]
    # One statement per rule, each only for events that rule routes.
    assert len(senders) == len(rules)
    for sender in senders:
        assert sender["Principal"] == {"Service": "events.amazonaws.com"}
        assert sender["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::GetAtt"][0] in rules


def test_the_node_role_has_the_node_policies_and_an_ec2_linux_access_entry(
    reference_karpenter: Synthesized,
) -> None:
    role_id, role = _one(reference_karpenter, "AWS::IAM::Role", "KarpenterNodeRole")
    props = role["Properties"]
    assert props["RoleName"] == names.karpenter_node_role_name(PLATFORM.cluster_name)
    assert props["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }
    attached = sorted(json.dumps(arn) for arn in props["ManagedPolicyArns"])
    assert len(attached) == len(NODE_POLICIES)
    for policy in NODE_POLICIES:
        assert any(policy in arn for arn in attached)
    assert "AmazonEKS_CNI_Policy" not in json.dumps(props)
    _, entry = _one(reference_karpenter, "AWS::EKS::AccessEntry", "KarpenterNodeAccess")
    assert entry["Properties"]["Type"] == "EC2_LINUX"
    assert entry["Properties"]["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert entry["Properties"]["AccessPolicies"] == []


def test_subnets_and_the_cluster_security_group_carry_the_discovery_tag(
    reference_karpenter: Synthesized,
) -> None:
    tag = {"Key": names.KARPENTER_DISCOVERY_TAG, "Value": PLATFORM.cluster_name}
    subnets = reference_karpenter.resources("AWS::EC2::Subnet")
    tagged = {k for k, s in subnets.items() if tag in s["Properties"]["Tags"]}
    private = {
        k
        for k, s in subnets.items()
        if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in s["Properties"]["Tags"]
    }
    assert tagged == private
    assert len(private) == 3
    _, custom = _one(reference_karpenter, "Custom::AWS", "SecurityGroupDiscoveryTag")
    create = json.dumps(custom["Properties"]["Create"])
    assert "createTags" in create
    assert "ClusterSecurityGroupId" in create
    assert names.KARPENTER_DISCOVERY_TAG in create
    _, policy = _one(reference_karpenter, "AWS::IAM::Policy", "SecurityGroupDiscoveryTag")
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "ec2:CreateTags"
    assert "ClusterSecurityGroupId" in json.dumps(statement["Resource"])
    assert "*" not in json.dumps(statement["Resource"])


def test_the_pinned_charts_install_crds_then_the_controller_on_the_system_pool(
    reference_karpenter: Synthesized,
) -> None:
    charts = _resources(reference_karpenter, HELM)
    crds = next(r for r in charts.values() if r["Properties"]["Chart"] == "karpenter-crd")
    controller = next(r for r in charts.values() if r["Properties"]["Chart"] == "karpenter")
    for chart, pinned in (
        (crds, versions.KARPENTER_CRD_CHART),
        (controller, versions.KARPENTER_CHART),
    ):
        assert chart["Properties"]["Version"] == pinned.version == versions.KARPENTER_VERSION
        assert chart["Properties"]["Repository"] == pinned.repository
        assert chart["Properties"]["Namespace"] == "kube-system"
    assert controller["Properties"]["SkipCrds"] is True
    crds_id = next(k for k, r in charts.items() if r is crds)
    assert crds_id in controller["DependsOn"]
    system_group = next(iter(reference_karpenter.resources("AWS::EKS::Nodegroup")))
    assert system_group in controller["DependsOn"]
    values = json.dumps(controller["Properties"]["Values"])
    for expected in (
        '\\"clusterName\\":\\"eks-inference\\"',
        '\\"interruptionQueue\\":\\"',
        "QueueName",
        '\\"eks-inference.io/node-pool\\":\\"system\\"',
        '\\"name\\":\\"AWS_REGION\\"',
        '\\"vmMemoryOverheadPercent\\":0.075',
    ):
        assert expected in values, expected
    assert '\\"replicas\\":2' in values


def test_cloudformation_applies_the_node_pools_the_manifests_hold(
    reference_karpenter: Synthesized,
) -> None:
    manifest_id, manifest = _one(reference_karpenter, MANIFEST, "KarpenterNodePools")
    applied = json.loads(manifest["Properties"]["Manifest"])
    for obj in applied:
        labels = obj["metadata"]["labels"]
        for key in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:
            del labels[key]
    expected = karpenter_chart(
        cluster_name=PLATFORM.cluster_name,
        pools=PLATFORM.node_pools,
        deployments=PLATFORM.deployments,
    ).to_json()
    assert applied == expected
    depends = set(manifest["DependsOn"])
    controller = next(
        k
        for k, r in _resources(reference_karpenter, HELM).items()
        if r["Properties"]["Chart"] == "karpenter"
    )
    access, _ = _one(reference_karpenter, "AWS::EKS::AccessEntry", "KarpenterNodeAccess")
    assert {controller, access} <= depends
    # Deployments are deleted before the NodePools, the NodePools before the controller.
    parent = reference_karpenter.templates[STACK_NAME]["Resources"]
    nested = [k for k, r in parent.items() if r["Type"] == "AWS::CloudFormation::Stack"]
    assert len(nested) == len(PLATFORM.deployments)
    for stack_id in nested:
        assert manifest_id in parent[stack_id]["DependsOn"]


def test_only_the_system_pool_is_a_node_group_and_no_cluster_autoscaler_runs(
    reference: Synthesized, reference_karpenter: Synthesized
) -> None:
    def autoscalers(synth: Synthesized) -> list[str]:
        return [
            k
            for k, r in synth.resources(HELM).items()
            if r["Properties"]["Chart"] == versions.CLUSTER_AUTOSCALER_CHART.chart
        ]

    groups = reference_karpenter.resources("AWS::EKS::Nodegroup").values()
    assert [g["Properties"]["Labels"][names.NODE_POOL_LABEL] for g in groups] == ["system"]
    assert autoscalers(reference_karpenter) == []
    assert len(autoscalers(reference)) == 1
    assert len(reference.resources("AWS::EKS::Nodegroup")) == len(PLATFORM.node_pools)
    assert not _resources(reference, HELM, "Karpenter")
