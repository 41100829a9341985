"""The rules across a deployment's fields, and the rule book of :class:`ModelDeploymentSpec`.

A rule about one field is part of that field's type (:mod:`eks_inference.specification.deployment`);
a rule that reads several is a :class:`~eks_inference.specification.validation.Rule` here, with
every field it reads, down to the field of a nested model where it reads only some (properties
included: ``instance`` and ``on_neuron`` read instance_type, ``memory_fit`` the model,
instance, degree and three limits). They are written into the model's rule book when the
package is imported, so that the model's module imports none of the rules' modules: the rules
read the model, the model does not read them.
"""

from __future__ import annotations

from collections.abc import Callable

from eks_inference.catalog import (
    INSTANCE_TYPES,
    NEURON_POOR_COMPILE_FAMILIES,
    Accelerator,
    InstanceType,
    sizing,
)
from eks_inference.specification.adapters_rules import check_adapters
from eks_inference.specification.deployment import DEPLOYMENT_RULES, Limits, ModelDeploymentSpec
from eks_inference.specification.engine_rules import (
    FIELD_NEED_RULES,
    engine_rules,
    supported_accelerator_problem,
    supported_loader_problem,
)
from eks_inference.specification.kv_serving_rules import check_kv_cache
from eks_inference.specification.multi_node_rules import MULTI_NODE_RULE
from eks_inference.specification.routing_rules import check_replicas_to_pick_from
from eks_inference.specification.validation import Problems, Rule
from eks_inference.specification.weights_rules import image_size_problem, mountpoint_cache_problem

# Instance types named where a model fits, one per family, cheapest first: enough to choose
# from, on one line.
_MAX_LISTED_INSTANCES = 4


def _check_context_length(spec: ModelDeploymentSpec, problems: Problems) -> None:
    context = spec.model.architecture.context_length_problem(spec.limits.max_model_len)
    if context is not None:
        problems.add(("limits", "max_model_len"), context, spec.limits.max_model_len)


def _fitting_degrees(spec: ModelDeploymentSpec, instance: InstanceType) -> list[int]:
    """Degrees of ``instance`` that run the model and hold it at the spec's limits."""
    limits = spec.limits
    return list(
        sizing.fitting_tensor_parallel(
            spec.model.architecture,
            instance,
            limits.max_model_len,
            limits.max_num_seqs,
            limits.gpu_memory_utilization,
        )
    )


def _where_it_fits(spec: ModelDeploymentSpec) -> str:
    """The cheapest catalog instance type of each family that holds the model at its limits.

    Named with their smallest fitting degree, for a model that no degree of the chosen
    instance holds: the fix is another instance type, not another degree.
    """
    fitting: dict[str, str] = {}
    for instance in sorted(INSTANCE_TYPES.values(), key=lambda t: (t.price_per_hour, t.name)):
        if instance.accelerator is Accelerator.NONE or instance.family in fitting:
            continue
        degrees = _fitting_degrees(spec, instance)
        if degrees:
            fitting[instance.family] = f"{instance.name} (TP {degrees[0]})"
    if not fitting:
        return (
            "a shorter max_model_len or a smaller max_num_seqs: no instance type of the "
            "catalog holds it at these limits"
        )
    listed = list(fitting.values())[:_MAX_LISTED_INSTANCES]
    return f"a larger instance type where it fits: {', '.join(listed)}"


def _check_fit(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The degree runs on the topology (and the heads), and the TP group holds the model."""
    instance = spec.instance
    arch = spec.model.architecture
    limits = spec.limits
    fitting = _fitting_degrees(spec, instance)
    problem = sizing.tensor_parallel_problem(arch, instance, spec.tensor_parallel_size)
    if problem is not None:
        hint = (
            f"degrees that work for this model on {instance.name}: {fitting}"
            if fitting
            else f"no degree of {instance.name} holds this model; use {_where_it_fits(spec)}"
        )
        problems.add(("tensor_parallel_size",), f"{problem}; {hint}", spec.tensor_parallel_size)
        return
    fit = spec.memory_fit
    if fit.fits:
        return
    larger = [d for d in fitting if d > spec.tensor_parallel_size]
    seqs = sizing.max_num_seqs_that_fit(
        arch,
        instance,
        spec.tensor_parallel_size,
        limits.max_model_len,
        limits.gpu_memory_utilization,
        spec.adapter_bytes,
        spec.pipeline_parallel_size,
    )
    room_without_adapters = fit.capacity_bytes - fit.weight_bytes - fit.padding_bytes
    if (
        not seqs
        and fit.adapter_bytes
        and room_without_adapters >= fit.kv_cache_bytes // limits.max_num_seqs
    ):
        return  # the adapter slots leave no KV cache: the adapters' rule says so
    fixes = []
    if larger:
        fixes.append(f"tensor_parallel_size {larger[0]}")
    if seqs:
        fixes.append(f"max_num_seqs <= {seqs}")
    if not fitting:
        fixes.append(_where_it_fits(spec))
    group = ""
    if spec.multi_node is not None:
        group = f"{spec.nodes_per_replica} nodes x "
        fixes.append(f"multi_node.nodes_per_replica {spec.nodes_per_replica + 1}")
    padding = (
        f" + {sizing.gib(fit.padding_bytes):.1f} GiB of padded and replicated heads"
        if fit.padding_bytes
        else ""
    )
    if fit.adapter_bytes:
        padding += f" + {sizing.gib(fit.adapter_bytes):.2f} GiB of adapter slots"
    problems.add(
        ("tensor_parallel_size",),
        f"weights ({sizing.gib(fit.weight_bytes):.1f} GiB{padding}) plus KV cache for "
        f"{limits.max_num_seqs} x {limits.max_model_len} tokens "
        f"({sizing.gib(fit.kv_cache_bytes):.1f} GiB) exceed the "
        f"{sizing.gib(fit.capacity_bytes):.1f} GiB usable on {group}"
        f"{sizing.accelerator_units(instance, spec.tensor_parallel_size)} of {instance.name}; "
        f"use {' or '.join(fixes)}",
        spec.tensor_parallel_size,
    )


def _check_gpu_only_limits(spec: ModelDeploymentSpec, problems: Problems) -> None:
    # On Neuron any other value would be silently ignored: the sizing and the engine use the
    # Neuron runtime's fixed share instead. The default itself is accepted, since a spec
    # copied through model_dump() carries it explicitly without asking for anything.
    default = Limits.model_fields["gpu_memory_utilization"].default
    if spec.on_neuron and spec.limits.gpu_memory_utilization != default:
        problems.add(
            ("limits", "gpu_memory_utilization"),
            f"gpu_memory_utilization applies to GPUs only; on {spec.instance_type} the model "
            f"gets a fixed {sizing.NEURON_USABLE_MEMORY_FRACTION:.0%} of each NeuronCore's "
            "memory: remove it",
            spec.limits.gpu_memory_utilization,
        )


def _check_neuron_only_on_inf2(spec: ModelDeploymentSpec, problems: Problems) -> None:
    if spec.neuron is not None and not spec.on_neuron:
        problems.add(
            ("neuron",),
            f"neuron options apply only to inf2 instance types, not {spec.instance_type}; "
            "remove them",
        )


def _check_neuron_buckets(spec: ModelDeploymentSpec, problems: Problems) -> None:
    if not spec.on_neuron:
        return
    options = spec.neuron_options
    max_model_len = spec.limits.max_model_len
    for i, bucket in enumerate(options.sequence_buckets):
        if bucket > max_model_len:
            problems.add(
                ("neuron", "sequence_buckets", i),
                f"bucket {bucket} exceeds max_model_len ({max_model_len}); drop it or raise "
                "max_model_len",
                bucket,
            )
    overridden = (
        ("context_encoding_buckets", options.overrides.get("context_encoding_buckets", [])),
        ("token_generation_buckets", options.overrides.get("token_generation_buckets", [])),
    )
    for key, buckets in overridden:
        # NxD Inference refuses a bucket beyond the context when it compiles, hours later.
        too_long = [b for b in buckets if b > max_model_len]
        if too_long:
            problems.add(
                ("neuron", "overrides", key),
                f"buckets {too_long} exceed max_model_len ({max_model_len})",
                too_long,
            )


def _check_compiled_artifacts(spec: ModelDeploymentSpec, problems: Problems) -> None:
    options = spec.neuron_options
    if (
        spec.on_neuron
        and options.compiled_artifacts_prefix is None
        and not options.allow_compile_at_startup
    ):
        problems.add(
            ("neuron", "compiled_artifacts_prefix"),
            "Neuron serving needs compiled artifacts (compiling in the pod takes ~15 minutes "
            "per replica); set compiled_artifacts_prefix, e.g. neuron-artifacts/, or "
            "allow_compile_at_startup: true for development",
        )


def _check_poor_compile_architecture(spec: ModelDeploymentSpec, problems: Problems) -> None:
    family = spec.model.architecture.family
    if (
        spec.on_neuron
        and family in NEURON_POOR_COMPILE_FAMILIES
        and not spec.neuron_options.allow_poor_compile_architecture
    ):
        problems.add(
            ("neuron", "allow_poor_compile_architecture"),
            f"the {family} family fails or compiles poorly on Neuron (mixed attention "
            "configurations); serve it on a GPU instance, or set "
            "allow_poor_compile_architecture: true after testing a compile",
        )


def _rule(
    reads: str, check: Callable[[ModelDeploymentSpec, Problems], None]
) -> Rule[ModelDeploymentSpec]:
    return Rule(frozenset(reads.split()), check)


_LIMITS_SIZED = "limits.max_model_len limits.max_num_seqs limits.gpu_memory_utilization"
_RULES = (
    _rule("engine instance_type", supported_accelerator_problem),
    _rule("model limits.max_model_len", _check_context_length),
    _rule(
        f"model instance_type tensor_parallel_size multi_node {_LIMITS_SIZED} adapters", _check_fit
    ),
    _rule("weights.loader engine instance_type", supported_loader_problem),
    _rule("weights.loader model", image_size_problem),
    _rule("weights.cache_gib instance_type", mountpoint_cache_problem),
    _rule("instance_type limits.gpu_memory_utilization", _check_gpu_only_limits),
    _rule("instance_type neuron", _check_neuron_only_on_inf2),
    _rule(
        "instance_type neuron.sequence_buckets neuron.overrides limits.max_model_len",
        _check_neuron_buckets,
    ),
    _rule(
        "instance_type neuron.compiled_artifacts_prefix neuron.allow_compile_at_startup",
        _check_compiled_artifacts,
    ),
    _rule(
        "instance_type model neuron.allow_poor_compile_architecture",
        _check_poor_compile_architecture,
    ),
    _rule("kv_cache engine instance_type model tensor_parallel_size", check_kv_cache),
    _rule(
        "adapters engine instance_type model tensor_parallel_size kv_cache weights.loader "
        + _LIMITS_SIZED,
        check_adapters,
    ),
    _rule("routing scaling.max_replicas", check_replicas_to_pick_from),
    MULTI_NODE_RULE,
    *FIELD_NEED_RULES,
)


def _rules_of(spec: ModelDeploymentSpec) -> tuple[Rule[ModelDeploymentSpec], ...]:
    """The rules every spec follows, then those of the engine it names."""
    return (*_RULES, *engine_rules(spec))


DEPLOYMENT_RULES.write(_rules_of)
