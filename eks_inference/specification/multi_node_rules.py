"""The rules of a replica across nodes (``multi_node``), beside the fit every spec is held to.

What the generic rules already say for every spec holds for a group too, counted over the
group: the weights plus the worst-case KV cache fit ``tensor_parallel_size`` x
``nodes_per_replica`` GPUs (:attr:`ModelDeploymentSpec.memory_fit`), the tensor-parallel
degree is one the node's topology runs and divides the heads, and the pool holds every
group's nodes during a rollout (the platform's placement rule, through
:attr:`ModelDeploymentSpec.nodes_during_rollout`). These rules add what only a group needs:

- every pod of a group takes a whole node: ``tensor_parallel_size`` is the node's GPU count
  (a smaller degree leaves GPUs idle that a single-node replica would use, and a group's pods
  cannot share a node's EFA interfaces);
- one pipeline stage per node, so at most one node per layer;
- the nodes talk over Elastic Fabric Adapter, or the spec says it accepts TCP
  (``multi_node.allow_without_efa``);
- LMCache offload and KEDA autoscaling are refused with it: the LMCache image is a separate
  vLLM build, and the KEDA ScaledObject scales a Deployment, which a group is not.

Every node of a group is the same instance type by construction: a spec names one, and an
accelerator pool holds exactly one (:class:`~eks_inference.specification.node_pools.NodePool`).
"""

from __future__ import annotations

from eks_inference.catalog import Accelerator
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import kv_cache_crosses_nodes
from eks_inference.specification.node_pools import NodePool, efa_instance_types
from eks_inference.specification.validation import Problems, Rule


def check_multi_node(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """A group's layout and fabric (see the module)."""
    group = spec.multi_node
    if group is None or spec.accelerator is not Accelerator.NVIDIA:
        return
    instance = spec.instance
    nodes = group.nodes_per_replica
    tp = spec.tensor_parallel_size
    if tp in instance.valid_tensor_parallel and tp != instance.cores:
        problems.add(
            ("tensor_parallel_size",),
            f"with multi_node each pod of a group takes a whole {instance.name}: set "
            f"tensor_parallel_size to {instance.cores}, its GPUs (the group then has "
            f"{nodes} x {instance.cores} GPUs)",
            tp,
        )
    layers = spec.model.architecture.num_layers
    if nodes > layers:
        problems.add(
            ("multi_node", "nodes_per_replica"),
            f"{nodes} nodes make {nodes} pipeline stages, but the model has {layers} layers; "
            f"set nodes_per_replica <= {layers}",
            nodes,
        )
    if not instance.efa and not group.allow_without_efa:
        problems.add(
            ("instance_type",),
            f"{instance.name} has no Elastic Fabric Adapter: the {nodes} nodes of a replica "
            "would pass every token's activations over TCP; use an instance type with EFA "
            f"({efa_instance_types()}) or set multi_node.allow_without_efa: true",
            spec.instance_type,
        )
    if spec.kv_cache is not None:
        problems.add(
            ("kv_cache",),
            "kv_cache runs LMCache's own vLLM image, which is not the pinned vLLM that serves "
            "across nodes; remove kv_cache or multi_node",
        )
    if spec.scaling.autoscale:
        problems.add(
            ("scaling", "autoscale"),
            "autoscale scales a Deployment with KEDA, and a multi-node replica is a "
            "LeaderWorkerSet group; remove autoscale (set min_replicas = max_replicas)",
            True,
        )


#: The rule, reading what :func:`check_multi_node` reads.
MULTI_NODE_RULE: Rule[ModelDeploymentSpec] = Rule(
    frozenset(
        {
            "multi_node",
            "instance_type",
            "tensor_parallel_size",
            "model",
            "kv_cache",
            "scaling.autoscale",
        }
    ),
    check_multi_node,
)


def group_pool_problems(
    deployment: ModelDeploymentSpec, pool: NodePool, pool_index: int, problems: Problems
) -> None:
    """The pool holding a multi-node deployment runs in one Availability Zone, and attaches
    EFA where its instance type has it unless the deployment accepts TCP.

    EFA does not cross zones, and pipeline stages in two zones would pay the inter-zone
    latency and data charges on every token; a pool that turns EFA off (``efa: false``) on an
    instance type with it leaves the group the TCP the deployment must accept by name.
    """
    if deployment.multi_node is None:
        return
    one_zone_problem(
        pool,
        pool_index,
        f"deployment {deployment.name!r} serves one replica across "
        f"{deployment.nodes_per_replica} nodes, which must share one Availability Zone",
        problems,
    )
    if pool.efa is False and pool.instance.efa and not deployment.multi_node.allow_without_efa:
        problems.add(
            ("node_pools", pool_index, "efa"),
            f"pool {pool.name!r} turns EFA off, but deployment {deployment.name!r} serves one "
            f"replica across {deployment.nodes_per_replica} of its nodes, whose stages would "
            "then talk TCP; remove efa: false, or set multi_node.allow_without_efa: true on the "
            "deployment",
            False,
        )


def one_zone_problem(pool: NodePool, pool_index: int, why: str, problems: Problems) -> None:
    """Refuse ``pool``'s zones unless they are one, saying ``why`` its nodes must share one."""
    if len(pool.zones) == 1:
        return
    spans = f"spans zones {list(pool.zones)}" if pool.zones else "spans every zone (no zones set)"
    problems.add(
        ("node_pools", pool_index, "zones"),
        f"{why}, but pool {pool.name!r} {spans}; set zones: [0] (or the one zone index that "
        "has the capacity)",
        list(pool.zones),
    )


def chosen_efa(pool: NodePool, hosted: list[ModelDeploymentSpec]) -> bool | None:
    """Whether ``pool`` attaches EFA when it does not say: where its instance type has EFA and
    it holds a multi-node deployment, or a disaggregated one whose KV cache crosses nodes
    (:func:`~eks_inference.specification.engines.kv_cache_crosses_nodes`); None: the pool
    says, or nothing changes."""
    if pool.efa is not None or not pool.instance.efa:
        return None
    spans = any(d.multi_node is not None or kv_cache_crosses_nodes(d) for d in hosted)
    return True if spans else None
