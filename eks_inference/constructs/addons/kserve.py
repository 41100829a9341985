"""KServe in Knative mode, with what it runs on: cert-manager, Knative Serving and Kourier.

One add-on, because ``engine: kserve`` needs all of it and nothing else needs any of it:

1. **cert-manager** (``versions.CERT_MANAGER_CHART``, with its CRDs): issues the certificate
   of KServe's admission webhooks.
2. **The Knative Operator** (``versions.KNATIVE_OPERATOR_CHART``, with its CRDs), then the
   namespaces of Serving and of the Kourier gateway, then the platform's ``KnativeServing``
   (:func:`eks_inference.engines.kserve.knative.knative_serving`): Serving
   ``versions.KNATIVE_SERVING_VERSION`` with Kourier as its networking layer (why Kourier:
   :mod:`eks_inference.engines.kserve.knative`).
3. **KServe** (``versions.KSERVE_CRD_CHART``, then ``versions.KSERVE_CHART``): the
   InferenceService CRD and the controller, in Knative mode, without Istio.

Everything runs on the system pool. None of it calls AWS: cert-manager issues from a
self-signed issuer (no Route 53 DNS challenge), Knative resolves public image tags without
credentials and KServe reconciles Kubernetes objects only; so no component gets a Pod Identity
role, and the model servers' own identity (the Run:ai streamer's) comes from their
deployment's chart as for every engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks

from eks_inference import names, versions
from eks_inference.charts.monitoring import PODMONITOR_CRD
from eks_inference.constructs.addons.addon import AddonConstruct
from eks_inference.constructs.addons.helm import PinnedHelmChart, on_pool
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.engines.kserve.knative import (
    knative_namespaces,
    knative_pod_monitor,
    knative_serving,
)

CERT_MANAGER_NAMESPACE = "cert-manager"
KNATIVE_OPERATOR_NAMESPACE = "knative-operator"
# The components of the cert-manager chart, each placed by its own values.
_CERT_MANAGER_COMPONENTS = ("webhook", "cainjector", "startupapicheck")


@dataclass(frozen=True)
class KServeOptions:
    """How :class:`KServe` is installed."""

    cert_manager_chart: versions.HelmChartVersion = versions.CERT_MANAGER_CHART
    """Default ``versions.CERT_MANAGER_CHART``: a release that supports Kubernetes 1.35."""
    knative_operator_chart: versions.HelmChartVersion = versions.KNATIVE_OPERATOR_CHART
    """Default ``versions.KNATIVE_OPERATOR_CHART``: the operator carrying the Serving release
    KServe is tested with."""
    kserve_crd_chart: versions.HelmChartVersion = versions.KSERVE_CRD_CHART
    """Default ``versions.KSERVE_CRD_CHART``: the InferenceService API the engine renders."""
    kserve_chart: versions.HelmChartVersion = versions.KSERVE_CHART
    """Default ``versions.KSERVE_CHART``: the controller of the same release."""
    ready_timeout: Duration = field(default_factory=lambda: Duration.minutes(15))
    """Default 15 minutes: Helm waits for each release's pods (webhooks included), so what is
    applied after it finds them answering; the controllers' images are pulled onto the
    system nodes first."""


class KServe(AddonConstruct[KServeOptions]):
    """KServe, Knative Serving, Kourier and cert-manager on the system pool (see the module).

    Registers with the platform the InferenceService CRD (:attr:`controller` installs it:
    deployments' InferenceServices are applied after KServe's webhooks answer) and the
    ``kourier-system`` namespace (:attr:`namespaces` creates it: a deployment's Ingress to
    the Kourier gateway lives there). With the metrics stack on the platform it also applies a
    PodMonitor of Knative's activator and autoscaler, whose series the deployments'
    dashboards and alerts read.

    :class:`~eks_inference.stacks.InferenceStack` creates it only when a deployment's engine
    renders InferenceServices.
    """

    PROVIDES: ClassVar[Provides] = Provides(
        crds=(names.INFERENCESERVICE_CRD,), namespaces=(names.KOURIER_NAMESPACE,)
    )

    OPTIONS = KServeOptions

    def _install(self, platform: PlatformAddons, options: KServeOptions) -> None:
        cluster = platform.cluster
        self._eks_cluster = cluster.eks_cluster
        system = cluster.system_pool
        placed = on_pool(system)
        system_nodes = cluster.nodegroup(system.name)
        self.cert_manager = PinnedHelmChart(
            self,
            "CertManager",
            cluster=cluster,
            pinned=options.cert_manager_chart,
            release="cert-manager",
            namespace=CERT_MANAGER_NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=options.ready_timeout,
            values={
                "crds": {"enabled": True},
                **placed,
                **{component: dict(placed) for component in _CERT_MANAGER_COMPONENTS},
            },
        )
        self.knative_operator = PinnedHelmChart(
            self,
            "KnativeOperator",
            cluster=cluster,
            pinned=options.knative_operator_chart,
            release="knative-operator",
            namespace=KNATIVE_OPERATOR_NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=options.ready_timeout,
            values=_knative_operator_values(system.node_selector(), placed["tolerations"]),
        )
        self.namespaces = self._manifest("Namespaces", knative_namespaces())
        self.knative_serving = self._manifest("KnativeServing", [knative_serving(system)])
        self.knative_serving.node.add_dependency(self.knative_operator, self.namespaces)
        self.crds = PinnedHelmChart(
            self,
            "KServeCrds",
            cluster=cluster,
            pinned=options.kserve_crd_chart,
            release="kserve-crd",
            namespace=names.KSERVE_NAMESPACE,
            create_namespace=True,
        )
        self.controller = PinnedHelmChart(
            self,
            "KServeController",
            cluster=cluster,
            pinned=options.kserve_chart,
            release="kserve",
            namespace=names.KSERVE_NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=options.ready_timeout,
            values=_kserve_values(placed),
        )
        # Its webhook certificate is cert-manager's; it watches Knative Services.
        self.controller.node.add_dependency(self.cert_manager, self.crds, self.knative_serving)
        for release in (self.cert_manager, self.knative_operator, self.crds):
            release.node.add_dependency(system_nodes)
        self.pod_monitor: eks.KubernetesManifest | None = None
        if platform.installs((PODMONITOR_CRD,)):
            self.pod_monitor = self._manifest("Metrics", [knative_pod_monitor()])
            self.pod_monitor.node.add_dependency(
                self.namespaces, platform.crd_installers[PODMONITOR_CRD]
            )
        platform.add_crd_installer(self.PROVIDES.crds, self.controller)
        for namespace in self.PROVIDES.namespaces:
            platform.add_namespace_maker(namespace, self.namespaces)

    def _manifest(self, construct_id: str, objects: list[dict[str, Any]]) -> eks.KubernetesManifest:
        return eks.KubernetesManifest(
            self, construct_id, cluster=self._eks_cluster, manifest=objects
        )


def _knative_operator_values(
    node_selector: dict[str, str], tolerations: list[dict[str, str]]
) -> dict[str, Any]:
    """The operator chart places its pods by affinity and tolerations (it has no selector)."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": key, "operator": "In", "values": [value]}
                            for key, value in sorted(node_selector.items())
                        ]
                    }
                ]
            }
        }
    }
    component = {"affinity": affinity, "tolerations": tolerations}
    return {"knative_operator": {"knative_operator": component, "operator_webhook": component}}


def _kserve_values(placed: dict[str, Any]) -> dict[str, Any]:
    """KServe's controller in Knative mode, behind Kourier rather than Istio, on ``placed``."""
    return {
        "kserve": {
            "controller": {
                "deploymentMode": "Knative",
                "gateway": {"disableIstioVirtualHost": True},
                **placed,
            },
            "localmodel": {"enabled": False},
        }
    }
