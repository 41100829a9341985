"""The KV-cache tiers' rules and memory: what a deployment's ``kv_cache`` costs its pod.

The tiers are typed in :mod:`eks_inference.specification.kv_serving`; here, what they add to a
server's memory request (:func:`replica_memory_mib`) and the rule that they fit the node
(:func:`check_kv_cache`), for an engine that offloads the KV cache at all (the
:class:`~eks_inference.specification.capabilities.OffloadsKvCache` capability, whose absence
the capability rule reports).
"""

from __future__ import annotations

import math

from eks_inference.catalog import INSTANCE_TYPES, Accelerator, InstanceType, sizing
from eks_inference.specification.adapters_rules import adapter_cache_bytes
from eks_inference.specification.capabilities import OffloadsKvCache
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of
from eks_inference.specification.kv_serving import NVME_RESERVED_GIB
from eks_inference.specification.validation import Problems


def replica_memory_mib(spec: ModelDeploymentSpec) -> int:
    """Memory a model server's pod requests: the node's share of a replica, or, with a CPU KV
    tier, what the server needs plus the tier and the LoRA adapters kept in host memory (less
    than the share; the rest stays free)."""
    share = sizing.pod_resources(spec.instance, spec.replicas_per_node).memory_mib
    if spec.kv_cache is None:
        return share
    adapters_mib = math.ceil(adapter_cache_bytes(spec) / 2**20)
    server_gib = sizing.server_host_memory_gib(spec.model.architecture)
    return (server_gib + spec.kv_cache.cpu_gib) * 1024 + adapters_mib


def check_kv_cache(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The CPU tier fits the node's memory, the disk tier its NVMe."""
    offload = spec.kv_cache
    if offload is None:
        return
    if not engine_of(spec).serves(OffloadsKvCache, spec):
        # Refused by the capability rule; the tiers of an engine without them are not sized.
        return
    instance = spec.instance
    share_gib = sizing.pod_resources(instance, spec.replicas_per_node).memory_mib / 1024
    server_gib = sizing.server_host_memory_gib(spec.model.architecture)
    room = int(share_gib - server_gib)
    if offload.cpu_gib > room:
        fix = f"cpu_gib <= {room}" if room > 0 else "a larger instance type"
        problems.add(
            ("kv_cache", "cpu_gib"),
            f"a CPU tier of {offload.cpu_gib} GiB does not fit {instance.name}: a replica has "
            f"{share_gib:.1f} GiB of the node's memory and the server needs {server_gib} GiB "
            f"of it; use {fix}",
            offload.cpu_gib,
        )
    if offload.disk_gib is None:
        return
    if instance.local_nvme_gib == 0:
        with_nvme = sorted({t.family for t in _gpu_instances() if t.local_nvme_gib})
        problems.add(
            ("kv_cache", "offload"),
            f"{instance.name} has no local NVMe for a disk tier; use offload: cpu, or an "
            f"instance type with an instance store ({', '.join(with_nvme)})",
            offload.offload,
        )
        return
    per_replica = (instance.local_nvme_gib - NVME_RESERVED_GIB) // spec.replicas_per_node
    if offload.disk_gib > per_replica:
        problems.add(
            ("kv_cache", "disk_gib"),
            f"a disk tier of {offload.disk_gib} GiB does not fit the {instance.local_nvme_gib} "
            f"GiB of local NVMe of {instance.name} ({NVME_RESERVED_GIB} GiB kept for images "
            f"and scratch, {spec.replicas_per_node} replica(s) per node); use disk_gib <= "
            f"{max(per_replica, 0)}",
            offload.disk_gib,
        )


def _gpu_instances() -> list[InstanceType]:
    return [t for t in INSTANCE_TYPES.values() if t.accelerator is Accelerator.NVIDIA]
