"""The NVIDIA device plugin (GPU pools)."""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference import versions
from eks_inference.catalog import Accelerator
from eks_inference.constructs.addons.helm import (
    SYSTEM_NAMESPACE,
    HelmAddon,
    HelmRelease,
    pool_affinity,
    pool_tolerations,
    pools_with,
)
from eks_inference.constructs.addons.registry import PlatformAddons


@dataclass(frozen=True)
class NvidiaDevicePluginOptions:
    """How :class:`NvidiaDevicePlugin` is installed."""

    chart: versions.HelmChartVersion = versions.NVIDIA_DEVICE_PLUGIN_CHART
    """Default ``versions.NVIDIA_DEVICE_PLUGIN_CHART``: the release tested with the EKS
    AL2023 NVIDIA AMI the GPU nodes boot."""
    release: str = "nvidia-device-plugin"
    """Default ``nvidia-device-plugin``: the Helm release name."""


class NvidiaDevicePlugin(HelmAddon[NvidiaDevicePluginOptions]):
    """The NVIDIA device plugin DaemonSet on the cluster's GPU pools only (``kube-system``).

    It advertises ``nvidia.com/gpu`` to the scheduler. It runs on the GPU pools by required
    node affinity on their labels (which include ``nvidia.com/gpu.present=true``) and
    tolerates their taints, so it never starts on a CPU or Neuron node. Raises ``ValueError``
    on a cluster without a GPU pool.
    """

    OPTIONS = NvidiaDevicePluginOptions

    def _release(self, platform: PlatformAddons, options: NvidiaDevicePluginOptions) -> HelmRelease:
        pools = pools_with(platform.cluster.node_pools, Accelerator.NVIDIA)
        if not pools:
            raise ValueError("NvidiaDevicePlugin needs a cluster with a GPU node pool")
        return HelmRelease(
            pinned=options.chart,
            release=options.release,
            namespace=SYSTEM_NAMESPACE,
            values={
                "affinity": pool_affinity(pools),
                "tolerations": pool_tolerations(pools),
            },
        )

    @staticmethod
    def wanted(platform: PlatformAddons) -> bool:
        """Whether the platform's cluster has a GPU pool to run it on."""
        return bool(pools_with(platform.cluster.node_pools, Accelerator.NVIDIA))
