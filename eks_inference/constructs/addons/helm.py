"""What the add-ons' Helm releases share: the pinned release, and placement on node pools.

Every chart version comes from :mod:`eks_inference.versions`, and every node selector,
affinity and toleration from the cluster's node pools, so an add-on never names a node label
or a taint of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from eks_inference import versions
from eks_inference.catalog import Accelerator
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.specification.node_pools import NodePool

SYSTEM_NAMESPACE = "kube-system"
# Add-ons tolerate this taint too: deprecated, but still honoured by nodes that carry it.
CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}


class PinnedHelmChart(eks.HelmChart):
    """A Helm release of ``pinned`` (chart, repository and version from
    :mod:`eks_inference.versions`) on ``cluster``.

    The kubectl Lambda fetches the chart at deploy time, never at synth, so synth needs no
    network and the version deployed is exactly the one pinned. Every add-on's release is
    one of these; an add-on made of one release is a subclass.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        pinned: versions.HelmChartVersion,
        release: str,
        namespace: str,
        create_namespace: bool | None = None,
        skip_crds: bool | None = None,
        wait: bool | None = None,
        timeout: Duration | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            cluster=cluster.eks_cluster,
            chart=pinned.chart,
            repository=pinned.repository,
            version=pinned.version,
            release=release,
            namespace=namespace,
            create_namespace=create_namespace,
            skip_crds=skip_crds,
            wait=wait,
            timeout=timeout,
            values=values,
        )


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
