"""`cdk destroy` deletes what controllers made while the controllers still run.

Every object a controller turns into AWS resources (an Ingress into a load balancer, its
target groups and security groups; NodePools and EC2NodeClasses into instances; a claim into
an EBS volume; a static volume of a file system) is deleted, read from the synthesized
templates, before its controller (the Helm release or EKS add-on), before the system node
group the controller runs on and before the cluster; a file system outlives its volume.
Prometheus' claim goes with its release. Both provisioning modes of the reference app, and
the loaders example for FSx for Lustre, each synthesized once per session.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from eks_inference import names, versions
from eks_inference.constructs.addons.observability import STORAGE_CLASS, ObservabilityOptions
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.deployed import MANIFEST_TYPE
from tests.helpers.helm_values import missing_keys
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO
from tests.helpers.synthesis import STACK_NAME, Synthesized, example_group
from tests.helpers.teardown import (
    CLAIMS,
    HELM_TYPE,
    Controlled,
    DeletionOrder,
    Node,
    controlled_objects,
    manifest_objects,
)

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
LOADERS_FILE = REPO / "examples" / "loaders.yaml"
PINNED_VALUES = REPO / "tests" / "upstream" / "kube-prometheus-stack-88.5.3-values.yaml"
EBS_CSI = "aws-ebs-csi-driver"
# A static volume's CSI driver -> the EKS add-on that installs it.
CSI_DRIVERS = {
    "s3.csi.aws.com": "aws-mountpoint-s3-csi-driver",
    "fsx.csi.aws.com": "aws-fsx-csi-driver",
    "ebs.csi.aws.com": EBS_CSI,
}
KARPENTER_KINDS = frozenset({"NodePool", "EC2NodeClass", "NodeClaim"})
# What each app holds that controllers turn into AWS resources: at least these, by kind.
EXPECTED_KINDS = {
    "managed": {"Ingress", "PersistentVolume", CLAIMS},
    "karpenter": {"Ingress", "PersistentVolume", CLAIMS, "NodePool", "EC2NodeClass"},
}


def _order(request: pytest.FixtureRequest, mode: str) -> DeletionOrder:
    synth: Synthesized = request.getfixturevalue(
        "reference" if mode == "managed" else "reference_karpenter"
    )
    return DeletionOrder(synth)


def _controlled(order: DeletionOrder) -> list[Controlled]:
    return controlled_objects(
        order,
        ingress_controllers={
            names.ALB_INGRESS_CLASS: versions.AWS_LOAD_BALANCER_CONTROLLER_CHART.chart
        },
        node_provisioner_kinds=KARPENTER_KINDS,
        node_provisioner=versions.KARPENTER_CHART.chart,
        csi_drivers=CSI_DRIVERS,
        provisioned_storage_classes={STORAGE_CLASS: EBS_CSI},
        claiming_releases={versions.KUBE_PROMETHEUS_STACK_CHART.chart: EBS_CSI},
    )


def _controller(order: DeletionOrder, name: str) -> Node:
    """The Helm release of chart ``name``, or else the EKS add-on called ``name``."""
    charts = {r["Properties"]["Chart"] for _, r in order.resources(HELM_TYPE)}
    return order.helm_release(name) if name in charts else order.eks_addon(name)


def _system_nodes(order: DeletionOrder) -> Node:
    return order.nodegroup(names.NODE_POOL_LABEL, PLATFORM.system_pool.name)


def _problems(order: DeletionOrder, controlled: list[Controlled]) -> list[str]:
    """Each controlled object that something it needs could be deleted before."""
    (cluster,) = [node for node, _ in order.resources("AWS::EKS::Cluster")]
    problems = []
    for item in controlled:
        after = order.deleted_after(item.node)
        needed = {f"its controller {item.controller}": _controller(order, item.controller)}
        if item.nodes_and_cluster:
            needed |= {"the system node group": _system_nodes(order), "the cluster": cluster}
        key = item.node[0]
        for logical_id, resource in order.synth.templates[key]["Resources"].items():
            if item.kind == "PersistentVolume" and resource["Type"].startswith("AWS::FSx::"):
                needed[f"the file system's {logical_id}"] = (key, logical_id)
        problems += [
            f"{item.what} ({item.node[1]}) may be deleted after {name}"
            for name, node in needed.items()
            if node not in after
        ]
    return problems


@pytest.mark.parametrize("mode", ["managed", "karpenter"])
@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_every_controller_owned_object_is_deleted_before_its_controller_and_nodes(
    request: pytest.FixtureRequest, mode: str
) -> None:
    order = _order(request, mode)
    controlled = _controlled(order)
    assert {item.kind for item in controlled} >= EXPECTED_KINDS[mode]
    # Every exposed deployment's Ingress is among them, each in its deployment's nested stack.
    ingresses = {item.node[0] for item in controlled if item.kind == "Ingress"}
    exposed = {f"{STACK_NAME}/Deployment-{name}" for name in PLATFORM.routes()}
    assert exposed <= ingresses
    assert _problems(order, controlled) == []


@pytest.mark.parametrize("mode", ["managed", "karpenter"])
@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_prometheus_claims_are_deleted_with_the_release_while_the_driver_runs(
    request: pytest.FixtureRequest, mode: str
) -> None:
    order = _order(request, mode)
    release = order.helm_release(versions.KUBE_PROMETHEUS_STACK_CHART.chart)
    properties = order.synth.templates[STACK_NAME]["Resources"][release[1]]["Properties"]
    values: dict[str, Any] = json.loads(properties["Values"])
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Delete",
        "whenScaled": "Retain",
    }
    assert spec["persistentVolumeClaimRetentionPolicy"] == (
        ObservabilityOptions().prometheus_claim_retention
    )
    # The pinned chart has every key given under prometheus (a misspelt key would be ignored).
    pinned = yaml.safe_load(PINNED_VALUES.read_text())
    assert "persistentVolumeClaimRetentionPolicy" in pinned["prometheus"]["prometheusSpec"]
    assert missing_keys(values["prometheus"], pinned["prometheus"], "prometheus.") == []

    # The monitoring namespace is deleted after everything in it, the claim included, and
    # before the EBS CSI driver, its StorageClass and the nodes it runs on.
    (namespace,) = [
        node
        for node, resource in order.resources(MANIFEST_TYPE)
        if [(o["kind"], o["metadata"]["name"]) for o in manifest_objects(resource)]
        == [("Namespace", names.MONITORING_NAMESPACE)]
    ]
    resource = order.synth.templates[namespace[0]]["Resources"][namespace[1]]
    assert resource.get("DeletionPolicy", "Delete") == "Delete"
    (storage_class,) = [
        node
        for node, resource in order.resources(MANIFEST_TYPE)
        if [o["kind"] for o in manifest_objects(resource)] == ["StorageClass"]
    ]
    after_namespace = order.deleted_after(namespace)
    for needed in (order.eks_addon(EBS_CSI), storage_class, _system_nodes(order)):
        assert needed in after_namespace, needed
    inside = [
        node
        for node, resource in order.resources(HELM_TYPE)
        if resource["Properties"].get("Namespace") == names.MONITORING_NAMESPACE
    ] + [
        node
        for node, resource in order.resources(MANIFEST_TYPE)
        if any(
            o["metadata"].get("namespace") == names.MONITORING_NAMESPACE
            for o in manifest_objects(resource)
        )
    ]
    assert release in inside
    assert [node for node in inside if namespace not in order.deleted_after(node)] == []


@pytest.mark.synth
@example_group(LOADERS_FILE)
def test_file_system_volumes_are_deleted_before_their_driver_and_file_system(
    synthesized_platform: Callable[[PlatformSpec], Synthesized],
) -> None:
    order = DeletionOrder(synthesized_platform(PlatformSpec.from_yaml(LOADERS_FILE)))
    controlled = _controlled(order)
    lustre = [item for item in controlled if item.controller == "aws-fsx-csi-driver"]
    assert lustre
    # Its file system is in the same nested stack, and among what is deleted after it.
    for item in lustre:
        resources = order.synth.templates[item.node[0]]["Resources"]
        file_systems = [i for i, r in resources.items() if r["Type"] == "AWS::FSx::FileSystem"]
        assert file_systems, item.what
    assert _problems(order, controlled) == []
