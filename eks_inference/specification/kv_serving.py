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

from eks_inference.specification.validation import Problems

if TYPE_CHECKING:
    pass

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
