"""Node pools: the one definition of a node group's instance types, labels and taints.

The CDK node groups, the Cluster Autoscaler's scale-from-zero templates and every pod's node
selector and tolerations are all derived from a :class:`NodePool`, so a pod cannot select a
label that no node carries or miss a taint a node has.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from eks_inference.aws_types import CapacityType
from eks_inference.catalog import INSTANCE_TYPES, Accelerator, InstanceType
from eks_inference.names import (
    NEURON_DEVICE_RESOURCE,
    NEURONCORE_RESOURCE,
    NODE_POOL_LABEL,
    NVIDIA_GPU_RESOURCE,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
_ACCELERATOR_DISK_GIB = 200


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


class NodePool(BaseModel):
    """A managed node group: which instances, how many, and how pods find it.

    Accelerator pools hold exactly one instance type, so that the Cluster Autoscaler can tell
    how many NeuronCores or GPUs a node it has not started yet will have, and so that the
    sizing of every pod placed there is exact. Accelerator pools default to scaling from zero:
    an idle accelerator is the largest cost of an inference cluster.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(max_length=40, description="Pool name, a DNS-1123 label.")
    instance_types: tuple[str, ...] = Field(min_length=1)
    min_size: NonNegativeInt = 0
    max_size: PositiveInt = 2
    capacity_type: CapacityType = "ON_DEMAND"
    disk_size_gib: PositiveInt | None = Field(
        default=None,
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
                f"unknown instance types {unknown}; known: {', '.join(sorted(INSTANCE_TYPES))}"
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

    def extended_resources(self) -> dict[str, int]:
        """Device-plugin resources one node advertises, for scale-from-zero templates."""
        it = self.instance
        if it.accelerator is Accelerator.NEURON:
            return {NEURONCORE_RESOURCE: it.cores, NEURON_DEVICE_RESOURCE: it.devices}
        if it.accelerator is Accelerator.NVIDIA:
            return {NVIDIA_GPU_RESOURCE: it.devices}
        return {}
