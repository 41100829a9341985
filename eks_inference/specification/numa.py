"""NUMA alignment of model replicas: the kubelet topology policy of each pool, and its rule.

Accelerator nodes run the kubelet's static CPU manager and a topology manager
(:mod:`eks_inference.charts.node_bootstrap` writes them into every accelerator pool's bootstrap), so
a serving pod's exclusive cores, memory and devices land on as few NUMA nodes as the pool's
policy allows. The policy defaults per instance family (:data:`TOPOLOGY_POLICIES`); a pool may
set another (``topology_manager_policy``). Where it admits only pods on one NUMA node, a
deployment whose replica cannot sit on one is refused when the platform validates
(:func:`numa_problems`), naming the degree and the pool's policy, rather than left Pending
with a ``TopologyAffinityError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from eks_inference.catalog import Accelerator, InstanceType, sizing
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.specification.validation import Problems

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.node_pools import NodePool

TopologyManagerPolicy = Literal["single-numa-node", "restricted", "best-effort"]
"""The kubelet topology manager policies a pool may run (``none`` would undo alignment)."""


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


def pool_policy(pool: NodePool) -> TopologyPolicy | None:
    """The policy of ``pool``'s nodes: its own ``topology_manager_policy``, or its family's."""
    default = family_policy(pool.instance)
    if default is None or pool.topology_manager_policy in (None, default.policy):
        return default
    return TopologyPolicy(pool.topology_manager_policy, default.scope, "set on the pool")


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
    """A replica of ``deployment`` sits on one NUMA node where ``pool``'s policy demands it."""
    policy = pool_policy(pool)
    if policy is None or policy.policy != "single-numa-node":
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
