"""The AWS EFA device plugin (node pools with ``efa``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eks_inference import versions
from eks_inference.constructs._stacks import region_of, stack_of
from eks_inference.constructs.addons.helm import (
    CRITICAL_ADDONS_TOLERATION,
    SYSTEM_NAMESPACE,
    HelmAddon,
    HelmRelease,
    pool_tolerations,
)
from eks_inference.constructs.addons.registry import PlatformAddons
from eks_inference.names import NODE_POOL_LABEL
from eks_inference.specification.node_pools import NodePool

IMAGE_REPOSITORY = "eks/aws-efa-k8s-device-plugin"


@dataclass(frozen=True)
class EfaDevicePluginOptions:
    """How :class:`EfaDevicePlugin` is installed."""

    chart: versions.HelmChartVersion = versions.EFA_DEVICE_PLUGIN_CHART
    """Default ``versions.EFA_DEVICE_PLUGIN_CHART``: the aws/eks-charts release of the
    plugin."""
    image_tag: str = versions.EFA_DEVICE_PLUGIN_IMAGE_TAG
    """Default ``versions.EFA_DEVICE_PLUGIN_IMAGE_TAG``: that chart's own image, written out
    so the image is pinned here rather than by the chart."""
    registry_account: str = versions.EKS_IMAGE_REGISTRY_ACCOUNT
    """Default ``versions.EKS_IMAGE_REGISTRY_ACCOUNT``: the account of the EKS image registry
    of the stack's region that the image is pulled from; set the account of your region's
    registry where EKS serves its images from another (opt-in regions, China, GovCloud)."""
    release: str = "aws-efa-k8s-device-plugin"
    """Default ``aws-efa-k8s-device-plugin``: the Helm release name."""


def efa_pools(pools: Iterable[NodePool]) -> list[NodePool]:
    """The pools of ``pools`` whose nodes carry EFA interfaces."""
    return [p for p in pools if p.efa_interfaces]


class EfaDevicePlugin(HelmAddon[EfaDevicePluginOptions]):
    """The EFA device plugin DaemonSet on the cluster's pools with ``efa`` only
    (``kube-system``).

    It advertises each node's EFA interfaces as ``vpc.amazonaws.com/efa``, which the pods of a
    multi-node group request. The chart places its pods by required node affinity on one
    label key and a list of values (``supportedInstanceLabels``; by default every instance
    type with EFA): here the pool label and the names of the pools with ``efa``, so it never
    runs on a node whose pool attaches no EFA, even one of the same instance type. It
    tolerates those pools' taints (the chart itself tolerates only ``CriticalAddonsOnly``).
    Its image is pulled from the EKS image registry of the stack's region. Raises
    ``ValueError`` on a cluster without a pool with ``efa``.
    """

    OPTIONS = EfaDevicePluginOptions

    def _release(self, platform: PlatformAddons, options: EfaDevicePluginOptions) -> HelmRelease:
        pools = efa_pools(platform.cluster.node_pools)
        if not pools:
            raise ValueError("EfaDevicePlugin needs a cluster with a node pool with efa")
        stack = stack_of(platform.cluster)
        registry = f"{options.registry_account}.dkr.ecr.{region_of(stack)}.{stack.url_suffix}"
        return HelmRelease(
            pinned=options.chart,
            release=options.release,
            namespace=SYSTEM_NAMESPACE,
            values={
                "image": {"repository": f"{registry}/{IMAGE_REPOSITORY}", "tag": options.image_tag},
                "supportedInstanceLabels": {
                    "keys": [NODE_POOL_LABEL],
                    "values": [pool.name for pool in pools],
                },
                # The chart's template already tolerates CriticalAddonsOnly.
                "tolerations": [
                    t for t in pool_tolerations(pools) if t != CRITICAL_ADDONS_TOLERATION
                ],
            },
        )

    @staticmethod
    def wanted(platform: PlatformAddons) -> bool:
        """Whether the platform's cluster has a pool with ``efa`` to run it on."""
        return bool(efa_pools(platform.cluster.node_pools))
