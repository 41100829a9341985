"""The parts of a deployment's plan that only some deployments have: the KV-cache tiers of an
LMCache offload, LoRA adapter slots, and prefill and decode apart, each beside what it costs
(:mod:`eks_inference.ops.plan` puts them in the deployment's plan)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from eks_inference.catalog import sizing
from eks_inference.specification.adapters_rules import adapter_cache_bytes
from eks_inference.specification.capabilities import DisaggregatesPrefill
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of


@dataclass(frozen=True)
class KvTier:
    """One tier of a replica's KV cache: its size and how many tokens of KV it holds."""

    tier: str
    gib: float
    tokens: int


def kv_tiers(spec: ModelDeploymentSpec) -> tuple[KvTier, ...]:
    """A replica's KV tiers with ``kv_cache``: GPU memory beside the weights, then LMCache's
    CPU and disk tiers; each token costs the bytes the architecture gives it
    (:func:`~eks_inference.catalog.sizing.kv_tier_tokens`). Empty without ``kv_cache``."""
    offload = spec.kv_cache
    if offload is None:
        return ()
    arch, instance, tp = spec.model.architecture, spec.instance, spec.tensor_parallel_size
    fit = spec.memory_fit
    gpu_bytes = fit.kv_room_bytes
    per_token = sizing.kv_cache_bytes_per_token(
        arch, sizing.sharded_heads(arch, instance, tp).kv_heads
    )
    tiers = [
        KvTier("GPU", sizing.gib(gpu_bytes), gpu_bytes // per_token),
        KvTier("CPU", offload.cpu_gib, sizing.kv_tier_tokens(arch, instance, tp, offload.cpu_gib)),
    ]
    if offload.disk_gib is not None:
        tokens = sizing.kv_tier_tokens(arch, instance, tp, offload.disk_gib)
        tiers.append(KvTier("disk", offload.disk_gib, tokens))
    return tuple(tiers)


@dataclass(frozen=True)
class AdapterSlots:
    """A replica's LoRA adapter slots: how many, at which rank, the GPU memory they take out of
    the KV cache's room, and the tokens of KV left and lost; the adapters kept in host memory
    and the most they take there."""

    adapters: int
    slots: int
    max_lora_rank: int
    gib: float
    kv_tokens: int
    kv_tokens_cost: int
    cpu_loras: int
    cpu_gib: float


def adapter_slots(spec: ModelDeploymentSpec) -> AdapterSlots | None:
    """The adapter slots of ``spec`` (``None`` without adapters): the KV tokens are those
    of the room :attr:`~eks_inference.catalog.sizing.MemoryFit.kv_room_bytes` leaves once
    the slots are in, and their cost what the slots take."""
    adapters = spec.adapters
    if adapters is None:
        return None
    arch, instance, tp = spec.model.architecture, spec.instance, spec.tensor_parallel_size
    fit = spec.memory_fit
    per_token = sizing.kv_cache_bytes_per_token(
        arch, sizing.sharded_heads(arch, instance, tp).kv_heads
    )
    left = fit.kv_room_bytes // per_token
    without = (fit.kv_room_bytes + fit.adapter_bytes) // per_token
    return AdapterSlots(
        adapters=len(adapters.names),
        slots=adapters.max_loras,
        max_lora_rank=adapters.max_lora_rank,
        gib=sizing.gib(fit.adapter_bytes),
        kv_tokens=left,
        kv_tokens_cost=without - left,
        cpu_loras=adapters.cpu_loras,
        cpu_gib=sizing.gib(adapter_cache_bytes(spec)),
    )


@dataclass(frozen=True)
class SplitPlan:
    """A deployment served with prefill and decode apart, beside the same model aggregated.

    ``groups`` are (group, replicas, tensor-parallel degree); the GPUs, nodes and price are
    the graph's; the aggregated alternative is the deployment's own ``min_replicas`` at its
    ``tensor_parallel_size``, as an engine without the split would serve it.
    """

    groups: tuple[tuple[str, int, int], ...]
    accelerators: int
    nodes: int
    price_per_hour: float
    transport: str | None
    aggregated_replicas: int
    aggregated_tensor_parallel_size: int
    aggregated_accelerators: int
    aggregated_nodes: int
    aggregated_price_per_hour: float


def split_plan(spec: ModelDeploymentSpec, node_price: float) -> SplitPlan | None:
    """The split of ``spec`` as its engine serves it (the
    :class:`~eks_inference.specification.capabilities.DisaggregatesPrefill` capability), with
    its GPUs and cost at ``node_price`` beside the aggregated alternative; ``None`` when it
    serves aggregated."""
    capability = engine_of(spec).capability(DisaggregatesPrefill)
    split = capability.split(spec) if capability is not None else None
    if capability is None or split is None:
        return None
    cores = spec.instance.cores
    nodes = math.ceil(split.accelerators / cores)
    replicas = spec.scaling.min_replicas
    aggregated_nodes = sizing.nodes_needed(replicas, spec.replicas_per_node)
    return SplitPlan(
        groups=tuple((name, g.replicas, g.tensor_parallel_size) for name, g in split.groups),
        accelerators=split.accelerators,
        nodes=nodes,
        price_per_hour=nodes * node_price,
        transport=capability.transport(spec),
        aggregated_replicas=replicas,
        aggregated_tensor_parallel_size=spec.tensor_parallel_size,
        aggregated_accelerators=replicas * spec.tensor_parallel_size,
        aggregated_nodes=aggregated_nodes,
        aggregated_price_per_hour=aggregated_nodes * node_price,
    )
