"""The KubeRay operator, which runs RayServices (and RayClusters and RayJobs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eks_inference import names, versions
from eks_inference.constructs.addons.helm import HelmAddon, HelmRelease, on_pool
from eks_inference.constructs.addons.registry import PlatformAddons, Provides

# The custom resources the KubeRay operator chart installs (``skip_crds=False``).
KUBERAY_CRDS = (
    names.RAYSERVICE_CRD,
    "rayclusters.ray.io",
    "rayjobs.ray.io",
    "raycronjobs.ray.io",
)


@dataclass(frozen=True)
class KubeRayOptions:
    """How :class:`KubeRay` is installed."""

    chart: versions.HelmChartVersion = versions.KUBERAY_OPERATOR_CHART
    """Default ``versions.KUBERAY_OPERATOR_CHART``: the operator release whose RayService
    API the charts render."""
    image_tag: str = versions.KUBERAY_OPERATOR_IMAGE_TAG
    """Default ``versions.KUBERAY_OPERATOR_IMAGE_TAG``: the operator image of that release,
    pinned rather than left to the chart's default."""
    release: str = "kuberay-operator"
    """Default ``kuberay-operator``: the Helm release name."""


class KubeRay(HelmAddon[KubeRayOptions]):
    """The KubeRay operator and its CRDs, on the system pool, in ``names.KUBERAY_NAMESPACE``.

    The chart installs the RayService, RayCluster, RayJob and RayCronJob CRDs
    (:data:`KUBERAY_CRDS`), which it registers with the platform: a deployment's RayService
    is applied after it.
    """

    OPTIONS = KubeRayOptions
    PROVIDES: ClassVar[Provides] = Provides(crds=KUBERAY_CRDS)

    def _release(self, platform: PlatformAddons, options: KubeRayOptions) -> HelmRelease:
        return HelmRelease(
            pinned=options.chart,
            release=options.release,
            namespace=names.KUBERAY_NAMESPACE,
            create_namespace=True,
            # The RayCluster/RayService/RayJob CRDs come with the chart.
            skip_crds=False,
            values={
                "image": {"tag": options.image_tag},
                **on_pool(platform.cluster.system_pool),
            },
        )
