"""How a pool's nodes are bootstrapped beyond EKS's defaults: local NVMe, CPU and NUMA pinning.

Nodes boot the EKS-optimized AL2023 AMI, whose ``nodeadm`` reads ``NodeConfig`` documents
from the user data and merges them with the one EKS (managed node groups) or Karpenter writes
(``node.eks.aws/v1alpha1``, the schema of ``nodeadm/crds`` at the pinned AMI release). Two
things are added, the same way in both provisioning modes:

- **Local NVMe.** Where the instance has an NVMe instance store (every g6e size; Inferentia2
  has none), ``instance.localStorage.strategy: RAID0`` stripes its disks into one XFS file
  system and bind-mounts the kubelet's and containerd's directories onto it: images unpack,
  and every emptyDir (the Mountpoint cache, vLLM's and torch's compile caches under the
  server's HOME, the image loader's copy) lives on NVMe, each still bounded by its own size
  limit. Karpenter's EC2NodeClass says it with ``instanceStorePolicy: RAID0``, which it turns
  into the same NodeConfig field.
- **NUMA alignment** on accelerator pools: the kubelet's static CPU manager gives a
  Guaranteed pod with whole CPUs exclusive cores, and its topology manager puts those cores,
  the pod's memory and its accelerators on as few NUMA nodes as possible, which is what the
  design documents do by hand with ``numactl --cpunodebind --membind`` on inf2.48xlarge.
  The policy is chosen per accelerator family (:data:`TOPOLOGY_POLICIES`), the scope is the
  pod (its init containers and server together). The cost: exclusive cores are no longer
  shared, so a node's CPUs not given whole to its serving pods serve only the rest, and a
  pod the policy cannot align is refused admission (for ``single-numa-node``, which the spec
  refuses first: :func:`numa_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import yaml

from eks_inference import sizing
from eks_inference.catalog import Accelerator, InstanceType
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.spec.validation import Problems

if TYPE_CHECKING:
    from eks_inference.spec.deployment import ModelDeploymentSpec
    from eks_inference.spec.node_pools import NodePool

NODE_CONFIG_API_VERSION = "node.eks.aws/v1alpha1"
NODE_CONFIG_CONTENT_TYPE = "application/node.eks.aws"
LOCAL_STORAGE_STRATEGY = "RAID0"
_MIME_BOUNDARY = "EKSINFERENCE"


@dataclass(frozen=True)
class TopologyPolicy:
    """The kubelet's topology manager policy and scope for one accelerator family, and why."""

    policy: Literal["single-numa-node", "restricted", "best-effort"]
    scope: Literal["pod", "container"]
    reason: str


TOPOLOGY_POLICIES: dict[Accelerator, TopologyPolicy] = {
    # L40S GPUs talk over PCIe only (no NVLink): a tensor-parallel group split across sockets
    # sends every all-reduce through the inter-socket link, and its CPU threads feed GPUs on
    # the far socket. The NVIDIA device plugin reports each GPU's NUMA node, so the kubelet
    # can keep a replica on one; replicas that cannot be are refused at validation.
    Accelerator.NVIDIA: TopologyPolicy(
        "single-numa-node",
        "pod",
        "PCIe-only L40S: a replica across sockets pays the inter-socket link on every "
        "all-reduce; one NUMA node per replica, or none",
    ),
    # Inferentia2 chips are joined by NeuronLink across the NUMA boundary, so a replica of
    # all 24 cores of an inf2.48xlarge loses little by spanning both nodes; its host threads
    # still gain from local memory. restricted aligns every replica that fits one node and
    # admits a larger one on the fewest nodes that hold it.
    Accelerator.NEURON: TopologyPolicy(
        "restricted",
        "pod",
        "NeuronLink joins the chips across NUMA nodes: align whatever fits one node, admit "
        "whole-node replicas on the fewest",
    ),
}


def topology_policy(instance: InstanceType) -> TopologyPolicy | None:
    """The topology manager policy of nodes of ``instance`` (``None``: CPU nodes, left alone)."""
    return TOPOLOGY_POLICIES.get(instance.accelerator)


def formats_instance_store(pool: NodePool) -> bool:
    """Whether the pool's nodes stripe and mount their NVMe instance store (when they have
    one: every instance type of the pool must, since nodes of any of them may launch)."""
    return all(node_hardware(t).has_instance_store for t in pool.instance_types)


def kubelet_config(pool: NodePool) -> dict[str, str]:
    """The KubeletConfiguration fields set on ``pool``'s nodes (none on CPU pools)."""
    policy = topology_policy(pool.instance)
    if policy is None:
        return {}
    return {
        "cpuManagerPolicy": "static",
        "topologyManagerPolicy": policy.policy,
        "topologyManagerScope": policy.scope,
    }


def node_config(pool: NodePool, *, local_storage: bool = True) -> dict[str, Any] | None:
    """The NodeConfig the pool's nodes merge with their own, or ``None`` when it adds nothing.

    ``local_storage=False`` leaves the instance store out, for Karpenter, whose
    ``instanceStorePolicy`` writes it.
    """
    spec: dict[str, Any] = {}
    if local_storage and formats_instance_store(pool):
        spec["instance"] = {"localStorage": {"strategy": LOCAL_STORAGE_STRATEGY}}
    kubelet = kubelet_config(pool)
    if kubelet:
        spec["kubelet"] = {"config": kubelet}
    if not spec:
        return None
    return {"apiVersion": NODE_CONFIG_API_VERSION, "kind": "NodeConfig", "spec": spec}


def node_config_yaml(config: dict[str, Any]) -> str:
    """A NodeConfig as the YAML document nodeadm reads."""
    return "---\n" + yaml.safe_dump(config, sort_keys=False)


def mime_user_data(config: dict[str, Any]) -> str:
    """User data for a managed node group's launch template: a MIME multi-part archive with
    one NodeConfig part, which EKS merges with the NodeConfig it writes itself."""
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{_MIME_BOUNDARY}"\n'
        "\n"
        f"--{_MIME_BOUNDARY}\n"
        f"Content-Type: {NODE_CONFIG_CONTENT_TYPE}\n"
        "\n"
        f"{node_config_yaml(config)}"
        "\n"
        f"--{_MIME_BOUNDARY}--\n"
    )


def replica_devices(spec: ModelDeploymentSpec) -> int:
    """Accelerator devices one replica uses: GPUs, or Inferentia2 chips (two cores each)."""
    per_device = max(spec.instance.cores_per_device, 1)
    return -(-spec.tensor_parallel_size // per_device)


def numa_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """Under ``single-numa-node`` a replica's accelerators and CPUs fit one NUMA node."""
    policy = topology_policy(spec.instance)
    if policy is None or policy.policy != "single-numa-node":
        return
    hardware = node_hardware(spec.instance_type)
    if hardware.numa_nodes == 1:
        return
    devices = replica_devices(spec)
    cpus = sizing.pod_resources(spec.instance, spec.replicas_per_node).cpu_millis / 1000
    node_cpus = spec.instance.vcpus // hardware.numa_nodes
    if devices <= hardware.devices_per_numa_node and cpus <= node_cpus:
        return
    fitting = [
        d
        for d in spec.instance.valid_tensor_parallel
        if d <= hardware.devices_per_numa_node and d < spec.tensor_parallel_size
    ]
    fix = (
        f"use tensor_parallel_size {fitting[-1]} (more replicas per node)"
        if fitting
        else "use an instance type with one NUMA node"
    )
    problems.add(
        ("tensor_parallel_size",),
        f"a replica of {devices} {spec.instance.accelerator_model} and {cpus:g} CPUs spans "
        f"the NUMA nodes of {spec.instance_type} ({hardware.numa_nodes} nodes of "
        f"{hardware.devices_per_numa_node} devices and {node_cpus} vCPUs), and its nodes' "
        f"topology manager admits only pods on one ({policy.reason}); {fix}",
        spec.tensor_parallel_size,
    )
