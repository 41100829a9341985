"""How a pool's nodes are bootstrapped beyond EKS's defaults: local NVMe, CPU and NUMA pinning.

Nodes boot the EKS-optimized AL2023 AMI, whose ``nodeadm`` reads ``NodeConfig`` documents
from the user data and merges them with the one EKS (managed node groups) or Karpenter writes
(``node.eks.aws/v1alpha1``, the schema of ``nodeadm/crds`` at the pinned AMI release). Two
things are added, the same way in both provisioning modes:

- **Local NVMe.** Where the instance has an NVMe instance store (every g6e size; Inferentia2
  has none), ``instance.localStorage.strategy: RAID0`` stripes its disks into one XFS file
  system and bind-mounts the kubelet's and containerd's directories onto it: images unpack,
  and every emptyDir (the Mountpoint cache, vLLM's and torch's compile caches under the
  server's HOME, the image loader's copy, LMCache's disk tier) lives on NVMe, each still
  bounded by its own size limit, and the node's ephemeral storage is the array's. The
  kubelet's directory always goes there: nodeadm runs ``setup-local-disks raid0`` and can
  leave out only containerd's, the pod logs' and SOCI's directories (``disabledMounts``;
  ``nodeadm/internal/system/local_disk.go`` and ``templates/al2023/runtime/bin/
  setup-local-disks``, which bind-mounts ``/var/lib/kubelet`` unless ``--no-bind-kubelet``,
  at the pinned release tag of awslabs/amazon-eks-ami), and this sets neither those nor a
  ``mountPath``. Karpenter's EC2NodeClass says it with ``instanceStorePolicy: RAID0``, which
  it turns into the same NodeConfig field.
- **NUMA alignment** on accelerator pools: the kubelet's static CPU manager gives a
  Guaranteed pod with whole CPUs exclusive cores, and its topology manager puts those cores,
  the pod's memory and its accelerators on as few NUMA nodes as possible, which is what the
  design documents do by hand with ``numactl --cpunodebind --membind`` on inf2.48xlarge.
  The policy is chosen per instance family
  (:data:`eks_inference.specification.numa.TOPOLOGY_POLICIES`),
  or set on the pool; the scope is the pod (its init containers and server together). The
  cost: exclusive cores are no longer shared, so a node's CPUs not given whole to its
  serving pods serve only the rest, and a pod the policy cannot align is refused admission
  (for ``single-numa-node``, which the platform refuses first:
  :func:`eks_inference.specification.numa.numa_problems`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.specification.numa import pool_policy

if TYPE_CHECKING:
    from eks_inference.specification.node_pools import NodePool

NODE_CONFIG_API_VERSION = "node.eks.aws/v1alpha1"
NODE_CONFIG_CONTENT_TYPE = "application/node.eks.aws"
LOCAL_STORAGE_STRATEGY = "RAID0"
_MIME_BOUNDARY = "EKSINFERENCE"


def formats_instance_store(pool: NodePool) -> bool:
    """Whether the pool's nodes stripe and mount their NVMe instance store (when they have
    one: every instance type of the pool must, since nodes of any of them may launch)."""
    return all(node_hardware(t).has_instance_store for t in pool.instance_types)


def kubelet_config(pool: NodePool) -> dict[str, str]:
    """The KubeletConfiguration fields set on ``pool``'s nodes (none on CPU pools)."""
    policy = pool_policy(pool)
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
