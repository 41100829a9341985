"""Sizing: memory fit, replicas per node, the decode throughput bound and cost, as pure maths.

Every function takes catalog data and numbers, never a CDK or Kubernetes object, so the rules
the spec enforces and the numbers the CLI prints come from the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eks_inference.catalog import GIB, Accelerator, InstanceType, ModelArchitecture

# Share of a NeuronCore's HBM left for weights and KV cache after the Neuron runtime's own
# buffers (scratchpad, collectives); vLLM's gpu_memory_utilization plays this role on GPUs.
NEURON_USABLE_MEMORY_FRACTION = 0.9
# Node capacity kept back for the kubelet, system daemons and device plugins before the
# model-server pods are sized.
_RESERVED_CPU_FRACTION = 0.1
_RESERVED_MEMORY_FRACTION = 0.1
_RESERVED_MEMORY_GIB = 2


def weight_bytes(model: ModelArchitecture) -> int:
    """Bytes of the weights at the model's dtype."""
    return model.num_parameters * model.bytes_per_element


def kv_cache_bytes_per_token(model: ModelArchitecture) -> int:
    """Bytes of K and V for one token, all layers: 2 x layers x kv_heads x head_dim x dtype."""
    return (
        2
        * model.num_layers
        * model.num_kv_heads
        * model.effective_head_dim
        * model.bytes_per_element
    )


def kv_cache_bytes(model: ModelArchitecture, max_model_len: int, max_num_seqs: int) -> int:
    """KV cache for ``max_num_seqs`` sequences all at ``max_model_len`` tokens (the worst case)."""
    return kv_cache_bytes_per_token(model) * max_model_len * max_num_seqs


def usable_memory_fraction(instance: InstanceType, gpu_memory_utilization: float) -> float:
    if instance.accelerator is Accelerator.NEURON:
        return NEURON_USABLE_MEMORY_FRACTION
    return gpu_memory_utilization


@dataclass(frozen=True)
class MemoryFit:
    """Weights plus worst-case KV cache against the usable memory of one tensor-parallel group."""

    weight_bytes: int
    kv_cache_bytes: int
    capacity_bytes: int
    group_memory_bytes: int

    @property
    def required_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.capacity_bytes

    @property
    def utilization(self) -> float:
        return self.required_bytes / self.group_memory_bytes


def memory_fit(
    model: ModelArchitecture,
    instance: InstanceType,
    tensor_parallel_size: int,
    max_model_len: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
) -> MemoryFit:
    group = tensor_parallel_size * instance.memory_per_core_bytes
    return MemoryFit(
        weight_bytes=weight_bytes(model),
        kv_cache_bytes=kv_cache_bytes(model, max_model_len, max_num_seqs),
        capacity_bytes=int(group * usable_memory_fraction(instance, gpu_memory_utilization)),
        group_memory_bytes=group,
    )


def max_num_seqs_that_fit(
    model: ModelArchitecture,
    instance: InstanceType,
    tensor_parallel_size: int,
    max_model_len: int,
    gpu_memory_utilization: float = 0.9,
) -> int:
    """The largest batch whose worst-case KV cache still fits beside the weights (0 if none)."""
    fit = memory_fit(
        model, instance, tensor_parallel_size, max_model_len, 1, gpu_memory_utilization
    )
    free = fit.capacity_bytes - fit.weight_bytes
    return max(free // (kv_cache_bytes_per_token(model) * max_model_len), 0)


def tensor_parallel_problem(
    model: ModelArchitecture, instance: InstanceType, tensor_parallel_size: int
) -> str | None:
    """Why ``tensor_parallel_size`` cannot work for ``model`` on ``instance``, or None.

    The degree must be one the instance's topology runs, divide the attention heads, and on
    GPUs either divide the KV heads or be a multiple of them (vLLM's sharding rule).
    """
    tp = tensor_parallel_size
    if tp not in instance.valid_tensor_parallel:
        return (
            f"tensor_parallel_size {tp} is not supported by the topology of {instance.name} "
            f"(valid: {list(instance.valid_tensor_parallel)})"
        )
    if model.num_attention_heads % tp:
        return (
            f"tensor_parallel_size {tp} does not divide the model's "
            f"{model.num_attention_heads} attention heads"
        )
    if (
        instance.accelerator is Accelerator.NVIDIA
        and model.num_kv_heads % tp
        and tp % model.num_kv_heads
    ):
        return (
            f"on GPUs the {model.num_kv_heads} KV heads must be divisible by "
            f"tensor_parallel_size {tp} (or TP a multiple of them)"
        )
    return None


def usable_tensor_parallel(model: ModelArchitecture, instance: InstanceType) -> tuple[int, ...]:
    """Tensor-parallel degrees that the topology and the model's heads allow."""
    return tuple(
        tp
        for tp in instance.valid_tensor_parallel
        if tensor_parallel_problem(model, instance, tp) is None
    )


def replicas_per_node(instance: InstanceType, tensor_parallel_size: int) -> int:
    """Model replicas one node holds: each takes ``tensor_parallel_size`` cores or GPUs."""
    return instance.cores // tensor_parallel_size


def nodes_needed(replicas: int, per_node: int) -> int:
    return math.ceil(replicas / per_node) if replicas else 0


def decode_tokens_per_second_bound(
    model: ModelArchitecture,
    instance: InstanceType,
    tensor_parallel_size: int,
    max_model_len: int,
    max_num_seqs: int,
) -> float:
    """Memory-bandwidth bound on generated tokens per second for one node, all replicas.

    Decoding is bandwidth-bound: every step of a replica streams its weights once and the KV
    cache of every running sequence, and yields one token per sequence. With a full batch at
    full context (the worst case the spec sizes for) a replica makes at most
    ``max_num_seqs * group_bandwidth / (weights + kv_cache)`` tokens per second.
    """
    group_bandwidth = instance.bandwidth_per_core_bytes_per_s * tensor_parallel_size
    bytes_per_step = weight_bytes(model) + kv_cache_bytes(model, max_model_len, max_num_seqs)
    per_replica = max_num_seqs * group_bandwidth / bytes_per_step
    return per_replica * replicas_per_node(instance, tensor_parallel_size)


# Local disk of a Neuron compile: the output holds the compiled graphs (a few GiB) and, when
# the plugin saves them, the weights sharded per rank (the weights' size), so the weights plus
# 16 GiB; HOME holds the Neuron compiler cache and vLLM's caches, /tmp the compiler's work
# directories, which grow with the number of buckets.
COMPILE_OUTPUT_HEADROOM_GIB = 16
COMPILE_HOME_GIB = 32
COMPILE_TMP_GIB = 32
# Root-volume space a node needs besides pod scratch: the Neuron serving image (tens of GiB
# unpacked), the AMI's system files and the kubelet's image garbage-collection margin.
NODE_IMAGE_AND_SYSTEM_GIB = 60


def compile_output_gib(model: ModelArchitecture) -> int:
    """Local disk for one compile's artifacts: the weights plus the compiled graphs."""
    return math.ceil(gib(weight_bytes(model))) + COMPILE_OUTPUT_HEADROOM_GIB


def compile_disk_gib(model: ModelArchitecture) -> int:
    """Local disk a compile container requests: output, HOME and /tmp together."""
    return compile_output_gib(model) + COMPILE_HOME_GIB + COMPILE_TMP_GIB


def cost_per_million_tokens(price_per_hour: float, tokens_per_second: float) -> float:
    """USD per million generated tokens at a sustained rate: price / (rate x 3600) x 1e6."""
    return price_per_hour / (tokens_per_second * 3600) * 1_000_000


@dataclass(frozen=True)
class PodResources:
    """CPU and memory for one model-server pod, requests equal to limits (Guaranteed QoS)."""

    cpu_millis: int
    memory_mib: int

    @property
    def cpu(self) -> str:
        return f"{self.cpu_millis}m"

    @property
    def memory(self) -> str:
        return f"{self.memory_mib}Mi"


def pod_resources(instance: InstanceType, pods_per_node: int) -> PodResources:
    """Split a node's capacity, less a system reserve, evenly among its model-server pods."""
    cpu = instance.vcpus * 1000 * (1 - _RESERVED_CPU_FRACTION) - 500
    memory = (instance.memory_gib * (1 - _RESERVED_MEMORY_FRACTION) - _RESERVED_MEMORY_GIB) * 1024
    return PodResources(
        cpu_millis=int(cpu // pods_per_node // 100 * 100),
        memory_mib=int(memory // pods_per_node // 256 * 256),
    )


def gib(n_bytes: float) -> float:
    return n_bytes / GIB
