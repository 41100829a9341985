"""The LeaderWorkerSet controller, which runs the groups of a replica across nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eks_inference import names, versions
from eks_inference.constructs.addons.helm import HelmAddon, HelmRelease, on_pool
from eks_inference.constructs.addons.registry import PlatformAddons, Provides

# The custom resource of the LWS chart the deployments render (the chart also ships the
# DisaggregatedSet CRDs, which nothing here uses and which the platform does not record).
LWS_CRDS = (names.LEADERWORKERSET_CRD,)


@dataclass(frozen=True)
class LeaderWorkerSetOptions:
    """How :class:`LeaderWorkerSet` is installed."""

    chart: versions.HelmChartVersion = versions.LWS_CHART
    """Default ``versions.LWS_CHART``: the LeaderWorkerSet release whose API
    (``leaderworkerset.x-k8s.io/v1``) the charts render."""
    image_tag: str = versions.LWS_IMAGE_TAG
    """Default ``versions.LWS_IMAGE_TAG``: the controller image of that release, instead of
    the chart's default ``main`` tag."""
    release: str = "lws"
    """Default ``lws``: the Helm release name."""


class LeaderWorkerSet(HelmAddon[LeaderWorkerSetOptions]):
    """The LeaderWorkerSet controller and its CRD, on the system pool, in
    ``names.LWS_NAMESPACE``; created only when a deployment serves across nodes
    (``multi_node``).

    The chart installs the LeaderWorkerSet CRD (:data:`LWS_CRDS`), which it registers with
    the platform: a deployment's LeaderWorkerSet is applied after it. Its image is pinned
    and pulled only if not present, replacing the chart's ``main``/``Always``.
    """

    OPTIONS = LeaderWorkerSetOptions
    PROVIDES: ClassVar[Provides] = Provides(crds=LWS_CRDS)

    def _release(self, platform: PlatformAddons, options: LeaderWorkerSetOptions) -> HelmRelease:
        return HelmRelease(
            pinned=options.chart,
            release=options.release,
            namespace=names.LWS_NAMESPACE,
            create_namespace=True,
            # The CRDs come with the chart (its crds/ directory).
            skip_crds=False,
            values={
                "image": {"manager": {"tag": options.image_tag, "pullPolicy": "IfNotPresent"}},
                **on_pool(platform.cluster.system_pool),
            },
        )
