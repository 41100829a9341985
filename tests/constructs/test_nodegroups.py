"""Node groups: AMI types, taints, labels, root volumes and autoscaler tags, from node pools."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from eks_inference.constructs.nodegroups import cluster_autoscaler_tags
from eks_inference.specification.node_pools import NodePool
from tests.helpers.synthesis import Synthesized

EXPECTED = {
    "m6i.2xlarge": ("AL2023_x86_64_STANDARD", []),
    "inf2.48xlarge": (
        "AL2023_x86_64_NEURON",
        [{"Key": "aws.amazon.com/neuron", "Value": "true", "Effect": "NO_SCHEDULE"}],
    ),
    "g6e.2xlarge": (
        "AL2023_x86_64_NVIDIA",
        [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}],
    ),
}


def test_autoscaler_tags_describe_a_node_that_does_not_exist_yet() -> None:
    pool = NodePool(name="inf2", instance_types=("inf2.48xlarge",), max_size=2)
    assert cluster_autoscaler_tags(pool, "c1") == {
        "k8s.io/cluster-autoscaler/enabled": "true",
        "k8s.io/cluster-autoscaler/c1": "owned",
        "k8s.io/cluster-autoscaler/node-template/label/eks-inference.io/node-pool": "inf2",
        "k8s.io/cluster-autoscaler/node-template/taint/aws.amazon.com/neuron": "true:NoSchedule",
        "k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuroncore": "24",
        "k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuron": "12",
    }


def test_gpu_pool_tags_carry_its_label_and_gpu_count() -> None:
    pool = NodePool(name="g6e", instance_types=("g6e.12xlarge",))
    tags = cluster_autoscaler_tags(pool, "c1")
    assert tags["k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu.present"] == "true"
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "4"
    assert tags["k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu"] == "true:NoSchedule"


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_one_nodegroup_per_pool_with_ami_type_taints_and_labels(reference: Synthesized) -> None:
    nodegroups = reference.resources("AWS::EKS::Nodegroup")
    assert len(nodegroups) == 3
    by_type = {ng["Properties"]["InstanceTypes"][0]: ng["Properties"] for ng in nodegroups.values()}
    assert set(by_type) == set(EXPECTED)
    for instance_type, (ami_type, taints) in EXPECTED.items():
        props = by_type[instance_type]
        assert props["AmiType"] == ami_type
        assert props.get("Taints", []) == taints
        assert props["CapacityType"] == "ON_DEMAND"
        assert "eks-inference.io/node-pool" in props["Labels"]
    assert by_type["g6e.2xlarge"]["Labels"]["nvidia.com/gpu.present"] == "true"
    assert by_type["inf2.48xlarge"]["ScalingConfig"] == {
        "MinSize": 0,
        "MaxSize": 3,
        "DesiredSize": 0,
    }


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_launch_templates_encrypt_gp3_roots_and_require_imdsv2(reference: Synthesized) -> None:
    templates = reference.resources("AWS::EC2::LaunchTemplate")
    nodegroups = reference.resources("AWS::EKS::Nodegroup").values()
    for nodegroup in nodegroups:
        props = nodegroup["Properties"]
        launch_template = templates[props["LaunchTemplate"]["Id"]["Ref"]]["Properties"]
        data = launch_template["LaunchTemplateData"]
        (device,) = data["BlockDeviceMappings"]
        assert device["DeviceName"] == "/dev/xvda"
        assert device["Ebs"]["VolumeType"] == "gp3"
        assert device["Ebs"]["Encrypted"] is True
        minimum = 100 if props["AmiType"].endswith("STANDARD") else 200
        assert device["Ebs"]["VolumeSize"] >= minimum
        # Pods cannot reach instance metadata (and the node role's credentials).
        assert data["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}
        # The node group sets the disk through its launch template only (EKS rejects both).
        assert "DiskSize" not in props


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
@pytest.mark.parametrize(
    ("instance_type", "tags"),
    [
        (
            "inf2.48xlarge",
            {
                "k8s.io/cluster-autoscaler/node-template/taint/aws.amazon.com/neuron": (
                    "true:NoSchedule"
                ),
                "k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuroncore": "24",
                "k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuron": "12",
            },
        ),
        (
            "g6e.2xlarge",
            {
                "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu": "true:NoSchedule",
                "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu": "1",
                "k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu.present": "true",
            },
        ),
    ],
)
def test_accelerator_nodegroups_carry_scale_from_zero_tags(
    reference: Synthesized, instance_type: str, tags: dict[str, str]
) -> None:
    reference.template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "InstanceTypes": [instance_type],
            "Tags": Match.object_like(
                {
                    "k8s.io/cluster-autoscaler/enabled": "true",
                    "k8s.io/cluster-autoscaler/eks-inference": "owned",
                    **tags,
                }
            ),
        },
    )


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_autoscaler_tags_are_copied_to_each_auto_scaling_group(reference: Synthesized) -> None:
    tag_calls = [
        json.dumps(resource["Properties"]["Create"])
        for resource in reference.resources("Custom::AWS").values()
        if "createOrUpdateTags" in json.dumps(resource["Properties"]["Create"])
    ]
    assert len(tag_calls) == 3
    neuron_call = next(c for c in tag_calls if "aws.amazon.com/neuroncore" in c)
    assert "auto-scaling-group" in neuron_call
    assert "nodegroup.resources.autoScalingGroups.0.name" in neuron_call
    assert "true:NoSchedule" in neuron_call
