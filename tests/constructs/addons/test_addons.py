"""Add-ons: pinned charts and add-ons, placement from node pools, Pod Identity, ordering."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from eks_inference import names, versions
from eks_inference.specification.artifacts import artifact_prefix
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import Synthesized

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

SYSTEM_SELECTOR = {"eks-inference.io/node-pool": "system"}


def _charts(reference: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["Chart"]: r
        for r in reference.resources("Custom::AWSCDK-EKS-HelmChart").values()
    }


def _values(chart: dict[str, Any]) -> dict[str, Any]:
    values = chart["Properties"]["Values"]
    if isinstance(values, dict):  # Fn::Join around a token (the region)
        values = "".join(p if isinstance(p, str) else "REGION" for p in values["Fn::Join"][1])
    parsed: dict[str, Any] = json.loads(values)
    return parsed


def test_every_chart_is_pinned_to_the_versions_module(reference: Synthesized) -> None:
    charts = _charts(reference)
    expected = {
        versions.NEURON_HELM_CHART,
        versions.NVIDIA_DEVICE_PLUGIN_CHART,
        versions.KUBERAY_OPERATOR_CHART,
        versions.CLUSTER_AUTOSCALER_CHART,
        versions.KUBE_PROMETHEUS_STACK_CHART,
        versions.DCGM_EXPORTER_CHART,
        versions.KEDA_CHART,
        versions.AWS_LOAD_BALANCER_CONTROLLER_CHART,
        versions.EXTERNAL_SECRETS_CHART,
    }
    assert set(charts) == {c.chart for c in expected}
    for pinned in expected:
        props = charts[pinned.chart]["Properties"]
        assert props["Version"] == pinned.version
        assert props["Repository"] == pinned.repository


def test_neuron_chart_enables_the_named_scheduler_on_the_system_pool(
    reference: Synthesized,
) -> None:
    values = _values(_charts(reference)["neuron-helm-chart"])
    assert values["neuronInstances"] == ["inf2.48xlarge"]
    assert {
        "key": "aws.amazon.com/neuron",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in values["devicePlugin"]["tolerations"]
    scheduler = values["scheduler"]
    assert scheduler["enabled"] is True
    assert scheduler["nodeSelector"] == SYSTEM_SELECTOR
    custom = scheduler["customScheduler"]
    assert custom["fullnameOverride"] == names.NEURON_SCHEDULER_NAME
    assert custom["image"]["tag"] == versions.KUBERNETES_RELEASES["1.35"].kube_scheduler_image_tag
    assert custom["nodeSelector"] == SYSTEM_SELECTOR


def test_nvidia_plugin_runs_on_the_gpu_pool_only(reference: Synthesized) -> None:
    values = _values(_charts(reference)["nvidia-device-plugin"])
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "eks-inference.io/node-pool", "operator": "In", "values": ["g6e"]},
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
            ]
        }
    ]
    assert {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in values["tolerations"]


def test_kuberay_operator_installs_crds_on_the_system_pool(reference: Synthesized) -> None:
    chart = _charts(reference)["kuberay-operator"]
    assert chart["Properties"].get("SkipCrds", False) is False
    values = _values(chart)
    assert values["image"]["tag"] == "v1.7.0"
    assert values["nodeSelector"] == SYSTEM_SELECTOR


def test_cluster_autoscaler_matches_the_cluster_and_waits_for_its_identity(
    reference: Synthesized,
) -> None:
    chart = _charts(reference)["cluster-autoscaler"]
    values = _values(chart)
    assert values["image"] == {
        "repository": "registry.k8s.io/autoscaling/cluster-autoscaler",
        "tag": "v1.35.2",
    }
    assert values["autoDiscovery"] == {"clusterName": "eks-inference"}
    assert values["rbac"]["serviceAccount"]["name"] == "cluster-autoscaler"
    assert values["nodeSelector"] == SYSTEM_SELECTOR
    associations = reference.resources("AWS::EKS::PodIdentityAssociation")
    (association_id,) = (
        k
        for k, v in associations.items()
        if v["Properties"]["ServiceAccount"] == "cluster-autoscaler"
    )
    assert association_id in chart["DependsOn"]
    association = associations[association_id]
    assert association["Properties"]["Namespace"] == "kube-system"
    agent = next(
        k
        for k, v in reference.resources("AWS::EKS::Addon").items()
        if v["Properties"]["AddonName"] == "eks-pod-identity-agent"
    )
    assert agent in association["DependsOn"]


def test_cluster_autoscaler_role_is_least_privilege(reference: Synthesized) -> None:
    reference.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        # This cluster's pods only (tests/stacks/test_least_privilege.py).
                        "Condition": {
                            "StringEquals": {
                                "aws:SourceAccount": {"Ref": "AWS::AccountId"},
                                "aws:RequestTag/eks-cluster-arn": Match.any_value(),
                            },
                        },
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ],
                "Version": "2012-10-17",
            },
            "Description": Match.string_like_regexp("Cluster Autoscaler"),
        },
    )
    reference.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": [
                                "autoscaling:SetDesiredCapacity",
                                "autoscaling:TerminateInstanceInAutoScalingGroup",
                            ],
                            "Condition": {
                                "StringEquals": {
                                    "aws:ResourceTag/k8s.io/cluster-autoscaler/eks-inference": (
                                        "owned"
                                    )
                                }
                            },
                            "Effect": "Allow",
                            "Resource": "*",
                        }
                    ]
                )
            }
        },
    )


def test_eks_addons_are_pinned(reference: Synthesized) -> None:
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in reference.resources("AWS::EKS::Addon").values()
    }
    assert addons["eks-pod-identity-agent"]["AddonVersion"] == (
        versions.EKS_POD_IDENTITY_AGENT_ADDON_VERSION
    )
    mountpoint = addons["aws-mountpoint-s3-csi-driver"]
    assert mountpoint["AddonVersion"] == versions.MOUNTPOINT_S3_CSI_ADDON_VERSION
    (association,) = mountpoint["PodIdentityAssociations"]
    assert association["ServiceAccount"] == names.MOUNTPOINT_SERVICE_ACCOUNT
    assert "MountpointRole" in association["RoleArn"]["Fn::GetAtt"][0]


def test_mountpoint_role_reads_only_the_mounted_prefixes(reference: Synthesized) -> None:
    policy = next(
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in reference.resources("AWS::IAM::Policy").values()
        if "MountpointRole" in p["Properties"]["Roles"][0]["Ref"]
    )
    listed = sorted(
        s["Condition"]["StringLike"]["s3:prefix"][0]
        for s in policy
        if s["Action"] == "s3:ListBucket"
    )
    # Both Mountpoint deployments, plus the exact key of the Neuron one's compiled artifacts
    # (not the whole artifacts tree); not the Run:ai Streamer deployment
    # (models/mistral-7b/), which reads S3 itself.
    neuron = PlatformSpec.from_yaml(REFERENCE_PLATFORM).deployment("llama3-8b-inf2")
    assert listed == ["models/llama-3-8b/", "models/qwen2.5-7b/", artifact_prefix(neuron)]
    readable = [
        resource["Fn::Join"][1][-1]
        for s in policy
        if s["Action"] == "s3:GetObject"
        for resource in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    ]
    assert sorted(readable) == [f"/{p}*" for p in listed]
    actions = {
        a for s in policy for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {"s3:ListBucket", "s3:GetObject"}
