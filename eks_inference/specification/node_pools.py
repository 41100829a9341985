"""Node pools: the one definition of a node group's instance types, labels and taints.

The CDK node groups, the Cluster Autoscaler's scale-from-zero templates and every pod's node
selector and tolerations are all derived from a :class:`NodePool`, so a pod cannot select a
label that no node carries or miss a taint a node has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from eks_inference.catalog import INSTANCE_TYPES, Accelerator, InstanceType, by_size
from eks_inference.names import (
    EFA_RESOURCE,
    NEURON_DEVICE_RESOURCE,
    NEURONCORE_RESOURCE,
    NODE_POOL_LABEL,
    NVIDIA_GPU_RESOURCE,
)
from eks_inference.specification.aws_types import CapacityType
from eks_inference.specification.validation import SpecModel

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TopologyManagerPolicy = Literal["single-numa-node", "restricted", "best-effort"]
"""The kubelet topology manager policies a pool may run (``none`` would undo alignment)."""
_ACCELERATOR_DISK_GIB = 200
# EKS allows 450 nodes per managed node group by default (a quota that can be raised); beyond
# a thousand a size is a typo, not a plan.
_MAX_POOL_SIZE = 1000
# The largest gp3 volume.
_MAX_DISK_GIB = 16384
# The device name of the root volume of every EKS-optimised AL2023 AMI, whichever provisions
# the node (a managed node group's launch template, a Karpenter EC2NodeClass).
ROOT_DEVICE = "/dev/xvda"
# A hop limit of 1 keeps instance metadata, and with it the node role's credentials, out of
# reach of pods: a container is one network hop further away than the node, so its IMDSv2
# token responses are dropped. Nothing this library installs needs it from a pod: every AWS
# caller gets credentials from Pod Identity and its region explicitly (Mountpoint's
# `region` mount option, the Cluster Autoscaler's `awsRegion`, Karpenter's `AWS_REGION`, the
# Run:ai streamer's and the compile job's AWS_REGION), and the host-network pods that do read
# metadata (the VPC CNI, the Pod Identity agent) are not a hop away.
IMDS_HOP_LIMIT = 1
# Karpenter launches the most preferred capacity type it can: reserved, then spot, then
# on-demand (whatever order a NodePool lists them in).
CAPACITY_PREFERENCE: tuple[CapacityType, ...] = ("RESERVED", "SPOT", "ON_DEMAND")
# An EC2 On-Demand Capacity Reservation id, as Karpenter's EC2NodeClass accepts it.
_CAPACITY_RESERVATION_ID = re.compile(r"^cr-[0-9a-z]+$")
# Zones are named by their index in the VPC's zones (the cluster's VPC spans three by default;
# a VPC of CloudFormation's choosing has no zone names at synth).
MAX_ZONES = 16


class Taint(BaseModel):
    """A Kubernetes node taint, spelled the Kubernetes way (``NoSchedule``)."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: str
    effect: TaintEffect = "NoSchedule"

    def toleration(self) -> dict[str, str]:
        """The pod toleration that tolerates exactly this taint."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}

    @property
    def cloudformation_effect(self) -> str:
        """The same effect in the EKS API's spelling (``NO_SCHEDULE``)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.effect).upper()


_TAINTS: dict[Accelerator, tuple[Taint, ...]] = {
    Accelerator.NONE: (),
    Accelerator.NEURON: (Taint(key=NEURON_DEVICE_RESOURCE, value="true"),),
    Accelerator.NVIDIA: (Taint(key=NVIDIA_GPU_RESOURCE, value="true"),),
}
# The NVIDIA device plugin's chart schedules only onto nodes with this label.
_ACCELERATOR_LABELS: dict[Accelerator, dict[str, str]] = {
    Accelerator.NONE: {},
    Accelerator.NEURON: {},
    Accelerator.NVIDIA: {"nvidia.com/gpu.present": "true"},
}
_AMI_TYPES: dict[Accelerator, str] = {
    Accelerator.NONE: "AL2023_x86_64_STANDARD",
    Accelerator.NEURON: "AL2023_x86_64_NEURON",
    Accelerator.NVIDIA: "AL2023_x86_64_NVIDIA",
}


class NodePool(SpecModel):
    """A pool of nodes: which instances, how many, how they are bought, and how pods find it.

    A managed node group, or with ``node_provisioning: karpenter`` a Karpenter NodePool and
    EC2NodeClass (:mod:`eks_inference.charts.karpenter`); the system pool is a managed node
    group either way. Both are built from the same fields, so pods select and tolerate the
    same labels and taints in either mode.

    Accelerator pools hold exactly one instance type, so that the Cluster Autoscaler can tell
    how many NeuronCores or GPUs a node it has not started yet will have, and so that the
    sizing of every pod placed there is exact. Accelerator pools default to scaling from zero:
    an idle accelerator is the largest cost of an inference cluster.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(max_length=40, description="Pool name, a DNS-1123 label.")
    instance_types: tuple[str, ...] = Field(min_length=1)
    min_size: int = Field(default=0, ge=0, le=_MAX_POOL_SIZE)
    max_size: int = Field(default=2, ge=1, le=_MAX_POOL_SIZE)
    capacity_type: CapacityType = Field(
        default="ON_DEMAND",
        description="How the pool's nodes are bought, and priced in the plan: ON_DEMAND, SPOT, "
        "or RESERVED (On-Demand Capacity Reservations, Karpenter only).",
    )
    fallback_capacity_types: tuple[CapacityType, ...] = Field(
        default=(),
        description="Karpenter only: capacity types to use when capacity_type has none, "
        "e.g. [ON_DEMAND] for a SPOT pool.",
    )
    capacity_reservation_ids: tuple[str, ...] = Field(
        default=(),
        max_length=30,
        description="The Capacity Reservations (cr-...) a RESERVED pool launches into.",
    )
    zones: tuple[int, ...] = Field(
        default=(),
        max_length=MAX_ZONES,
        description="Indexes of the VPC's Availability Zones (0: its first) the pool's nodes "
        "run in; empty: every zone. A pool serving from FSx for Lustre runs in one zone.",
    )
    topology_manager_policy: TopologyManagerPolicy | None = Field(
        default=None,
        description="Accelerator pools: the kubelet topology manager policy of its nodes; "
        "default: its family's (single-numa-node on g6e, restricted on inf2), or restricted "
        "where the platform places a replica on it that no NUMA node holds.",
    )
    efa: bool | None = Field(
        default=None,
        description="Attach every Elastic Fabric Adapter the instance type carries to each "
        "node, the nodes in one cluster placement group; default: on where the pool holds a "
        "multi_node deployment and its instance type has EFA, off otherwise.",
    )
    disk_size_gib: int | None = Field(
        default=None,
        ge=1,
        le=_MAX_DISK_GIB,
        description="Root volume size; defaults to 200 GiB on accelerator pools, 100 otherwise.",
    )

    @model_validator(mode="after")
    def _check(self) -> NodePool:
        problems: list[str] = []
        if not DNS_LABEL.match(self.name):
            problems.append(f"name {self.name!r} must be a DNS-1123 label (a-z, 0-9, '-')")
        unknown = [t for t in self.instance_types if t not in INSTANCE_TYPES]
        if unknown:
            problems.append(
                f"unknown instance types {unknown}; known: "
                f"{', '.join(sorted(INSTANCE_TYPES, key=by_size))}"
            )
        else:
            kinds = {INSTANCE_TYPES[t].accelerator for t in self.instance_types}
            if len(kinds) > 1:
                problems.append("instance_types mix accelerator kinds; use one pool per kind")
            elif kinds != {Accelerator.NONE} and len(self.instance_types) > 1:
                problems.append(
                    "an accelerator pool holds exactly one instance type (so the autoscaler "
                    "knows a new node's cores); define one pool per accelerator instance type"
                )
            if kinds == {Accelerator.NONE} and self.topology_manager_policy is not None:
                problems.append(
                    "topology_manager_policy applies to accelerator pools only; remove it"
                )
            if self.efa and not self.instance.efa:
                problems.append(
                    f"efa: {self.instance.name} has no Elastic Fabric Adapter; remove efa or "
                    f"use an instance type with EFA ({efa_instance_types()})"
                )
            elif self.efa and len(self.zones) != 1:
                problems.append(
                    "efa: the nodes of a pool with EFA share one cluster placement group, which "
                    "lives in one Availability Zone (EFA does not cross zones); set zones: [0] "
                    "(or the one zone index that has the capacity)"
                )
            if (
                kinds != {Accelerator.NONE}
                and self.disk_size_gib is not None
                and self.disk_size_gib < _ACCELERATOR_DISK_GIB
            ):
                problems.append(
                    f"disk_size_gib must be at least {_ACCELERATOR_DISK_GIB} on an accelerator "
                    "pool: inference images are tens of GiB"
                )
        if self.min_size > self.max_size:
            problems.append(f"min_size ({self.min_size}) exceeds max_size ({self.max_size})")
        if len(set(self.zones)) != len(self.zones) or any(
            not 0 <= z < MAX_ZONES for z in self.zones
        ):
            problems.append(
                f"zones {list(self.zones)} must be distinct zone indexes from 0 to {MAX_ZONES - 1}"
            )
        problems += _capacity_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def instance(self) -> InstanceType:
        """The pool's (first) instance type; the only one on accelerator pools."""
        return INSTANCE_TYPES[self.instance_types[0]]

    @property
    def accelerator(self) -> Accelerator:
        return self.instance.accelerator

    @property
    def ami_type(self) -> str:
        """The EKS AMI type, e.g. ``AL2023_x86_64_NEURON`` (ships the Neuron driver)."""
        return _AMI_TYPES[self.accelerator]

    @property
    def root_volume_gib(self) -> int:
        if self.disk_size_gib is not None:
            return self.disk_size_gib
        return 100 if self.accelerator is Accelerator.NONE else _ACCELERATOR_DISK_GIB

    @property
    def labels(self) -> dict[str, str]:
        """Labels every node of the pool carries."""
        return {NODE_POOL_LABEL: self.name, **_ACCELERATOR_LABELS[self.accelerator]}

    @property
    def taints(self) -> tuple[Taint, ...]:
        """Taints that keep pods without the matching toleration off accelerator nodes."""
        return _TAINTS[self.accelerator]

    def node_selector(self) -> dict[str, str]:
        """The node selector a pod uses to land on this pool."""
        return {NODE_POOL_LABEL: self.name}

    def tolerations(self) -> list[dict[str, str]]:
        """Tolerations for every taint of this pool."""
        return [t.toleration() for t in self.taints]

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces each node carries: one per network card with ``efa``, else none."""
        return self.instance.efa_interfaces if self.efa else 0

    def extended_resources(self) -> dict[str, int]:
        """Device-plugin resources one node advertises, for scale-from-zero templates."""
        return extended_resources(self.instance, self.efa_interfaces)

    @property
    def capacity_types(self) -> tuple[CapacityType, ...]:
        """Every capacity type the pool may launch, most preferred first."""
        return (self.capacity_type, *self.fallback_capacity_types)


def extended_resources(instance: InstanceType, efa_interfaces: int = 0) -> dict[str, int]:
    """Device-plugin resources one node of ``instance`` advertises (NeuronCores, GPUs), and
    its ``efa_interfaces`` EFA interfaces where they are attached."""
    resources: dict[str, int] = {}
    if instance.accelerator is Accelerator.NEURON:
        resources = {NEURONCORE_RESOURCE: instance.cores, NEURON_DEVICE_RESOURCE: instance.devices}
    elif instance.accelerator is Accelerator.NVIDIA:
        resources = {NVIDIA_GPU_RESOURCE: instance.devices}
    if efa_interfaces:
        resources[EFA_RESOURCE] = efa_interfaces
    return resources


def efa_instance_types() -> str:
    """The GPU instance types of the catalog with EFA, smallest first, for messages."""
    names = (n for n, t in INSTANCE_TYPES.items() if t.efa and t.accelerator is Accelerator.NVIDIA)
    return ", ".join(sorted(names, key=by_size))


def system_pool_of(pools: Sequence[NodePool]) -> NodePool:
    """The first CPU pool: system add-ons, Ray heads and Karpenter's controller run there.

    Raises ``ValueError`` when there is none.
    """
    for pool in pools:
        if pool.accelerator is Accelerator.NONE:
            return pool
    raise ValueError("add a CPU node pool: system add-ons must not run on accelerator nodes")


@dataclass(frozen=True)
class KarpenterPool:
    """A pool whose nodes Karpenter launches, and how many it may launch.

    Every pool but the system pool, with up to ``max_size`` nodes; and the system pool beyond
    its managed node group's ``min_size`` nodes (which run Karpenter itself), up to
    ``max_size`` in all, so that Ray heads and add-ons find room as the cluster grows.
    """

    pool: NodePool
    max_nodes: int


def karpenter_pools(pools: Sequence[NodePool]) -> tuple[KarpenterPool, ...]:
    """What Karpenter provisions for ``pools`` (see :class:`KarpenterPool`), in pool order."""
    system = system_pool_of(pools)
    provisioned = []
    for pool in pools:
        nodes = pool.max_size - pool.min_size if pool is system else pool.max_size
        if nodes > 0:
            provisioned.append(KarpenterPool(pool=pool, max_nodes=nodes))
    return tuple(provisioned)


def managed_node_group_problems(pool: NodePool) -> dict[str, str]:
    """What keeps ``pool`` from being an EKS managed node group, by field (empty: nothing).

    A managed node group has one capacity type, on-demand or spot; capacity reservations and
    fallbacks between capacity types are Karpenter's.
    """
    problems: dict[str, str] = {}
    if pool.capacity_type == "RESERVED":
        problems["capacity_type"] = (
            f"pool {pool.name!r} is a managed node group, which cannot launch into Capacity "
            "Reservations; use node_provisioning: karpenter, or ON_DEMAND or SPOT"
        )
    if pool.fallback_capacity_types:
        problems["fallback_capacity_types"] = (
            f"pool {pool.name!r} is a managed node group, which has one capacity type; "
            "fallbacks need node_provisioning: karpenter, or drop them"
        )
    return problems


def _capacity_problems(pool: NodePool) -> list[str]:
    """Fallbacks come after the capacity type in Karpenter's order; reservations are named."""
    problems: list[str] = []
    types = pool.capacity_types
    if len(set(types)) != len(types):
        problems.append(f"capacity types {list(types)} repeat one; list each once")
    else:
        rank = {t: i for i, t in enumerate(CAPACITY_PREFERENCE)}
        late = [t for t in pool.fallback_capacity_types if rank[t] < rank[pool.capacity_type]]
        if late:
            problems.append(
                f"fallback_capacity_types {late} would be preferred to capacity_type "
                f"{pool.capacity_type}: Karpenter always launches reserved, then spot, then "
                f"on-demand capacity; set capacity_type: {late[0]} and list "
                f"{pool.capacity_type} as its fallback"
            )
    reserved = "RESERVED" in types
    if reserved and not pool.capacity_reservation_ids:
        problems.append(
            "RESERVED capacity needs capacity_reservation_ids: the Capacity Reservations "
            "(cr-...) the pool may launch into"
        )
    if pool.capacity_reservation_ids and not reserved:
        problems.append(
            "capacity_reservation_ids are only used with RESERVED capacity; add RESERVED as "
            "the capacity_type or drop them"
        )
    bad = [i for i in pool.capacity_reservation_ids if not _CAPACITY_RESERVATION_ID.match(i)]
    if bad:
        problems.append(f"capacity_reservation_ids {bad} are not Capacity Reservation ids (cr-...)")
    return problems
