"""Dynamo's rules: a graph's split is said once, each worker group fits its GPUs, and the KV
cache has a way from prefill to decode.

Every number comes from the sizing code every engine's fit rule uses
(:mod:`eks_inference.catalog.sizing`): a group's tensor-parallel degree must be one the
instance's topology and the model's heads allow (:func:`~eks_inference.catalog.sizing.
tensor_parallel_problem`), and its weights plus worst-case KV cache at the deployment's
``max_model_len`` and ``max_num_seqs`` must fit the group's GPUs
(:func:`~eks_inference.catalog.sizing.memory_fit`).

The KV transfer (:func:`kv_transport`): NIXL moves a prompt's KV cache from a prefill worker's
GPUs to a decode worker's. Within one node it goes over PCIe (NIXL's UCX backend, CUDA IPC),
and every worker prefers the node of the others (pod affinity,
:func:`eks_inference.engines.dynamo.graph.worker_pod`). A graph whose workers hold more GPUs
than one node (:func:`crosses_nodes`) sends it across nodes, a network that must carry GiB
per request (a Llama-3.1-70B prompt of 8k tokens is 2.5 GiB of KV cache): EFA, through NIXL's
libfabric backend, the one Dynamo's EFA guide says reaches EFA's bandwidth. TCP would add
seconds to every first token, so it is never admitted: a graph across nodes on an instance
type without EFA is refused here (no pool could fix it), and on a pool that turns EFA off,
spans zones or holds fewer nodes than the graph needs by the platform
(:mod:`eks_inference.specification.kv_transfer_rules`); a pool that says nothing attaches EFA
for it. An autoscaled graph is judged at ``max_replicas``: its workers are configured for EFA
from the start, since the next one may land on another node. Each worker then takes its share
of its node's EFA interfaces (:func:`eks_inference.charts.fabric.efa_share`), which must be a
whole number of at least one (:func:`check_efa_share`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eks_inference.catalog import MODELS, sizing
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.charts.fabric import efa_share
from eks_inference.engines.dynamo.options import dynamo_options, split_of
from eks_inference.specification.kv_serving import WorkerGroup
from eks_inference.specification.node_pools import efa_instance_types
from eks_inference.specification.validation import Problems

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

#: Where the KV cache goes over between the groups of a graph on one node: PCIe, through
#: NIXL's UCX backend (CUDA IPC).
WITHIN_NODE = "one node, PCIe (NIXL)"
# Why a graph across nodes on an instance type without EFA is refused.
_NO_EFA = "it has no EFA, and TCP cannot carry GiB of KV cache per request in time"


def graph_gpus(spec: ModelDeploymentSpec) -> int:
    """The GPUs a disaggregated graph's workers hold at most: its groups' replicas at their
    degrees, or autoscaled, both groups at ``scaling.max_replicas`` (0: aggregated)."""
    split = split_of(spec)
    if split is None:
        return 0
    if spec.scaling.autoscale:
        per_step = sum(g.tensor_parallel_size for _, g in split.groups.groups)
        return spec.scaling.max_replicas * per_step
    return split.groups.accelerators


def graph_nodes(spec: ModelDeploymentSpec) -> int:
    """The nodes the graph's workers need at least (:func:`graph_gpus` over the node's GPUs;
    one for an aggregated graph: the :class:`~eks_inference.specification.capabilities.
    DisaggregatesPrefill` answer)."""
    return max(1, -(-graph_gpus(spec) // spec.instance.cores))


def crosses_nodes(spec: ModelDeploymentSpec) -> bool:
    """Whether the graph's workers hold more GPUs than one node, so its KV cache crosses
    nodes."""
    return graph_nodes(spec) > 1


def kv_transport(spec: ModelDeploymentSpec) -> str | None:
    """How the KV cache moves from prefill to decode (``None``: aggregated, it does not), and
    across nodes what it costs: the EFA bandwidth of the worker with the smaller share of its
    node's interfaces (of the node's, :mod:`eks_inference.catalog.node_hardware`), and the
    time one prompt's KV cache at ``limits.max_model_len`` takes at it."""
    split = split_of(spec)
    if split is None:
        return None
    if not crosses_nodes(spec):
        return WITHIN_NODE
    instance, limits = spec.instance, spec.limits
    share = min(efa_share(instance, g.tensor_parallel_size) for _, g in split.groups.groups)
    gbps = node_hardware(instance.name).network_gbps * share / instance.efa_interfaces
    prompt = sizing.kv_cache_bytes_per_token(spec.model.architecture) * limits.max_model_len
    seconds = prompt * 8 / (float(gbps) * 1e9)
    staged = "" if instance.efa_rdma else ", staged in host memory"
    return (
        f"across nodes, EFA (NIXL libfabric{staged}): {float(gbps):g} Gbps/worker, "
        f"{sizing.gib(prompt):.2f} GiB per {limits.max_model_len}-token prompt in "
        f"{seconds * 1000:.0f} ms"
    )


def check_split_given_once(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The split is in ``options`` or in ``disaggregation``, not both, and not with
    ``mode: aggregated``."""
    options = dynamo_options(spec)
    written = [name for name in ("prefill", "decode") if getattr(options, name) is not None]
    if spec.disaggregation is not None and written:
        problems.add(
            ("disaggregation",),
            f"the prefill/decode split is given twice, here and in options."
            f"{' and options.'.join(written)}; remove disaggregation, or options.prefill "
            "and options.decode",
        )
    if options.mode == "aggregated" and (written or spec.disaggregation is not None):
        field = ("options", written[0]) if written else ("disaggregation",)
        problems.add(
            field,
            "mode: aggregated serves no prefill/decode split; remove it, or set "
            "options.mode: disaggregated",
        )


def check_groups_serve_one_model(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """Both groups serve the deployment's model: same weights, dtype and KV block size."""
    options = dynamo_options(spec)
    for name in ("prefill", "decode"):
        group = getattr(options, name)
        if group is None or group.model is None or _model_id(group.model) == spec.model.id:
            continue
        problems.add(
            ("options", name, "model"),
            f"the {name} workers would serve {group.model} and the graph serves "
            f"{spec.model.id}: the KV cache of a prefill worker is valid only for a decode "
            f"worker with the same weights, dtype ({spec.model.architecture.dtype}) and KV "
            f"block size ({spec.limits.block_size}); remove options.{name}.model, or set it "
            "to the deployment's model",
            group.model,
        )


def check_groups_fit(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """Each group's TP suits the instance and the model, and its workers fit their GPUs."""
    split = split_of(spec)
    if split is None:
        return
    for name, group in split.groups.groups:
        path = (*split.field, name, "tensor_parallel_size")
        problem = _group_problem(spec, group)
        if problem is not None:
            problems.add(path, problem, group.tensor_parallel_size)


def check_one_node(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """A graph whose workers hold more than one node's GPUs runs on an instance type with EFA:
    without it no pool could carry its KV cache across nodes (see the module)."""
    split = split_of(spec)
    # Autoscaled, the graph at max_replicas is checked (check_autoscaled_graph).
    if split is None or spec.scaling.autoscale or not _refused_across_nodes(spec):
        return
    instance = spec.instance
    groups = ", ".join(
        f"{name} {g.replicas} x TP {g.tensor_parallel_size}" for name, g in split.groups.groups
    )
    problems.add(
        (*split.field, "prefill", "replicas"),
        f"the graph ({groups}) needs {sizing.accelerator_units(instance, graph_gpus(spec))}, "
        f"more than one {instance.name} ({instance.cores}), so its KV cache would cross nodes "
        f"without a transport: {_NO_EFA}; keep prefill and decode within {instance.cores} "
        f"GPUs, or use an instance type with EFA ({efa_instance_types()})",
        split.groups.prefill.replicas,
    )


def _refused_across_nodes(spec: ModelDeploymentSpec) -> bool:
    return crosses_nodes(spec) and not spec.instance.efa


def check_autoscaled_graph(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """An autoscaled disaggregated graph: each group scales between ``scaling.min_replicas``
    and ``max_replicas`` (:mod:`eks_inference.engines.dynamo.autoscaling`), so a group's own
    ``replicas`` is refused, and at ``max_replicas`` both groups together hold at most one
    node's GPUs unless the instance type has EFA (as :func:`check_one_node` says)."""
    split = split_of(spec)
    if split is None or not spec.scaling.autoscale:
        return
    written = {
        "options": (dynamo_options(spec).prefill, dynamo_options(spec).decode),
        "disaggregation": (
            (spec.disaggregation.prefill, spec.disaggregation.decode)
            if spec.disaggregation is not None
            else (None, None)
        ),
    }[split.field[0]]
    for name, group in zip(("prefill", "decode"), written, strict=True):
        if group is not None and "replicas" in group.model_fields_set:
            problems.add(
                (*split.field, name, "replicas"),
                f"with scaling.autoscale each group scales between scaling.min_replicas "
                f"({spec.scaling.min_replicas}) and max_replicas ({spec.scaling.max_replicas}) "
                f"on its own load; remove {'.'.join(split.field)}.{name}.replicas, or set "
                "autoscale: false for fixed groups",
                group.replicas,
            )
    if not _refused_across_nodes(spec):
        return
    instance, most = spec.instance, spec.scaling.max_replicas
    fitting = instance.cores // (graph_gpus(spec) // most)
    fewer = (
        f"set max_replicas <= {fitting}"
        + ("" if fitting > spec.scaling.min_replicas else " and lower min_replicas")
        + ", or "
        if fitting
        else ""
    )
    problems.add(
        ("scaling", "max_replicas"),
        f"at max_replicas {most} the graph's prefill and decode workers (TP "
        f"{split.groups.prefill.tensor_parallel_size} and "
        f"{split.groups.decode.tensor_parallel_size} each) need "
        f"{sizing.accelerator_units(instance, graph_gpus(spec))}, more than one "
        f"{instance.name} ({instance.cores}), so the KV cache would cross nodes without a "
        f"transport: {_NO_EFA}; {fewer}use an instance type with EFA ({efa_instance_types()})",
        most,
    )


def check_efa_share(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """Across nodes, each worker takes a whole number (at least one) of its node's EFA
    interfaces, in proportion to its GPUs (:func:`~eks_inference.charts.fabric.efa_share`):
    a fraction of an interface cannot be requested, and a worker without one would have no
    way to the other node."""
    split = split_of(spec)
    instance = spec.instance
    if split is None or not instance.efa or not crosses_nodes(spec):
        return
    working = [
        tp
        for tp in sizing.usable_tensor_parallel(spec.model.architecture, instance)
        if _whole_share(spec, tp)
    ]
    for name, group in split.groups.groups:
        tp = group.tensor_parallel_size
        if _whole_share(spec, tp):
            continue
        problems.add(
            (*split.field, name, "tensor_parallel_size"),
            f"across nodes each {name} worker takes its share of the "
            f"{instance.efa_interfaces} EFA interfaces of a {instance.name} "
            f"({instance.cores} GPUs), and at TP {tp} that is "
            f"{efa_share(instance, tp)}, not a whole interface; use tensor_parallel_size one "
            f"of {working}",
            tp,
        )


def _whole_share(spec: ModelDeploymentSpec, tp: int) -> bool:
    share = efa_share(spec.instance, tp)
    return share.denominator == 1 and share >= 1


def _model_id(name: str) -> str:
    entry = MODELS.get(name)
    return name if entry is None else entry.hf_id


def _group_problem(spec: ModelDeploymentSpec, group: WorkerGroup) -> str | None:
    arch, instance, limits = spec.model.architecture, spec.instance, spec.limits
    tp = group.tensor_parallel_size
    problem = sizing.tensor_parallel_problem(arch, instance, tp)
    usable = sizing.usable_tensor_parallel(arch, instance)
    if problem is not None:
        return f"{problem}; use one of {list(usable)}"
    fit = sizing.memory_fit(
        arch, instance, tp, limits.max_model_len, limits.max_num_seqs, limits.gpu_memory_utilization
    )
    if fit.fits:
        return None
    fitting = sizing.fitting_tensor_parallel(
        arch, instance, limits.max_model_len, limits.max_num_seqs, limits.gpu_memory_utilization
    )
    larger = [t for t in fitting if t > tp]
    fix = f"use tensor_parallel_size {larger[0]}" if larger else "lower limits.max_num_seqs"
    return (
        f"{spec.model.id} does not fit {sizing.accelerator_units(instance, tp)} of "
        f"{instance.name}: weights {sizing.gib(fit.weight_bytes + fit.padding_bytes):.1f} GiB "
        f"+ KV cache {sizing.gib(fit.kv_cache_bytes):.1f} GiB ({limits.max_num_seqs} x "
        f"{limits.max_model_len} tokens) > {sizing.gib(fit.capacity_bytes):.1f} GiB usable; "
        f"{fix}"
    )
