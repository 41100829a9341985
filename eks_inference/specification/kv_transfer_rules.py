"""The pool of a disaggregated deployment whose KV cache crosses nodes.

Prefill and decode workers that together hold more GPUs than one node hand each prompt's KV
cache from one node to another (gigabytes for a long prompt of a 70B model). Only Elastic
Fabric Adapter carries that in the time a first token allows; TCP between the nodes would
add seconds per request, so it is never admitted. The engine says whether a spec's workers
cross nodes (:func:`~eks_inference.specification.engines.kv_cache_crosses_nodes`); an
instance type without EFA is refused by the engine's own rules, since no pool could fix it.
What a pool can fix is refused here: it turns EFA off, or its nodes span zones, which EFA and
the cluster placement group of a pool with EFA do not, or it holds fewer nodes than the
workers need at least. A pool that says nothing attaches EFA by default for such a deployment
(:func:`~eks_inference.specification.multi_node_rules.chosen_efa`).
"""

from __future__ import annotations

from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import kv_cache_nodes
from eks_inference.specification.multi_node_rules import one_zone_problem
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.validation import Problems


def spanning_pool_problems(
    deployment: ModelDeploymentSpec, pool: NodePool, pool_index: int, problems: Problems
) -> None:
    """Refuse a pool that cannot give ``deployment``'s KV cache EFA between its nodes (see
    the module)."""
    nodes = kv_cache_nodes(deployment)
    if not pool.instance.efa or nodes <= 1:
        return
    what = (
        f"deployment {deployment.name!r} serves prefill and decode on more GPUs than one "
        f"{pool.instance.name} holds, so its KV cache crosses nodes, which needs EFA"
    )
    if pool.efa is False:
        problems.add(
            ("node_pools", pool_index, "efa"),
            f"{what}, but pool {pool.name!r} turns EFA off (TCP is not admitted for it); set "
            "efa: true (or remove efa), or give the deployment fewer prefill and decode "
            f"workers, within {pool.instance.cores} GPUs",
            False,
        )
    else:
        one_zone_problem(
            pool,
            pool_index,
            f"{what}, and the nodes of a pool with EFA share one Availability Zone",
            problems,
        )
    if pool.max_size < nodes:
        problems.add(
            ("node_pools", pool_index, "max_size"),
            f"{what}: its workers need at least {nodes} {pool.instance.name} nodes, but pool "
            f"{pool.name!r} has max_size {pool.max_size}; set max_size >= {nodes}",
            pool.max_size,
        )
