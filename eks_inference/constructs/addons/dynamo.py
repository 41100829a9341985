"""The NVIDIA Dynamo platform: the operator with its CRDs, and NATS, for ``engine: dynamo``.

One Helm release of the platform chart (``versions.DYNAMO_PLATFORM_CHART``, from NGC's public
Helm repository) in ``names.DYNAMO_NAMESPACE``, on the system pool:

- **the operator** (``dynamo-operator``), which turns each DynamoGraphDeployment into the
  Deployments and Services of its components. Its CRDs come with the chart: the
  DynamoGraphDeployment CRD alone is about 1.6 MB, far over the 256 KiB a client-side
  ``kubectl apply`` annotation may hold, so it is installed by Helm (which creates CRDs without
  that annotation), never as a manifest;
- **NATS** (the chart's ``nats`` subchart, ``global.nats.install``), the event plane the KV
  router's events from the workers travel on. Its JetStream keeps streams in memory, not on a
  volume: the router's index is rebuilt from the workers' events after a restart, so nothing
  needs to persist, and the platform provisions no storage class for a claim;
- **no etcd**: the operator's discovery backend is Kubernetes' own (``discoveryBackend:
  kubernetes``, the chart's default since the 1.x releases), so ``global.etcd.install`` stays
  off.

Nothing of it calls AWS: no component gets a Pod Identity role. The chart's other optional
components (Grove, the KAI scheduler, checkpointing) stay off, as the chart ships them.

:class:`~eks_inference.stacks.InferenceStack` creates it only when a deployment's engine
renders DynamoGraphDeployments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from aws_cdk import Duration

from eks_inference import names, versions
from eks_inference.constructs.addons.helm import (
    HelmAddon,
    HelmRelease,
    pool_affinity,
)
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.specification.node_pools import NodePool


@dataclass(frozen=True)
class DynamoPlatformOptions:
    """How :class:`DynamoPlatform` is installed."""

    chart: versions.HelmChartVersion = versions.DYNAMO_PLATFORM_CHART
    """Default ``versions.DYNAMO_PLATFORM_CHART``: the release of the runtime image the
    graphs run (``versions.DYNAMO_RUNTIME_IMAGE``)."""
    release: str = names.DYNAMO_PLATFORM_RELEASE
    """Default ``dynamo-platform``: the Helm release name, which also names NATS
    (``<release>-nats``)."""
    ready_timeout: Duration = field(default_factory=lambda: Duration.minutes(15))
    """Default 15 minutes: Helm waits for the operator's webhook and NATS, so the graphs
    applied after it are admitted."""


class DynamoPlatform(HelmAddon[DynamoPlatformOptions]):
    """The Dynamo operator, its CRDs and NATS on the system pool (see the module).

    Registers with the platform the DynamoGraphDeployment CRD: a deployment's graph is applied
    after the release, whose operator webhook then answers.
    """

    OPTIONS = DynamoPlatformOptions
    PROVIDES: ClassVar[Provides] = Provides(crds=(names.DYNAMOGRAPHDEPLOYMENT_CRD,))

    def _release(self, platform: PlatformAddons, options: DynamoPlatformOptions) -> HelmRelease:
        return HelmRelease(
            pinned=options.chart,
            release=options.release,
            namespace=names.DYNAMO_NAMESPACE,
            create_namespace=True,
            skip_crds=False,
            wait=True,
            timeout=options.ready_timeout,
            values=platform_values(platform.cluster.system_pool),
        )


def platform_values(system: NodePool) -> dict[str, Any]:
    """The platform chart's values: NATS installed and in memory, etcd not, every pod on
    ``system`` (both charts place pods by affinity and tolerations)."""
    placed = {"affinity": pool_affinity([system]), "tolerations": system.tolerations()}
    return {
        # With NATS installed, the chart writes nats://<release>-nats.<namespace>.svc.cluster.
        # local:4222 into the operator's configuration (deploy/helm/charts/platform/components/
        # operator/templates/operator-config.yaml:71), which the operator sets as NATS_SERVER
        # in every component's main container (deploy/operator/internal/dynamo/graph.go:1569,
        # ai-dynamo/dynamo at 2a6da14c8361, the 1.5.0 tree): the graph sets no address.
        "global": {"nats": {"install": True}, "etcd": {"install": False}},
        "dynamo-operator": {
            "discoveryBackend": "kubernetes",
            "controllerManager": placed,
        },
        "nats": {
            "config": {
                "jetstream": {
                    "enabled": True,
                    "fileStore": {"enabled": False},
                    "memoryStore": {"enabled": True},
                }
            },
            "podTemplate": {"merge": {"spec": placed}},
        },
    }
