"""Karpenter NodePools and EC2NodeClasses rendered from the platform's :class:`NodePool` specs.

With ``node_provisioning: karpenter`` every pool but the system pool is a Karpenter NodePool
(the system pool is a managed node group that runs Karpenter; its growth beyond ``min_size``
is a NodePool too, see :class:`~eks_inference.specification.node_pools.KarpenterPool`). Each
NodePool and
its EC2NodeClass are built from the same spec as a managed node group, so its nodes carry the
labels the pods select and the taints they tolerate, boot the same AMI family with the same
encrypted gp3 root volume and IMDSv2 hop limit, and count against a limit derived from
``max_size``. What Karpenter adds is decided here:

* **AMI**: the ``al2023@<release>`` alias pinned in :mod:`eks_inference.versions`; it
  resolves the standard, NVIDIA or Neuron variant of that release by instance type, so GPU
  and Inferentia2 nodes get their drivers; never ``@latest``.
* **Node bootstrap** (:mod:`eks_inference.charts.node_bootstrap`): ``instanceStorePolicy: RAID0``
  where the instance has an NVMe instance store, and on accelerator pools a NodeConfig in
  ``userData`` setting the kubelet's static CPU manager and topology manager (the
  EC2NodeClass's own ``kubelet`` block has no such fields); Karpenter merges it with its own.
* **EFA** (pools with ``efa``, :mod:`eks_inference.charts.efa_interfaces`): the EC2NodeClass
  lists the nodes' network interfaces (the primary ENA interface and one EFA-only interface per
  network card), selects the pool's cluster placement group and adds the pool's EFA security
  group to the cluster's, both by name. Karpenter would attach EFAs by itself only to a node
  launched for a pod that requests ``vpc.amazonaws.com/efa``, and then as ``efa`` interfaces
  (with IP addresses) on every card; listed, every node of the pool gets the same fabric
  whatever pod it was launched for, its EFA-only interfaces take no subnet addresses, and
  Karpenter counts the node's ``vpc.amazonaws.com/efa`` from the EFA-only ones.
* **Capacity types** from the pool: ``capacity_type`` and its fallbacks (on-demand, spot,
  reserved with the pool's Capacity Reservations).
* **Disruption**: accelerator pools consolidate only empty nodes (``WhenEmpty``), and only
  after they have stayed empty longer than the longest model load of the pool's deployments
  (:func:`consolidate_after_seconds`): a replica that comes back in that time (a rollout, a
  scale-up after a scale-down) finds its node, its image and its cache still there, instead of
  paying a node launch, an image pull and a load again. One node at a time may be disrupted.
  Serving and compile pods say how long they must not be moved
  (``karpenter.sh/do-not-disrupt``, :func:`eks_inference.charts.pod.do_not_disrupt`); the
  NodePool's ``terminationGracePeriod`` (:func:`termination_grace_seconds`) is longer than
  any of those (a compile job's whole deadline included), so a drifted or expired node is
  drained only once what runs on it could have finished. CPU pools consolidate underutilized
  nodes too, ten per cent at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from eks_inference.catalog import INSTANCE_TYPES, Accelerator
from eks_inference.charts.compile_job import active_deadline_seconds
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.efa_interfaces import (
    EFA_ONLY_INTERFACE,
    efa_group_name,
    efa_network_interfaces,
)
from eks_inference.charts.metadata import api_object, metadata
from eks_inference.charts.node_bootstrap import (
    LOCAL_STORAGE_STRATEGY,
    formats_instance_store,
    node_config,
    node_config_yaml,
)
from eks_inference.charts.record import ChartRecord
from eks_inference.charts.scheduling import (
    INSTANCE_TYPE_LABEL,
    NodeOffer,
    Taint,
    managed_offer,
)
from eks_inference.names import (
    KARPENTER_DISCOVERY_TAG,
    NODE_POOL_LABEL,
    ZONE_TAG,
    karpenter_node_role_name,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import (
    IMDS_HOP_LIMIT,
    ROOT_DEVICE,
    KarpenterPool,
    NodePool,
    karpenter_pools,
)
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.startup_budget import (
    NODE_AND_IMAGE_SECONDS,
    model_load_seconds,
    rollout_seconds,
)
from eks_inference.versions import EKS_AL2023_AMI_RELEASE

NODE_POOL_API_VERSION = "karpenter.sh/v1"
NODE_CLASS_API_VERSION = "karpenter.k8s.aws/v1"
NODE_POOLS_CRD = "nodepools.karpenter.sh"
NODE_CLASSES_CRD = "ec2nodeclasses.karpenter.k8s.aws"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
CHART_ROLE = "karpenter-node-pools"
# Karpenter's spelling of each capacity type.
KARPENTER_CAPACITY_TYPES = {"ON_DEMAND": "on-demand", "SPOT": "spot", "RESERVED": "reserved"}
# Karpenter's default node lifetime, written out: nodes are replaced monthly with the AMI
# release then pinned, and never live longer than this plus their termination grace period.
EXPIRE_AFTER = "720h"
# CPU nodes hold add-ons and Ray heads, which start in seconds: consolidate them soon, a tenth
# of a pool at a time, and drain them for at most an hour.
_CPU_CONSOLIDATE_AFTER_S = 300
_CPU_TERMINATION_GRACE_S = 3600
_CPU_DISRUPTION_BUDGET = "10%"
# An accelerator node takes minutes to replace and holds whole replicas: one at a time.
_ACCELERATOR_DISRUPTION_BUDGET = "1"
_PART_OF = {
    "app.kubernetes.io/part-of": "eks-inference",
    "app.kubernetes.io/managed-by": "eks-inference",
}


def ami_alias() -> str:
    """The pinned AL2023 AMI alias every EC2NodeClass boots: ``al2023@v<release>``."""
    return f"al2023@{EKS_AL2023_AMI_RELEASE}"


def deployments_on(
    pool: NodePool, deployments: Sequence[ModelDeploymentSpec]
) -> list[ModelDeploymentSpec]:
    """The deployments whose model servers run on ``pool``."""
    return [d for d in deployments if d.instance_type in pool.instance_types]


def consolidate_after_seconds(pool: NodePool, deployments: Sequence[ModelDeploymentSpec]) -> int:
    """How long an empty node of ``pool`` stays: a minute past the longest model load of its
    deployments (a node and an image pull for a pool nobody uses yet), in whole minutes."""
    loads = [model_load_seconds(d) for d in deployments_on(pool, deployments)]
    longest = max(loads, default=NODE_AND_IMAGE_SECONDS)
    return math.ceil((longest + 60) / 60) * 60


def termination_grace_seconds(pool: NodePool, deployments: Sequence[ModelDeploymentSpec]) -> int:
    """How long Karpenter waits for a disrupted node of ``pool`` to drain before it deletes
    what is left: the longest a pod there may be protected, a replica's rollout budget or a
    compile job's deadline, in whole minutes."""
    budgets = [NODE_AND_IMAGE_SECONDS]
    for deployment in deployments_on(pool, deployments):
        budgets.append(rollout_seconds(deployment))
        if deployment.has_compiled_artifacts:
            budgets.append(active_deadline_seconds(deployment))
    return math.ceil(max(budgets) / 60) * 60


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def _subnet_terms(cluster_name: str, pool: NodePool) -> list[dict[str, Any]]:
    """The cluster's private subnets, or those of the pool's zones (by their zone tag)."""
    discovery = {KARPENTER_DISCOVERY_TAG: cluster_name}
    if not pool.zones:
        return [{"tags": discovery}]
    return [{"tags": {**discovery, ZONE_TAG: str(zone)}} for zone in pool.zones]


def node_class(cluster_name: str, pool: NodePool) -> dict[str, Any]:
    """The EC2NodeClass of ``pool``: AMI, node role, subnets, security groups, disk, IMDS,
    and with ``efa`` the network interfaces and placement group."""
    spec: dict[str, Any] = {
        "role": karpenter_node_role_name(cluster_name),
        "amiSelectorTerms": [{"alias": ami_alias()}],
        "subnetSelectorTerms": _subnet_terms(cluster_name, pool),
        "securityGroupSelectorTerms": [{"tags": {KARPENTER_DISCOVERY_TAG: cluster_name}}],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": IMDS_HOP_LIMIT,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {
                "deviceName": ROOT_DEVICE,
                "rootVolume": True,
                "ebs": {
                    "volumeSize": f"{pool.root_volume_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            }
        ],
        "tags": {NODE_POOL_LABEL: pool.name},
    }
    if formats_instance_store(pool):
        spec["instanceStorePolicy"] = LOCAL_STORAGE_STRATEGY
    kubelet = node_config(pool, local_storage=False)
    if kubelet is not None:
        spec["userData"] = node_config_yaml(kubelet)
    interfaces = efa_network_interfaces(pool)
    if interfaces:
        spec["networkInterfaces"] = [
            {"networkCardIndex": i.network_card, "deviceIndex": i.device, "interfaceType": i.type}
            for i in interfaces
        ]
        spec["placementGroupSelector"] = {"name": efa_group_name(cluster_name, pool)}
        spec["securityGroupSelectorTerms"].append({"name": efa_group_name(cluster_name, pool)})
    if pool.capacity_reservation_ids:
        spec["capacityReservationSelectorTerms"] = [
            {"id": reservation} for reservation in pool.capacity_reservation_ids
        ]
    return api_object(
        NODE_CLASS_API_VERSION,
        "EC2NodeClass",
        metadata(pool.name, _PART_OF, namespace=None),
        {"spec": spec},
    )


def limits(provisioned: KarpenterPool) -> dict[str, str]:
    """Resources the NodePool's nodes may add up to: ``max_nodes`` of its largest type."""
    pool = provisioned.pool
    largest = max(
        (INSTANCE_TYPES[t] for t in pool.instance_types), key=lambda t: (t.vcpus, t.memory_gib)
    )
    nodes = provisioned.max_nodes
    amounts = {"cpu": str(nodes * largest.vcpus), "memory": f"{nodes * largest.memory_gib}Gi"}
    for resource, count in pool.extended_resources().items():
        amounts[resource] = str(nodes * count)
    return amounts


def node_pool(
    provisioned: KarpenterPool, deployments: Sequence[ModelDeploymentSpec]
) -> dict[str, Any]:
    """The Karpenter NodePool of ``provisioned``."""
    pool = provisioned.pool
    accelerated = pool.accelerator is not Accelerator.NONE
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
        "requirements": [
            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(pool.instance_types)},
            {
                "key": CAPACITY_TYPE_LABEL,
                "operator": "In",
                "values": [KARPENTER_CAPACITY_TYPES[t] for t in pool.capacity_types],
            },
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
        "expireAfter": EXPIRE_AFTER,
        "terminationGracePeriod": _duration(
            termination_grace_seconds(pool, deployments)
            if accelerated
            else _CPU_TERMINATION_GRACE_S
        ),
    }
    if pool.taints:
        template_spec["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints
        ]
    disruption = (
        {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": _duration(consolidate_after_seconds(pool, deployments)),
            "budgets": [{"nodes": _ACCELERATOR_DISRUPTION_BUDGET}],
        }
        if accelerated
        else {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": _duration(_CPU_CONSOLIDATE_AFTER_S),
            "budgets": [{"nodes": _CPU_DISRUPTION_BUDGET}],
        }
    )
    return api_object(
        NODE_POOL_API_VERSION,
        "NodePool",
        metadata(pool.name, _PART_OF, namespace=None),
        {
            "spec": {
                "template": {"metadata": {"labels": dict(pool.labels)}, "spec": template_spec},
                "limits": limits(provisioned),
                "disruption": disruption,
            }
        },
    )


def karpenter_objects(
    cluster_name: str, pools: Sequence[NodePool], deployments: Sequence[ModelDeploymentSpec]
) -> list[dict[str, Any]]:
    """Every EC2NodeClass, then every NodePool, of the pools Karpenter provisions."""
    provisioned = karpenter_pools(pools)
    return [
        *(node_class(cluster_name, p.pool) for p in provisioned),
        *(node_pool(p, deployments) for p in provisioned),
    ]


def karpenter_offers(objects: Sequence[Mapping[str, Any]]) -> tuple[NodeOffer, ...]:
    """What the nodes of each rendered NodePool carry and hold, read back from the objects.

    A NodePool is named after the pool it is rendered for. Labels are the template's and,
    for each ``In`` requirement, its key with those values; the root volume and the EFA
    interfaces (its EFA-only ones, as Karpenter counts them) are the NodePool's
    EC2NodeClass's.
    """
    classes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "EC2NodeClass"}
    offers = []
    for obj in objects:
        if obj["kind"] != "NodePool":
            continue
        template = obj["spec"]["template"]
        labels = {
            k: frozenset({v}) for k, v in template.get("metadata", {}).get("labels", {}).items()
        }
        requirements = template["spec"].get("requirements", [])
        for requirement in requirements:
            if requirement["operator"] == "In":
                labels[requirement["key"]] = frozenset(requirement["values"])
        node_class_obj = classes[template["spec"]["nodeClassRef"]["name"]]
        (root,) = (m for m in node_class_obj["spec"]["blockDeviceMappings"] if m.get("rootVolume"))
        name = obj["metadata"]["name"]
        offers.append(
            NodeOffer(
                pool=name,
                provisioner=f"Karpenter NodePool {name!r}",
                labels=labels,
                taints=tuple(
                    Taint(t["key"], t.get("value"), t["effect"])
                    for t in template["spec"].get("taints", [])
                ),
                instance_types=tuple(sorted(labels.get(INSTANCE_TYPE_LABEL, frozenset()))),
                root_volume_gib=int(root["ebs"]["volumeSize"].removesuffix("Gi")),
                karpenter=True,
                instance_store=(
                    node_class_obj["spec"].get("instanceStorePolicy") == LOCAL_STORAGE_STRATEGY
                ),
                efa_interfaces=sum(
                    1
                    for interface in node_class_obj["spec"].get("networkInterfaces", [])
                    if interface["interfaceType"] == EFA_ONLY_INTERFACE
                ),
            )
        )
    return tuple(offers)


def karpenter_chart(
    *, cluster_name: str, pools: Sequence[NodePool], deployments: Sequence[ModelDeploymentSpec]
) -> ChartRecord:
    """The EC2NodeClasses and NodePools of a platform in Karpenter mode (:func:`karpenter_objects`).

    Its needs name the two CRDs, which the Karpenter add-on installs; the nodes the NodePools
    can start are read back from its objects (:func:`karpenter_offers`) for the scheduling
    check.
    """
    return ChartRecord(
        chart_id=CHART_ROLE,
        role=CHART_ROLE,
        objects=tuple(karpenter_objects(cluster_name, pools, deployments)),
        needs=PlatformNeeds(custom_resources=(NODE_CLASSES_CRD, NODE_POOLS_CRD)),
    )


def platform_karpenter_chart(platform: PlatformSpec) -> ChartRecord | None:
    """The :func:`karpenter_chart` of ``platform``; ``None`` with managed node groups."""
    if not platform.node_provisioning.uses_karpenter:
        return None
    return karpenter_chart(
        cluster_name=platform.cluster_name,
        pools=platform.node_pools,
        deployments=platform.deployments,
    )


def platform_offers(
    platform: PlatformSpec, karpenter: Sequence[NodeOffer] = ()
) -> tuple[NodeOffer, ...]:
    """Every provisioner of ``platform``: the managed node groups of its pools (every pool,
    or in Karpenter mode the system pool) and ``karpenter`` (the offers of its
    :func:`karpenter_chart`, none with managed node groups)."""
    managed = platform.node_provisioning.managed_pools(platform.node_pools)
    return (*(managed_offer(p) for p in managed), *karpenter)
