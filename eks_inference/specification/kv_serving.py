"""How a deployment's KV cache is kept beyond GPU memory, and split between prefill and decode.

Two options of a GPU deployment, typed here with the rules every engine shares:

- ``kv_cache`` (:class:`KvCacheOffload`): LMCache keeps KV blocks the GPU evicts in a CPU tier
  of host memory and, with ``cpu+disk``, a disk tier on the node's local NVMe, so a prompt whose
  prefix was seen before is read back instead of recomputed. The engine must have the
  :class:`~eks_inference.specification.capabilities.OffloadsKvCache` capability; the CPU tier
  is added to the server's memory request and must fit the node's share of a replica; the disk
  tier needs an instance type with local NVMe in the catalog and must fit it.
- ``disaggregation`` (:class:`Disaggregation`): prefill and decode workers in separate groups,
  each with its replicas and tensor-parallel degree; only an engine with the
  :class:`~eks_inference.specification.capabilities.DisaggregatesPrefill` capability accepts
  it, and checks the graph's topology with its own rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from eks_inference.catalog import INSTANCE_TYPES, Accelerator, InstanceType, sizing
from eks_inference.specification.capabilities import OffloadsKvCache
from eks_inference.specification.engines import engine_of
from eks_inference.specification.validation import Problems

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

# Far beyond the host memory or local NVMe of any catalog instance (1,536 GiB and 7 TiB):
# a few zeros too many fail as a field error, not as sizing arithmetic.
MAX_TIER_GIB = 2**16
# A disk tier is a directory on the NVMe instance store, which the node shares with the
# container images and the pods' scratch space when it backs the kubelet's storage: those keep
# this much of it.
NVME_RESERVED_GIB = 100
# Replicas per worker group, as for a deployment's scaling bounds.
MAX_WORKER_REPLICAS = 64


class KvCacheOffload(BaseModel):
    """KV-cache tiers beyond GPU memory, served by LMCache inside each vLLM server.

    ``offload: cpu`` keeps evicted KV blocks in ``cpu_gib`` of host memory per replica;
    ``cpu+disk`` adds ``disk_gib`` on the node's local NVMe. Sizes are per replica.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    offload: Literal["cpu", "cpu+disk"] = Field(
        description="cpu: host memory only; cpu+disk: host memory, then local NVMe."
    )
    cpu_gib: PositiveInt = Field(
        le=MAX_TIER_GIB, description="Host memory of the CPU tier per replica, GiB."
    )
    disk_gib: PositiveInt | None = Field(
        default=None,
        le=MAX_TIER_GIB,
        description="Local NVMe of the disk tier per replica, GiB (offload: cpu+disk only).",
    )

    @model_validator(mode="after")
    def _disk_with_disk_tier(self) -> KvCacheOffload:
        problems = Problems("KvCacheOffload")
        if self.offload == "cpu+disk" and self.disk_gib is None:
            problems.add(
                ("disk_gib",),
                "offload: cpu+disk needs the disk tier's size; set disk_gib, or offload: cpu",
            )
        if self.offload == "cpu" and self.disk_gib is not None:
            problems.add(
                ("disk_gib",),
                "disk_gib applies to offload: cpu+disk only; remove it, or set offload: cpu+disk",
                self.disk_gib,
            )
        problems.raise_if_any()
        return self

    @property
    def disk(self) -> bool:
        return self.disk_gib is not None


class WorkerGroup(BaseModel):
    """One group of a disaggregated graph: its workers and their tensor-parallel degree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: PositiveInt = Field(default=1, le=MAX_WORKER_REPLICAS)
    tensor_parallel_size: PositiveInt = 1

    @property
    def accelerators(self) -> int:
        return self.replicas * self.tensor_parallel_size


class Disaggregation(BaseModel):
    """Prefill and decode on separate workers; the KV cache moves from one to the other.

    Absent, the engine serves aggregated: every worker prefills and decodes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill: WorkerGroup = WorkerGroup()
    decode: WorkerGroup = WorkerGroup()

    @property
    def groups(self) -> tuple[tuple[str, WorkerGroup], ...]:
        return (("prefill", self.prefill), ("decode", self.decode))

    @property
    def accelerators(self) -> int:
        """GPUs of the whole graph."""
        return self.prefill.accelerators + self.decode.accelerators


def replica_memory_mib(spec: ModelDeploymentSpec) -> int:
    """Memory a model server's pod requests: the node's share of a replica, or, with a CPU KV
    tier, what the server needs plus the tier (less than the share; the rest stays free)."""
    share = sizing.pod_resources(spec.instance, spec.replicas_per_node).memory_mib
    if spec.kv_cache is None:
        return share
    return (sizing.server_host_memory_gib(spec.model.architecture) + spec.kv_cache.cpu_gib) * 1024


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
