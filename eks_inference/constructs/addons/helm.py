"""What the add-ons' Helm releases share: the pinned release, and placement on node pools.

Every chart version comes from :mod:`eks_inference.versions`, and every node selector,
affinity and toleration from the cluster's node pools, so an add-on never names a node label
or a taint of its own. An add-on that is one release is a :class:`HelmAddon`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Required, TypedDict, Unpack

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct
from jsii import JSIIAbstractClass

from eks_inference import versions
from eks_inference.catalog import Accelerator
from eks_inference.constructs.addons.addon import OptionsT, PlatformAddon
from eks_inference.constructs.addons.registry import PlatformAddons
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.specification.node_pools import NodePool

SYSTEM_NAMESPACE = "kube-system"
# Add-ons tolerate this taint too: deprecated, but still honoured by nodes that carry it.
CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}


class HelmSettings(TypedDict, total=False):
    """How a :class:`PinnedHelmChart` installs its chart: ``eks.HelmChart``'s own settings."""

    release: Required[str]
    """The release's name."""
    namespace: Required[str]
    """The release's namespace."""
    create_namespace: bool
    """Default ``False``: whether Helm creates :attr:`namespace`."""
    skip_crds: bool
    """Default ``False``, the CRDs of the chart's ``crds/`` are installed: ``True`` skips them."""
    wait: bool
    """Default ``False``: whether Helm waits for the release's pods to be ready."""
    timeout: Duration
    """Default ``eks.HelmChart``'s: how long Helm may take, waiting and hooks included."""
    values: Mapping[str, Any]
    """Default none, the chart's own: the release's values."""


class PinnedHelmChart(eks.HelmChart):
    """A Helm release of ``pinned`` (chart, repository and version from
    :mod:`eks_inference.versions`) on ``cluster``, installed as ``settings`` say.

    The kubectl Lambda fetches the chart at deploy time, never at synth, so synth needs no
    network and the version deployed is exactly the one pinned. Every add-on's release is
    one of these; an add-on made of one release is a :class:`HelmAddon`. The release is
    applied after each construct of ``after``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        pinned: versions.HelmChartVersion,
        after: Sequence[IConstruct] = (),
        **settings: Unpack[HelmSettings],
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            cluster=cluster.eks_cluster,
            chart=pinned.chart,
            repository=pinned.repository,
            version=pinned.version,
            **settings,
        )
        if after:
            self.node.add_dependency(*after)


class HelmRelease(HelmSettings, total=False):
    """What a :class:`HelmAddon` installs: :class:`PinnedHelmChart`'s arguments but the
    cluster."""

    pinned: Required[versions.HelmChartVersion]
    """The chart, from :mod:`eks_inference.versions`."""
    after: Sequence[IConstruct]
    """Default none: what the release is applied after."""


class HelmAddon(PlatformAddon[OptionsT], PinnedHelmChart, metaclass=JSIIAbstractClass):
    """An add-on that is one Helm release, on the platform's cluster.

    The add-on gives its release (:meth:`_release`: chart, name, namespace, values, from the
    platform and its options); the release registers with the platform as the installer of
    the CRDs the add-on ``PROVIDES``, so what is made of them is applied after it.
    """

    def _build(
        self, scope: Construct, construct_id: str, platform: PlatformAddons, options: OptionsT
    ) -> None:
        release = self._release(platform, options)
        PinnedHelmChart.__init__(self, scope, construct_id, cluster=platform.cluster, **release)
        platform.add_crd_installer(self.PROVIDES.crds, self)

    @abstractmethod
    def _release(self, platform: PlatformAddons, options: OptionsT) -> HelmRelease:
        """The release, on ``platform``'s cluster, with ``options``."""


def on_pool(pool: NodePool) -> dict[str, Any]:
    """Helm values that place a component's pods on ``pool``: its selector and tolerations."""
    return {"nodeSelector": pool.node_selector(), "tolerations": pool.tolerations()}


def pools_with(pools: Iterable[NodePool], accelerator: Accelerator) -> list[NodePool]:
    """The pools of ``pools`` whose nodes carry ``accelerator``."""
    return [p for p in pools if p.accelerator is accelerator]


def pool_tolerations(pools: Iterable[NodePool]) -> list[dict[str, str]]:
    """Tolerations of every taint of ``pools`` (each once), and of ``CriticalAddonsOnly``."""
    unique: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for pool in pools:
        for toleration in pool.tolerations():
            unique[tuple(sorted(toleration.items()))] = toleration
    return [CRITICAL_ADDONS_TOLERATION, *unique.values()]


def pool_affinity(pools: Sequence[NodePool]) -> dict[str, Any]:
    """Required node affinity matching every label of any one of ``pools``."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": key, "operator": "In", "values": [value]}
                            for key, value in sorted(pool.labels.items())
                        ]
                    }
                    for pool in pools
                ]
            }
        }
    }
