"""The Neuron device plugin, scheduler extension and node problem detector (Inferentia2)."""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference import names, versions
from eks_inference.catalog import Accelerator
from eks_inference.constructs.addons.helm import (
    SYSTEM_NAMESPACE,
    HelmAddon,
    HelmRelease,
    on_pool,
    pool_tolerations,
    pools_with,
)
from eks_inference.constructs.addons.registry import PlatformAddons


@dataclass(frozen=True)
class NeuronDevicePluginOptions:
    """How :class:`NeuronDevicePlugin` is installed; every default is what the platform is
    tested with."""

    chart: versions.HelmChartVersion = versions.NEURON_HELM_CHART
    """Default ``versions.NEURON_HELM_CHART``: the release whose device plugin and scheduler
    extension match the pinned Neuron SDK of the serving images."""
    release: str = "neuron"
    """Default ``neuron``: the Helm release name."""


class NeuronDevicePlugin(HelmAddon[NeuronDevicePluginOptions]):
    """The Neuron Helm chart on the cluster's Neuron pools (``kube-system``).

    * the **device plugin** DaemonSet on the Neuron pools' instance types only, tolerating
      their taints, which advertises NeuronCores and Neuron devices to the scheduler;
    * the **scheduler extension** and a second kube-scheduler named
      ``names.NEURON_SCHEDULER_NAME`` (image of the cluster's Kubernetes version), which
      place a pod on contiguous NeuronCores: needed whenever a pod takes some cores of a node.
      Both run on the system pool;
    * the **Neuron node problem detector**, in ``kube-system`` too (the chart does not create
      its default namespace).

    Raises ``ValueError`` on a cluster without a Neuron pool: there would be nothing to run
    it on (:class:`~eks_inference.constructs.InferenceAddons` creates it only with one).
    """

    OPTIONS = NeuronDevicePluginOptions

    def _release(self, platform: PlatformAddons, options: NeuronDevicePluginOptions) -> HelmRelease:
        cluster = platform.cluster
        pools = pools_with(cluster.node_pools, Accelerator.NEURON)
        if not pools:
            raise ValueError("NeuronDevicePlugin needs a cluster with a Neuron node pool")
        on_system = on_pool(cluster.system_pool)
        return HelmRelease(
            pinned=options.chart,
            release=options.release,
            namespace=SYSTEM_NAMESPACE,
            values={
                # The device plugin and the problem detector select nodes by these types.
                "neuronInstances": sorted({t for p in pools for t in p.instance_types}),
                "devicePlugin": {"tolerations": pool_tolerations(pools)},
                "scheduler": {
                    "enabled": True,
                    **on_system,
                    "customScheduler": {
                        "enabled": True,
                        "fullnameOverride": names.NEURON_SCHEDULER_NAME,
                        "image": {
                            "repository": versions.KUBE_SCHEDULER_IMAGE,
                            "tag": cluster.release.kube_scheduler_image_tag,
                        },
                        **on_system,
                    },
                },
                # Everything in kube-system: the chart does not create the detector's own
                # default namespace.
                "npd": {"namespaceOverride": SYSTEM_NAMESPACE},
            },
        )

    @staticmethod
    def wanted(platform: PlatformAddons) -> bool:
        """Whether the platform's cluster has a Neuron pool to run it on."""
        return bool(pools_with(platform.cluster.node_pools, Accelerator.NEURON))
