"""The EFA fabric of the multi-node example's pools, as CloudFormation creates it in both modes.

Managed node groups: each pool with ``efa`` (p5.48xlarge, 32 EFAs; g6e.48xlarge, 4) has a
launch template with the primary ENA interface and one EFA-only interface per network card,
the cluster security group and the pool's EFA security group on the primary and the EFA one
on every other, and the pool's cluster placement group; the EFA security group admits and
sends all traffic to itself only. Karpenter: the same security group and placement group,
made before the NodePools are applied, and a controller policy that already allows launching
into them. Pools without EFA (the example's CPU pool, the reference platform's Neuron and
single-node GPU pools) get none of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.platforms import REPO, platform_data
from tests.helpers.synthesis import (
    STACK_NAME,
    Synthesized,
    example_group,
    in_provisioning_modes,
)

EXAMPLE = REPO / "examples" / "multi-node.yaml"
EXAMPLE_GROUP = example_group(EXAMPLE)
CLUSTER = "eks-inference-multi-node"
CLUSTER_GROUP = {"Fn::GetAtt": ["InferenceCluster6D181EAC", "ClusterSecurityGroupId"]}
EFA_CARDS = {"p5": 32, "g6e": 4}


@pytest.fixture(scope="module")
def synthesized(
    synthesized_platform: Callable[[PlatformSpec], Synthesized],
) -> Callable[[str], Synthesized]:
    return in_provisioning_modes(synthesized_platform, EXAMPLE)


def _resources(synth: Synthesized, resource_type: str) -> dict[str, dict[str, Any]]:
    return synth.resources(resource_type)


def _paths(synth: Synthesized, resource_type: str) -> list[str]:
    """The construct paths of the main stack's resources of one type."""
    return [r["Metadata"]["aws:cdk:path"] for r in synth.resources(resource_type).values()]


def _by_path(synth: Synthesized, resource_type: str, part: str) -> dict[str, Any]:
    (resource,) = [
        r
        for r in _resources(synth, resource_type).values()
        if f"/{part}/" in r["Metadata"]["aws:cdk:path"]
    ]
    return resource


def _logical_id(synth: Synthesized, resource_type: str, part: str) -> str:
    (logical_id,) = [
        key
        for key, r in _resources(synth, resource_type).items()
        if f"/{part}/" in r["Metadata"]["aws:cdk:path"]
    ]
    return logical_id


def _efa_scope(mode: str, pool: str) -> str:
    return f"Pool-{pool}/Efa" if mode == "managed" else f"Karpenter/Efa-{pool}"


@pytest.mark.synth
@EXAMPLE_GROUP
@pytest.mark.parametrize("pool", sorted(EFA_CARDS))
def test_the_launch_template_attaches_one_efa_per_network_card(
    synthesized: Callable[[str], Synthesized], pool: str
) -> None:
    synth = synthesized("managed")
    data = _by_path(synth, "AWS::EC2::LaunchTemplate", f"Pool-{pool}")["Properties"][
        "LaunchTemplateData"
    ]
    interfaces = data["NetworkInterfaces"]
    cards = EFA_CARDS[pool]
    # The primary ENA interface, then an EFA-only one on every card: 33 on p5.48xlarge.
    assert len(interfaces) == cards + 1
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces] == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        *((card, 0, "efa-only") for card in range(1, cards)),
    ]
    own = {"Fn::GetAtt": [_logical_id(synth, "AWS::EC2::SecurityGroup", f"Pool-{pool}"), "GroupId"]}
    assert interfaces[0]["Groups"] == [CLUSTER_GROUP, own]
    assert all(i["Groups"] == [own] for i in interfaces[1:])
    # The node group places the nodes in its subnets; a subnet here would contradict it.
    assert not any("SubnetId" in i for i in interfaces)
    assert "SecurityGroupIds" not in data


@pytest.mark.synth
@EXAMPLE_GROUP
@pytest.mark.parametrize("pool", sorted(EFA_CARDS))
def test_the_nodes_launch_into_the_pools_cluster_placement_group(
    synthesized: Callable[[str], Synthesized], pool: str
) -> None:
    synth = synthesized("managed")
    template = _by_path(synth, "AWS::EC2::LaunchTemplate", f"Pool-{pool}")
    name = f"efa-{CLUSTER}-{pool}"
    assert template["Properties"]["LaunchTemplateData"]["Placement"] == {"GroupName": name}
    group_id = _logical_id(synth, "Custom::AWS", f"Pool-{pool}/Efa/PlacementGroup")
    assert group_id in template["DependsOn"]
    group = synth.resources("Custom::AWS")[group_id]["Properties"]
    create = json.loads(group["Create"])
    assert (create["service"], create["action"]) == ("EC2", "createPlacementGroup")
    assert create["parameters"] == {"GroupName": name, "Strategy": "cluster"}
    delete = json.loads(group["Delete"])
    assert (delete["action"], delete["parameters"]) == ("deletePlacementGroup", {"GroupName": name})
    assert delete["ignoreErrorCodesMatching"] == "InvalidPlacementGroup.Unknown"


@pytest.mark.synth
@EXAMPLE_GROUP
@pytest.mark.parametrize("mode", ["managed", "karpenter"])
@pytest.mark.parametrize("pool", sorted(EFA_CARDS))
def test_the_efa_security_group_admits_and_sends_only_to_itself(
    synthesized: Callable[[str], Synthesized], mode: str, pool: str
) -> None:
    synth = synthesized(mode)
    scope = _efa_scope(mode, pool)
    group_id = _logical_id(synth, "AWS::EC2::SecurityGroup", scope)
    group = synth.resources("AWS::EC2::SecurityGroup")[group_id]["Properties"]
    assert group["GroupName"] == f"efa-{CLUSTER}-{pool}"
    assert "SecurityGroupIngress" not in group
    assert "SecurityGroupEgress" not in group
    itself = {"Fn::GetAtt": [group_id, "GroupId"]}
    ingress = found(
        r["Properties"]
        for r in synth.resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == itself
    )
    egress = found(
        r["Properties"]
        for r in synth.resources("AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == itself
    )
    assert [(r["IpProtocol"], r["SourceSecurityGroupId"]) for r in ingress] == [("-1", itself)]
    assert [(r["IpProtocol"], r["DestinationSecurityGroupId"]) for r in egress] == [("-1", itself)]


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_cpu_pool_gets_no_fabric(synthesized: Callable[[str], Synthesized]) -> None:
    synth = synthesized("managed")
    data = _by_path(synth, "AWS::EC2::LaunchTemplate", "Pool-system")["Properties"][
        "LaunchTemplateData"
    ]
    assert "NetworkInterfaces" not in data
    assert "Placement" not in data
    groups = _paths(synth, "AWS::EC2::SecurityGroup")
    assert not [path for path in groups if "/Pool-system/" in path]


@pytest.mark.synth
@EXAMPLE_GROUP
def test_karpenter_finds_the_groups_made_before_its_node_pools(
    synthesized: Callable[[str], Synthesized],
) -> None:
    synth = synthesized("karpenter")
    (manifest,) = [
        r
        for key, r in synth.resources("Custom::AWSCDK-EKS-KubernetesResource").items()
        if "KarpenterNodePools" in key
    ]
    classes = {
        o["metadata"]["name"]: o["spec"]
        for o in json.loads(manifest["Properties"]["Manifest"])
        if o["kind"] == "EC2NodeClass"
    }
    for pool in EFA_CARDS:
        scope = _efa_scope("karpenter", pool)
        group = _logical_id(synth, "AWS::EC2::SecurityGroup", scope)
        placement = _logical_id(synth, "Custom::AWS", f"{scope}/PlacementGroup")
        assert {group, placement} <= set(manifest["DependsOn"])
        name = synth.resources("AWS::EC2::SecurityGroup")[group]["Properties"]["GroupName"]
        create = json.loads(synth.resources("Custom::AWS")[placement]["Properties"]["Create"])
        assert {"name": name} in classes[pool]["securityGroupSelectorTerms"]
        assert classes[pool]["placementGroupSelector"] == {
            "name": create["parameters"]["GroupName"]
        }
    # Karpenter mode makes no launch template of its own for these pools.
    templates = _paths(synth, "AWS::EC2::LaunchTemplate")
    assert not [path for path in templates if "/Pool-p5/" in path or "/Pool-g6e/" in path]


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_karpenter_controller_may_launch_with_the_fabric(
    synthesized: Callable[[str], Synthesized],
) -> None:
    """Launching into a placement group with a security group and EFA interfaces is
    ``ec2:CreateFleet``/``ec2:RunInstances`` on those resources; finding the groups by name is
    ``ec2:DescribePlacementGroups``/``ec2:DescribeSecurityGroups``. The documented policy has
    them all; nothing is added for EFA."""
    synth = synthesized("karpenter")
    statements = [
        s
        for r in synth.resources("AWS::IAM::ManagedPolicy").values()
        if "Karpenter" in r["Metadata"]["aws:cdk:path"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    launching = found(s for s in statements if "ec2:CreateFleet" in s["Action"])
    resources = json.dumps([s["Resource"] for s in launching])
    for kind in ("placement-group/*", "security-group/*", "network-interface/*"):
        assert kind in resources, kind
    described = {
        a
        for s in statements
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert {"ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups"} <= described


@pytest.mark.synth
@pytest.mark.parametrize("mode", ["managed", "karpenter"])
def test_pools_without_efa_get_no_fabric(request: pytest.FixtureRequest, mode: str) -> None:
    """The reference platform: a CPU, a Neuron and a single-node GPU pool, none with EFA."""
    synth: Synthesized = request.getfixturevalue(
        "reference" if mode == "managed" else "reference_karpenter"
    )
    template = json.dumps(synth.templates[STACK_NAME])
    assert "createPlacementGroup" not in template
    assert "placementGroupSelector" not in template
    assert "networkInterfaces" not in template
    templates = found(synth.resources("AWS::EC2::LaunchTemplate").values())
    for launch_template in templates:
        data = launch_template["Properties"]["LaunchTemplateData"]
        assert "NetworkInterfaces" not in data
        assert "Placement" not in data
    assert not [p for p in _paths(synth, "AWS::EC2::SecurityGroup") if "/Efa" in p]


@pytest.mark.synth
def test_a_gpu_pool_of_an_efa_instance_type_serving_on_one_node_gets_no_fabric(
    synthesized_platform: Callable[[PlatformSpec], Synthesized], tmp_path: Path
) -> None:
    """The example with a g6e.24xlarge pool (EFA-capable), which holds no multi-node deployment:
    its efa stays off, and so does everything it would bring."""
    data = platform_data(EXAMPLE)
    data["node_pools"].append(
        {"name": "g6e-single", "instance_types": ["g6e.24xlarge"], "max_size": 1, "zones": [0]}
    )
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    platform = PlatformSpec.from_yaml(path)
    (single,) = [pool for pool in platform.node_pools if pool.name == "g6e-single"]
    assert not single.efa
    assert single.instance.efa
    synth = synthesized_platform(platform)
    data = _by_path(synth, "AWS::EC2::LaunchTemplate", "Pool-g6e-single")["Properties"][
        "LaunchTemplateData"
    ]
    assert "NetworkInterfaces" not in data
    assert "Placement" not in data
    assert not [p for p in _paths(synth, "AWS::EC2::SecurityGroup") if "/Pool-g6e-single/" in p]
    assert not [p for p in _paths(synth, "Custom::AWS") if "/Pool-g6e-single/Efa/" in p]
    # The EFA pools beside it keep theirs.
    assert found(p for p in _paths(synth, "Custom::AWS") if "/Pool-g6e/Efa/" in p)
