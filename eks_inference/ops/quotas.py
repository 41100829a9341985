"""EC2 vCPU quotas (Service Quotas, service code ``ec2``) and the instance families they cover.

EC2 limits running instances by vCPUs per instance class, separately for on-demand and spot.
The codes are AWS's, the same in every region.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eks_inference.catalog import InstanceType
from eks_inference.specification.aws_types import CapacityType

SERVICE_CODE = "ec2"


@dataclass(frozen=True)
class VcpuQuota:
    """One vCPU quota: its Service Quotas code and name."""

    code: str
    name: str


_STANDARD_FAMILIES = frozenset({"a", "c", "d", "h", "i", "im", "is", "m", "r", "t", "z"})
_QUOTAS: dict[tuple[str, CapacityType], VcpuQuota] = {
    ("standard", "ON_DEMAND"): VcpuQuota(
        "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"
    ),
    ("standard", "SPOT"): VcpuQuota(
        "L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"
    ),
    ("g", "ON_DEMAND"): VcpuQuota("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("g", "SPOT"): VcpuQuota("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("inf", "ON_DEMAND"): VcpuQuota("L-1945791B", "Running On-Demand Inf instances"),
    ("inf", "SPOT"): VcpuQuota("L-B5D1601B", "All Inf Spot Instance Requests"),
    ("p", "ON_DEMAND"): VcpuQuota("L-417A185B", "Running On-Demand P instances"),
    ("p", "SPOT"): VcpuQuota("L-7212CCBC", "All P Spot Instance Requests"),
}


def quota_class(instance: InstanceType) -> str:
    """The quota class of an instance: ``inf``, ``g``, ``p`` or ``standard``.

    Decided by the family's letters (``inf2`` -> ``inf``, ``g6e`` -> ``g``, ``m6i`` -> ``m``,
    a standard family). ``inf`` is tested before the standard letters, which include ``i``.
    """
    match = re.match(r"[a-z]+", instance.family)
    letters = match.group() if match else ""
    if letters == "inf":
        return "inf"
    if letters in ("g", "vt"):
        return "g"
    if letters == "p":
        return "p"
    if letters in _STANDARD_FAMILIES:
        return "standard"
    raise ValueError(f"no known vCPU quota for the {instance.family} instance family")


def vcpu_quota(instance: InstanceType, capacity_type: CapacityType) -> VcpuQuota:
    """The quota that running ``instance`` on ``capacity_type`` counts against.

    Instances in On-Demand Capacity Reservations count against the on-demand quota.
    """
    on_demand_or_spot: CapacityType = "SPOT" if capacity_type == "SPOT" else "ON_DEMAND"
    return _QUOTAS[(quota_class(instance), on_demand_or_spot)]
