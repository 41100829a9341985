"""The rules of a deployment's LoRA adapters: they can be sized, their GPU slots leave a KV
cache, and their host-memory cache fits the pod.

The adapters are typed in :mod:`eks_inference.specification.adapters`; an engine without the
:class:`~eks_inference.specification.capabilities.ServesAdapters` capability is refused by the
capability rule, and its adapters are not sized here.
"""

from __future__ import annotations

from eks_inference.catalog import sizing
from eks_inference.specification.capabilities import ServesAdapters
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of
from eks_inference.specification.validation import Problems


def whole_adapter_bytes(spec: ModelDeploymentSpec) -> int:
    """The most one adapter of ``spec`` holds, whole (unsharded): ``max_lora_rank`` on every
    module LoRA supports. 0 without adapters."""
    adapters = spec.adapters
    arch = spec.model.architecture
    if adapters is None or arch.intermediate_size is None:
        return 0
    return sizing.lora_slot_bytes(arch, spec.instance, 1, adapters.max_lora_rank)


def adapter_cache_bytes(spec: ModelDeploymentSpec) -> int:
    """Host memory of the adapters vLLM keeps loaded (``max_cpu_loras``), at most
    (:func:`whole_adapter_bytes` each). 0 without adapters."""
    adapters = spec.adapters
    return 0 if adapters is None else adapters.cpu_loras * whole_adapter_bytes(spec)


def check_adapters(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The model can be sized for adapters, the slots leave room for at least one sequence
    of ``max_model_len`` tokens of KV cache, no adapter is named like the base model,
    on-demand adapters can be found with the weights' loader, and the host-memory cache fits
    the replica's share of the node."""
    adapters = spec.adapters
    if adapters is None or not engine_of(spec).serves(ServesAdapters, spec):
        return
    arch = spec.model.architecture
    if spec.model.id in adapters.names:
        problems.add(
            ("adapters",),
            f"an adapter is named {spec.model.id!r}, as the base model is; rename its folder",
        )
    capability = engine_of(spec).capability(ServesAdapters)
    if (
        adapters.on_demand
        and capability is not None
        and capability.on_demand_base_model(spec) is None
    ):
        problems.add(
            ("adapters", "on_demand"),
            f"engine {spec.engine} finds adapters on demand only when the model it serves is "
            f"a path in the pod (the LoRA resolver of vLLM compares the base model of each "
            f"adapter with it), and weights.loader {spec.weights.loader} gives it an S3 URI; "
            "use loader: mountpoint, or list these adapters under preload",
        )
    if arch.intermediate_size is None:
        problems.add(
            ("model", "architecture", "intermediate_size"),
            "adapter slots are sized from the MLP width; give intermediate_size (config.json)",
        )
        return
    _check_slots(spec, problems)
    _check_cpu_cache(spec, problems)


def _check_slots(spec: ModelDeploymentSpec, problems: Problems) -> None:
    adapters = spec.adapters
    assert adapters is not None
    arch, instance, tp, limits = (
        spec.model.architecture,
        spec.instance,
        spec.tensor_parallel_size,
        spec.limits,
    )
    if sizing.tensor_parallel_problem(arch, instance, tp) is not None:
        return  # the degree's own rule reports it
    bare = sizing.memory_fit(
        arch, instance, tp, limits.max_model_len, 1, limits.gpu_memory_utilization
    )
    if bare.kv_room_bytes < bare.kv_cache_bytes:
        return  # no sequence fits even without adapters: the fit's own rule reports it
    fit = spec.memory_fit
    if fit.kv_room_bytes >= bare.kv_cache_bytes:
        return
    slot = spec.adapter_bytes // adapters.max_loras
    most = (bare.kv_room_bytes - bare.kv_cache_bytes) // slot
    fix = f"max_loras <= {most}" if most else "a lower max_lora_rank, or a larger instance type"
    problems.add(
        ("adapters", "max_loras"),
        f"{adapters.max_loras} adapter slots of rank {adapters.max_lora_rank} take "
        f"{sizing.gib(spec.adapter_bytes):.2f} GiB of the {sizing.gib(bare.kv_room_bytes):.2f} "
        f"GiB left beside the weights on {sizing.accelerator_units(instance, tp)} of "
        f"{instance.name}, leaving no KV cache for one sequence of {limits.max_model_len} "
        f"tokens; use {fix}",
        adapters.max_loras,
    )


def _check_cpu_cache(spec: ModelDeploymentSpec, problems: Problems) -> None:
    adapters = spec.adapters
    assert adapters is not None
    share_gib = sizing.pod_resources(spec.instance, spec.replicas_per_node).memory_mib / 1024
    server_gib = sizing.server_host_memory_gib(spec.model.architecture)
    tier_gib = spec.kv_cache.cpu_gib if spec.kv_cache is not None else 0
    room = share_gib - server_gib - tier_gib
    cache = sizing.gib(adapter_cache_bytes(spec))
    if cache <= room:
        return
    whole = sizing.gib(whole_adapter_bytes(spec))
    most = int(room // whole) if room > 0 else 0
    fix = (
        f"max_cpu_loras <= {most}"
        if most >= adapters.max_loras
        else "a lower max_lora_rank, or a larger instance type"
    )
    problems.add(
        ("adapters", "max_cpu_loras"),
        f"{adapters.cpu_loras} adapters of rank {adapters.max_lora_rank} in host memory take "
        f"up to {cache:.1f} GiB; a replica of {spec.instance_type} has {share_gib:.1f} GiB, of "
        f"which the server needs {server_gib} GiB"
        + (f" and the KV tier {tier_gib} GiB" if tier_gib else "")
        + f"; use {fix}",
        adapters.cpu_loras,
    )
