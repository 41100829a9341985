"""NUMA alignment of model replicas: the kubelet topology policy of each pool, and its rule.

Accelerator nodes run the kubelet's static CPU manager and a topology manager
(:mod:`eks_inference.charts.node_bootstrap` writes them into every accelerator pool's bootstrap), so
a serving pod's exclusive cores, memory and devices land on as few NUMA nodes as the pool's
policy allows. The policy defaults per instance family (:data:`TOPOLOGY_POLICIES`), and from what
the pool hosts: a pool of a single-NUMA-node family that a platform places a replica on that
cannot sit on one NUMA node (Llama-3.1-70B at ``tensor_parallel_size: 8`` on g6e.48xlarge)
runs ``restricted`` instead, which admits it on the fewest nodes
(:func:`chosen_policy`; ``eks-inference plan`` says so, with the cost). A pool may set its
own (``topology_manager_policy``), which wins: where it admits only pods on one NUMA node, a
deployment whose replica cannot sit on one is refused when the platform validates
(:func:`numa_problems`), naming the degree and the pool's policy, rather than left Pending
with a ``TopologyAffinityError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from eks_inference.catalog import Accelerator, InstanceType, sizing
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.specification.validation import Problems

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.node_pools import NodePool, TopologyManagerPolicy


@dataclass(frozen=True)
class TopologyPolicy:
    """The kubelet's topology manager policy and scope for a pool's nodes, and why.

    Scope ``pod``: a server's init containers and containers are aligned together.
    """

    policy: TopologyManagerPolicy
    scope: Literal["pod", "container"]
    reason: str


_ONE_NODE = TopologyPolicy(
    "single-numa-node",
    "pod",
    "PCIe-only GPUs: a replica across sockets pays the inter-socket link on every all-reduce",
)
_FEWEST_NODES = TopologyPolicy(
    "restricted",
    "pod",
    "devices joined by their own fabric across NUMA nodes: what fits one node is aligned "
    "there, a larger replica spans the fewest",
)
# Per instance family. L40S (g6e) and A10G (g5) talk over PCIe only, and the NVIDIA device
# plugin reports each GPU's NUMA node: a tensor-parallel group split across sockets would
# send every all-reduce through the inter-socket link, so replicas stay on one node. A100s
# (p4d) are joined by NVSwitch and Inferentia2 chips (inf2) by NeuronLink across the NUMA
# boundary, so a replica of all of a node's devices loses little by spanning both nodes,
# while its host threads still gain from local memory where it fits one.
TOPOLOGY_POLICIES: dict[str, TopologyPolicy] = {
    "g6e": _ONE_NODE,
    "g5": _ONE_NODE,
    "p4d": _FEWEST_NODES,
    # Eight GPUs over two sockets, like p4d: a replica of all eight spans both NUMA nodes.
    "p5": _FEWEST_NODES,
    "p5en": _FEWEST_NODES,
    "inf2": _FEWEST_NODES,
}


def family_policy(instance: InstanceType) -> TopologyPolicy | None:
    """The default policy of ``instance``'s family (``None``: CPU nodes, left alone)."""
    if instance.accelerator is Accelerator.NONE:
        return None
    try:
        return TOPOLOGY_POLICIES[instance.family]
    except KeyError:
        raise KeyError(
            f"no topology manager policy for the {instance.family} family; add it to "
            "eks_inference.specification.numa.TOPOLOGY_POLICIES"
        ) from None


# The policy a platform gives a pool of a single-NUMA-node family that hosts a replica no
# NUMA node holds: the one that admits it, aligned on the fewest nodes.
_SPANNING_POLICY: TopologyManagerPolicy = "restricted"
_SPANNING_REASON = (
    "chosen for a replica it hosts that no NUMA node holds: it spans the fewest, and each "
    "of its all-reduces crosses the inter-socket link"
)


def pool_policy(pool: NodePool) -> TopologyPolicy | None:
    """The policy of ``pool``'s nodes: its ``topology_manager_policy`` (set on the pool, or
    chosen by its platform, :func:`chosen_policy`), or its family's."""
    default = family_policy(pool.instance)
    if default is None or pool.topology_manager_policy in (None, default.policy):
        return default
    explicit = "topology_manager_policy" in pool.model_fields_set
    reason = "set on the pool" if explicit else _SPANNING_REASON
    return TopologyPolicy(pool.topology_manager_policy, default.scope, reason)


def spanning_replicas(
    pool: NodePool, deployments: Sequence[ModelDeploymentSpec]
) -> list[tuple[ModelDeploymentSpec, str]]:
    """The deployments on ``pool`` whose replica no NUMA node of it holds, with how it spans
    them (:func:`numa_span`)."""
    found = []
    for deployment in deployments:
        if deployment.instance_type in pool.instance_types:
            span = numa_span(deployment.instance, deployment.tensor_parallel_size)
            if span is not None:
                found.append((deployment, span))
    return found


def chosen_policy(
    pool: NodePool, deployments: Sequence[ModelDeploymentSpec]
) -> TopologyManagerPolicy | None:
    """The policy a platform gives ``pool``, which sets none, for the ``deployments`` it
    places on it; ``None``: its family's.

    A family's ``single-numa-node`` stays where every replica the pool hosts fits one NUMA
    node, which is the best alignment there is; where one cannot, it would refuse that
    replica's pods, so the pool runs ``restricted``, which admits it on the fewest nodes and
    still aligns every replica that fits one. A policy set on the pool is kept (and checked,
    :func:`numa_problems`).
    """
    if pool.topology_manager_policy is not None:
        return None
    default = family_policy(pool.instance)
    if default is None or default.policy != "single-numa-node":
        return None
    return _SPANNING_POLICY if spanning_replicas(pool, deployments) else None


def chosen_policy_note(pool: NodePool, deployments: Sequence[ModelDeploymentSpec]) -> str | None:
    """What ``plan`` says of a policy the platform chose for ``pool``, and what it costs;
    ``None`` for a pool on its family's policy or its own."""
    if "topology_manager_policy" in pool.model_fields_set:
        return None
    policy, default = pool_policy(pool), family_policy(pool.instance)
    if policy is None or default is None or policy.policy == default.policy:
        return None
    spanning = spanning_replicas(pool, deployments)
    names = ", ".join(repr(d.name) for d, _ in spanning)
    span = spanning[0][1] if spanning else "a replica spans its NUMA nodes"
    return (
        f"pool {pool.name!r} runs topology_manager_policy: {policy.policy}, not its family's "
        f"{default.policy}, for deployments {names}: {span}, which {default.policy} would "
        f"refuse; the cost: {default.reason}; set topology_manager_policy on the pool to "
        "choose, or use a tensor_parallel_size that fits one NUMA node"
    )


def replica_devices(instance: InstanceType, tensor_parallel_size: int) -> int:
    """Accelerator devices one replica uses: GPUs, or Inferentia2 chips (two cores each)."""
    per_device = max(instance.cores_per_device, 1)
    return -(-tensor_parallel_size // per_device)


def numa_span(instance: InstanceType, tensor_parallel_size: int) -> str | None:
    """How a replica of ``tensor_parallel_size`` spans ``instance``'s NUMA nodes, or
    ``None`` when its devices and whole CPUs fit one."""
    hardware = node_hardware(instance.name)
    if hardware.numa_nodes == 1:
        return None
    devices = replica_devices(instance, tensor_parallel_size)
    per_node = sizing.replicas_per_node(instance, tensor_parallel_size)
    cpus = sizing.pod_resources(instance, per_node).cpu_millis // 1000
    node_cpus = instance.vcpus // hardware.numa_nodes
    if devices <= hardware.devices_per_numa_node and cpus <= node_cpus:
        return None
    return (
        f"a replica of {devices} {instance.accelerator_model} and {cpus} CPUs spans the NUMA "
        f"nodes of {instance.name} ({hardware.numa_nodes} nodes of "
        f"{hardware.devices_per_numa_node} devices and {node_cpus} vCPUs)"
    )


def numa_problems(
    deployment: ModelDeploymentSpec,
    index: int,
    pool: NodePool,
    pool_index: int,
    problems: Problems,
) -> None:
    """A replica of ``deployment`` sits on one NUMA node where ``pool``'s own policy demands
    it (a policy the pool does not set is chosen to admit it, :func:`chosen_policy`)."""
    policy = pool_policy(pool)
    if policy is None or pool.topology_manager_policy != "single-numa-node":
        return
    instance = deployment.instance
    span = numa_span(instance, deployment.tensor_parallel_size)
    if span is None:
        return
    fitting = [
        d
        for d in sizing.usable_tensor_parallel(deployment.model.architecture, instance)
        if numa_span(instance, d) is None
    ]
    degrees = f"tensor_parallel_size {' or '.join(map(str, fitting))}, or " if fitting else ""
    problems.add(
        ("deployments", index, "tensor_parallel_size"),
        f"{span}, and pool {pool.name!r} admits only pods on one NUMA node "
        f"(single-numa-node: {policy.reason}); use {degrees}topology_manager_policy: "
        f"restricted on node_pools.{pool_index} to let the replica span them",
        deployment.tensor_parallel_size,
    )
