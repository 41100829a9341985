"""What a pod of a multi-node group gets on nodes with Elastic Fabric Adapter attached.

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
"""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference import names
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool


@dataclass(frozen=True)
class Fabric:
    """The EFA interfaces a group's pod takes, and whether they reach GPU memory directly."""

    interfaces: int
    rdma: bool

    def resources(self) -> dict[str, str]:
        """The pod's EFA request (and limit): every interface of its node."""
        return {names.EFA_RESOURCE: str(self.interfaces)}

    def environment(self) -> dict[str, str]:
        """libfabric's settings for the instance type (see the module)."""
        values = {"FI_PROVIDER": "efa"}
        if self.rdma:
            values["FI_EFA_USE_DEVICE_RDMA"] = "1"
        return values


def fabric(spec: ModelDeploymentSpec, pool: NodePool) -> Fabric | None:
    """The fabric of ``spec``'s pods on ``pool``: for a multi-node group on nodes with EFA
    attached; None for a single-node replica, which talks to no other node, and for a group
    on nodes without EFA (``multi_node.allow_without_efa``), whose stages talk TCP."""
    if spec.multi_node is None or not pool.efa_interfaces:
        return None
    return Fabric(interfaces=pool.efa_interfaces, rdma=pool.instance.efa_rdma)
