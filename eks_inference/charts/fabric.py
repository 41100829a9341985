"""What a pod that talks to other nodes gets on nodes with Elastic Fabric Adapter attached:
a pod of a multi-node group, or a prefill or decode worker of a disaggregated graph whose
KV cache crosses nodes.

A group's pipeline stages hand activations to each other through NCCL. On nodes whose pool
attaches EFA (:attr:`~eks_inference.specification.node_pools.NodePool.efa_interfaces`), each
pod of the group takes every EFA interface of its node (``vpc.amazonaws.com/efa``, which the
EFA device plugin advertises and mounts into the container as ``/dev/infiniband/uverbs*``),
as it takes every GPU: NCCL spreads a node's traffic over all of its interfaces, and a second
pod could not use them anyway. The server image then must carry libfabric and the aws-ofi-nccl
plugin (:data:`~eks_inference.versions.VLLM_EFA_IMAGE`); without the plugin NCCL falls back
to its socket transport and says nothing.

The libfabric settings follow the instance type:

* ``FI_PROVIDER=efa``: libfabric uses the EFA provider or fails, rather than quietly picking
  its TCP provider when the device is missing;
* ``FI_EFA_USE_DEVICE_RDMA=1`` where the instance reads and writes GPU memory over EFA
  directly (GPUDirect RDMA: p4d, p5, p5en; ``InstanceType.efa_rdma``); elsewhere (g6e) the
  traffic is staged through host memory, and asking for RDMA would fail.

A worker of a graph across nodes sends and receives KV caches through NIXL's libfabric
backend, and shares its node with other workers: it takes its share of the node's interfaces,
as of its GPUs (:func:`efa_share`: interfaces x its GPUs / the node's GPUs, which the engine's
rules hold to a whole number of at least one), so each worker's transfers leave through the
interfaces nearest its GPUs' share of the node. On top of the provider's settings, Dynamo's
EFA guide (ai-dynamo/dynamo, ``docs/kubernetes/cloud-providers/eks/efa.md``) requires libfabric's
shared-memory transfers off on every worker (``FI_EFA_ENABLE_SHM_TRANSFER=0``,
``FI_EFA_ENABLE_SHM=0``; ``kv_transfer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from eks_inference import names
from eks_inference.catalog import InstanceType
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import kv_cache_crosses_nodes
from eks_inference.specification.node_pools import NodePool


@dataclass(frozen=True)
class Fabric:
    """The EFA interfaces a pod takes, whether they reach GPU memory directly, and whether
    the pod moves KV caches over them (NIXL) rather than a group's activations (NCCL)."""

    interfaces: int
    rdma: bool
    kv_transfer: bool = False

    def resources(self) -> dict[str, str]:
        """The pod's EFA request (and limit): its interfaces of the node."""
        return {names.EFA_RESOURCE: str(self.interfaces)}

    def environment(self) -> dict[str, str]:
        """libfabric's settings for the instance type and the transfer (see the module)."""
        values = {"FI_PROVIDER": "efa"}
        if self.rdma:
            values["FI_EFA_USE_DEVICE_RDMA"] = "1"
        if self.kv_transfer:
            values |= {"FI_EFA_ENABLE_SHM_TRANSFER": "0", "FI_EFA_ENABLE_SHM": "0"}
        return values


def efa_share(instance: InstanceType, gpus: int) -> Fraction:
    """The EFA interfaces of one ``instance`` that a pod on ``gpus`` of its GPUs takes: its
    share of them, as of the GPUs (a whole number of at least one where it can be taken)."""
    return Fraction(instance.efa_interfaces * gpus, instance.cores)


def fabric(spec: ModelDeploymentSpec, pool: NodePool) -> Fabric | None:
    """The fabric of ``spec``'s pods on ``pool`` (``spec`` at the degree of the pod): for a
    multi-node group on nodes with EFA attached, every interface; for a worker of a graph
    whose KV cache crosses nodes, its share; None for a pod that talks to no other node, and
    for a group on nodes without EFA (``multi_node.allow_without_efa``), whose stages talk
    TCP."""
    if not pool.efa_interfaces:
        return None
    rdma = pool.instance.efa_rdma
    if spec.multi_node is not None:
        return Fabric(interfaces=pool.efa_interfaces, rdma=rdma)
    if kv_cache_crosses_nodes(spec):
        share = efa_share(pool.instance, spec.tensor_parallel_size)
        return Fabric(interfaces=int(share), rdma=rdma, kv_transfer=True)
    return None
