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
    """Bytes of the weights: the FP8 parameters at one byte, the rest at the model's dtype."""
    rest = model.num_parameters - model.fp8_parameters
    return rest * model.bytes_per_element + model.fp8_parameters


def kv_cache_bytes_per_token(model: ModelArchitecture, kv_heads: int | None = None) -> int:
    """Bytes of K and V for one token, all layers: 2 x layers x kv_heads x head_dim x dtype.

    ``kv_heads`` defaults to the model's; a tensor-parallel group that replicates KV heads
    caches ``ShardedHeads.kv_heads`` of them.
    """
    return (
        2
        * model.num_layers
        * (model.num_kv_heads if kv_heads is None else kv_heads)
        * model.effective_head_dim
        * model.bytes_per_element
    )


def kv_cache_bytes(
    model: ModelArchitecture, max_model_len: int, max_num_seqs: int, kv_heads: int | None = None
) -> int:
    """KV cache for ``max_num_seqs`` sequences all at ``max_model_len`` tokens (the worst case)."""
    return kv_cache_bytes_per_token(model, kv_heads) * max_model_len * max_num_seqs


@dataclass(frozen=True)
class ShardedHeads:
    """The attention heads a tensor-parallel group holds altogether, padding and replicas included.

    Each rank holds ``attention_heads / TP`` query heads and ``kv_heads / TP`` KV heads; where
    these exceed the model's own counts, the extra heads cost weights and KV cache like real
    ones.
    """

    attention_heads: int
    kv_heads: int


def sharded_heads(
    model: ModelArchitecture, instance: InstanceType, tensor_parallel_size: int
) -> ShardedHeads:
    """How the model's heads are laid out over a TP group of ``instance``.

    On Neuron, NxD Inference pads query heads with zeros up to a multiple of TP
    (``get_number_of_extra_heads`` in neuronx-distributed's ``parallel_layers/pad.py``) and
    lays out KV heads by ``get_shardable_head_counts`` in NxDI's ``modules/attention/gqa.py``:
    kept when TP divides them, replicated to one per rank when they divide TP
    (``REPLICATE_TO_TP_DEGREE``), otherwise replicated to one per query head
    (``CONVERT_TO_MHA``; also for multi-head attention). Read at NxDI 0.9.0, commit ef2731e
    (Neuron SDK 2.29, the newest public source), unchanged since NxDI's first release (SDK
    2.21). On GPUs vLLM never pads and keeps ``max(1, kv_heads // TP)`` KV heads per GPU.
    """
    tp = tensor_parallel_size
    heads, kv = model.num_attention_heads, model.num_kv_heads
    if instance.accelerator is not Accelerator.NEURON:
        return ShardedHeads(attention_heads=heads, kv_heads=max(1, kv // tp) * tp)
    padded = -(-heads // tp) * tp
    if heads == kv:
        return ShardedHeads(attention_heads=padded, kv_heads=padded)
    if kv % tp == 0:
        return ShardedHeads(attention_heads=padded, kv_heads=kv)
    return ShardedHeads(attention_heads=padded, kv_heads=tp if tp % kv == 0 else padded)


def head_padding_bytes(model: ModelArchitecture, heads: ShardedHeads) -> int:
    """Weights the padded and replicated heads add: rows of q/o and of k/v per extra head.

    Each extra query head adds ``head_dim x hidden_size`` to the query and to the output
    projection, each extra KV head as much to the key and to the value projection.
    """
    extra = (heads.attention_heads - model.num_attention_heads) + (
        heads.kv_heads - model.num_kv_heads
    )
    return (
        2
        * extra
        * model.num_layers
        * model.effective_head_dim
        * model.hidden_size
        * model.bytes_per_element
    )


def usable_memory_fraction(instance: InstanceType, gpu_memory_utilization: float) -> float:
    if instance.accelerator is Accelerator.NEURON:
        return NEURON_USABLE_MEMORY_FRACTION
    return gpu_memory_utilization


@dataclass(frozen=True)
class MemoryFit:
    """Weights plus worst-case KV cache against the usable memory of one tensor-parallel group.

    ``padding_bytes`` are the weights of padded and replicated attention heads (see
    :func:`sharded_heads`), on top of the checkpoint's ``weight_bytes``; ``kv_cache_bytes``
    counts replicated KV heads.
    """

    weight_bytes: int
    padding_bytes: int
    kv_cache_bytes: int
    capacity_bytes: int
    group_memory_bytes: int
    #: LoRA adapter slots (:func:`lora_slot_bytes` times the slots), allocated with the weights.
    adapter_bytes: int = 0

    @property
    def required_bytes(self) -> int:
        return self.weight_bytes + self.padding_bytes + self.adapter_bytes + self.kv_cache_bytes

    @property
    def kv_room_bytes(self) -> int:
        """Usable memory left for the KV cache once the weights and adapter slots are in."""
        return max(
            self.capacity_bytes - self.weight_bytes - self.padding_bytes - self.adapter_bytes, 0
        )

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
    adapter_bytes: int = 0,
    pipeline_parallel_size: int = 1,
) -> MemoryFit:
    """Weights, ``adapter_bytes`` of LoRA slots and the worst-case KV cache against the usable
    memory of a group of ``tensor_parallel_size`` x ``pipeline_parallel_size`` cores or GPUs.

    Pipeline stages split the layers, so weights, adapter slots and KV cache are divided over
    the stages as they are over the tensor-parallel ranks: the group holds them altogether once.
    """
    group = tensor_parallel_size * pipeline_parallel_size * instance.memory_per_core_bytes
    heads = sharded_heads(model, instance, tensor_parallel_size)
    return MemoryFit(
        weight_bytes=weight_bytes(model),
        padding_bytes=head_padding_bytes(model, heads),
        kv_cache_bytes=kv_cache_bytes(model, max_model_len, max_num_seqs, heads.kv_heads),
        capacity_bytes=int(group * usable_memory_fraction(instance, gpu_memory_utilization)),
        group_memory_bytes=group,
        adapter_bytes=adapter_bytes,
    )


def max_num_seqs_that_fit(
    model: ModelArchitecture,
    instance: InstanceType,
    tensor_parallel_size: int,
    max_model_len: int,
    gpu_memory_utilization: float = 0.9,
    adapter_bytes: int = 0,
    pipeline_parallel_size: int = 1,
) -> int:
    """The largest batch whose worst-case KV cache still fits beside the weights and
    ``adapter_bytes`` of LoRA slots (0 if none), in a group of ``pipeline_parallel_size``
    stages."""
    fit = memory_fit(
        model,
        instance,
        tensor_parallel_size,
        max_model_len,
        1,
        gpu_memory_utilization,
        adapter_bytes,
        pipeline_parallel_size,
    )
    return fit.kv_room_bytes // fit.kv_cache_bytes


def lora_slot_bytes(
    model: ModelArchitecture, instance: InstanceType, tensor_parallel_size: int, rank: int
) -> int:
    """GPU memory of one LoRA adapter slot of ``rank`` over a tensor-parallel group.

    vLLM allocates every slot up front, at the largest rank (``--max-lora-rank``) and the
    model's dtype, for every module of the model that LoRA supports, whatever the adapters
    target: read at vLLM 0.34.0, ``vllm/lora/model_manager.py`` (``_create_lora_modules`` wraps
    every supported module, ``get_supported_lora_modules`` in ``vllm/lora/utils.py`` lists the
    linear layers and the embedding modules) and ``create_lora_weights`` of the layers in
    ``vllm/lora/layers/``. A slot holds A (rank x input) and B (output x rank) of each:

    - column-parallel projections (the merged ``qkv_proj`` and ``gate_up_proj``): A of the
      whole hidden size on every rank, per slice (q, k, v; gate, up); B of the rank's share
      of the output (KV heads replicated as :func:`sharded_heads` lays them out);
    - row-parallel projections (``o_proj``, ``down_proj``): A of the rank's share of the
      input; B of the whole hidden size on every rank;
    - the embeddings (``embed_tokens``: A vocabulary x rank, B hidden x rank) and the LM head
      (``lm_head``: A rank x hidden, B vocabulary x rank), whole on every rank.

    ``intermediate_size`` must be known (the catalog's models give it).
    """
    if model.intermediate_size is None:
        raise ValueError("sizing LoRA slots needs the model's intermediate_size")
    tp = tensor_parallel_size
    hidden, inner, vocab = model.hidden_size, model.intermediate_size, model.vocab_size
    heads = sharded_heads(model, instance, tp)
    head_dim = model.effective_head_dim
    qkv = tp * 3 * hidden + head_dim * (heads.attention_heads + 2 * heads.kv_heads)
    output = head_dim * heads.attention_heads + tp * hidden
    gate_up = tp * 2 * hidden + 2 * inner
    down = inner + tp * hidden
    per_layer = qkv + output + gate_up + down
    embeddings = tp * 2 * (vocab + hidden)
    return rank * (model.num_layers * per_layer + embeddings) * model.bytes_per_element


def accelerator_units(instance: InstanceType, count: int) -> str:
    """``count`` of the units tensor parallelism counts on ``instance``, named as such.

    The unit is a GPU on NVIDIA instances and a NeuronCore on Inferentia2 (two per chip), so
    that "8 GPUs" is not called "8 cores".
    """
    unit = "GPU" if instance.accelerator is Accelerator.NVIDIA else "NeuronCore"
    return f"{count} {unit}{'' if count == 1 else 's'}"


def tensor_parallel_problem(
    model: ModelArchitecture, instance: InstanceType, tensor_parallel_size: int
) -> str | None:
    """Why ``tensor_parallel_size`` cannot work for ``model`` on ``instance``, or None.

    The degree must be one the instance's topology runs. On GPUs it must also divide the
    attention heads, and either divide the KV heads or be a multiple of them (vLLM's sharding
    rule). On Neuron the heads never rule a degree out: the vLLM Neuron plugin skips vLLM's
    head-divisibility check and NxD Inference pads and replicates heads instead (see
    :func:`sharded_heads`), which :func:`memory_fit` charges for.
    """
    tp = tensor_parallel_size
    if tp not in instance.valid_tensor_parallel:
        return (
            f"tensor_parallel_size {tp} is not supported by the topology of {instance.name} "
            f"(valid: {list(instance.valid_tensor_parallel)})"
        )
    if instance.accelerator is not Accelerator.NVIDIA:
        return None
    if model.num_attention_heads % tp:
        return (
            f"tensor_parallel_size {tp} does not divide the model's "
            f"{model.num_attention_heads} attention heads"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
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


def fitting_tensor_parallel(
    model: ModelArchitecture,
    instance: InstanceType,
    max_model_len: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
) -> tuple[int, ...]:
    """The usable tensor-parallel degrees (:func:`usable_tensor_parallel`) whose group holds
    the weights and the worst-case KV cache at these limits."""
    return tuple(
        tp
        for tp in usable_tensor_parallel(model, instance)
        if memory_fit(model, instance, tp, max_model_len, max_num_seqs, gpu_memory_utilization).fits
    )


def replicas_per_node(instance: InstanceType, tensor_parallel_size: int) -> int:
    """Model replicas one node holds: each takes ``tensor_parallel_size`` cores or GPUs."""
    return instance.cores // tensor_parallel_size


def nodes_needed(replicas: int, per_node: int) -> int:
    return math.ceil(replicas / per_node) if replicas else 0


# Host memory a vLLM server process needs besides an offloaded KV tier: the CUDA context and
# the engine's processes, the tokenizer and the pinned staging buffers, and the weights passing
# through host memory while they load (the checkpoint's size, read once). At least 16 GiB.
SERVER_HOST_MEMORY_FLOOR_GIB = 16


def server_host_memory_gib(model: ModelArchitecture) -> int:
    """Host memory of one vLLM server without a CPU KV tier, in GiB."""
    return max(SERVER_HOST_MEMORY_FLOOR_GIB, math.ceil(gib(weight_bytes(model))))


def kv_tier_tokens(
    model: ModelArchitecture, instance: InstanceType, tensor_parallel_size: int, tier_gib: int
) -> int:
    """Tokens of KV cache a tier of ``tier_gib`` GiB holds for one replica.

    A replica's tier holds the KV of every rank of its tensor-parallel group, so a token costs
    what it costs in GPU memory: :func:`kv_cache_bytes_per_token` of the heads the group holds.
    """
    heads = sharded_heads(model, instance, tensor_parallel_size)
    return tier_gib * GIB // kv_cache_bytes_per_token(model, heads.kv_heads)


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
    ``max_num_seqs * group_bandwidth / (weights + kv_cache)`` tokens per second, where padded
    and replicated heads count like real ones: every rank streams its whole shard.
    """
    group_bandwidth = instance.bandwidth_per_core_bytes_per_s * tensor_parallel_size
    bytes_per_step = memory_fit(
        model, instance, tensor_parallel_size, max_model_len, max_num_seqs
    ).required_bytes
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
    """CPU and memory for one model-server pod, requests equal to limits (Guaranteed QoS).

    CPUs are whole, so that the static CPU manager of accelerator nodes gives the pod
    exclusive cores on the NUMA node of its accelerators
    (:mod:`eks_inference.charts.node_bootstrap`).
    """

    cpu_millis: int
    memory_mib: int

    @property
    def cpu(self) -> str:
        if self.cpu_millis % 1000 == 0:
            return str(self.cpu_millis // 1000)
        return f"{self.cpu_millis}m"

    @property
    def memory(self) -> str:
        return f"{self.memory_mib}Mi"


def pod_resources(instance: InstanceType, pods_per_node: int) -> PodResources:
    """Split a node's capacity, less a system reserve, evenly among its model-server pods, in
    whole CPUs (at least one)."""
    cpu = instance.vcpus * 1000 * (1 - _RESERVED_CPU_FRACTION) - 500
    memory = (instance.memory_gib * (1 - _RESERVED_MEMORY_FRACTION) - _RESERVED_MEMORY_GIB) * 1024
    return PodResources(
        cpu_millis=max(1000, int(cpu // pods_per_node // 1000 * 1000)),
        memory_mib=int(memory // pods_per_node // 256 * 256),
    )


def gib(n_bytes: float) -> float:
    return n_bytes / GIB
