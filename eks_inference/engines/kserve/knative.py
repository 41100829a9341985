"""The platform's Knative Serving, as the KServe add-on applies it: plain Kubernetes JSON.

- :func:`knative_namespaces`: the namespaces of Knative Serving and of its Kourier gateway,
  created before the operator fills them, so that a deployment's Ingress in
  ``kourier-system`` has its namespace whether or not the operator got there first.
- :func:`knative_serving`: the ``KnativeServing`` the Knative Operator installs Serving from.
- :func:`knative_pod_monitor`: Prometheus' scrape of Knative's activator and autoscaler.

The KnativeServing, and why each setting:

- **Kourier**, as the networking layer, with its gateway Service as ``ClusterIP``: KServe
  documents Istio and Kourier for Knative mode (``hack/setup/infra/knative`` at v0.20.0); the
  platform needs only host routing to the revisions, which Kourier (one Envoy gateway and
  its controller) does without a service mesh's sidecars, CRDs and control plane. The
  platform's one load balancer reaches the gateway; no other is created for it.
- **features**: a revision may set what the platform's pods need (node selector,
  tolerations, pod security context, the weights' PersistentVolumeClaim); Knative refuses
  those fields otherwise (``pkg/apis/config/features.go``, all Disabled by default).
- **autoscaler**: scale to zero allowed, and an initial scale of zero allowed (the spec's
  ``scaling.serverless.initial_replicas``).
- **defaults**: a revision may last
  :data:`~eks_inference.engines.kserve.options.MAX_REQUEST_TIMEOUT_S`
  (the load balancer's longest idle timeout, 600 s by default): a cold first request waits
  minutes.
- **observability**: the control plane and the queue-proxies export Prometheus metrics
  (``metrics-protocol: prometheus``; none by default).
- **deployment**: Docker Hub is not asked to resolve tags to digests (its anonymous pull limit
  would fail revisions); every image the platform names is pinned.
- **registry**: the Kourier gateway's image pinned (:data:`versions.KOURIER_GATEWAY_IMAGE`).
- **workloads**: every Knative and Kourier Deployment on the system pool.
"""

from __future__ import annotations

from typing import Any

from eks_inference import names, versions
from eks_inference.charts.metadata import PART_OF, api_object, metadata
from eks_inference.engines.kserve.options import MAX_REQUEST_TIMEOUT_S
from eks_inference.observability.signals import DEPLOYMENT_LABEL, SCRAPE_INTERVAL_SECONDS, seconds
from eks_inference.specification.node_pools import NodePool

KNATIVE_OPERATOR_API_VERSION = "operator.knative.dev/v1beta1"
KNATIVE_SERVING_CRD = "knativeservings.operator.knative.dev"
KNATIVE_SERVING_NAME = "knative-serving"
KOURIER_INGRESS_CLASS = "kourier.ingress.networking.knative.dev"
# The Deployments of Serving 1.21.3 and of its Kourier manifest (the operator's kodata).
KNATIVE_WORKLOADS = (
    "activator",
    "autoscaler",
    "autoscaler-hpa",
    "controller",
    "webhook",
    "net-kourier-controller",
    "3scale-kourier-gateway",
)
# Features a revision of the platform uses (Knative's config-features keys).
REVISION_FEATURES = (
    "kubernetes.podspec-nodeselector",
    "kubernetes.podspec-tolerations",
    "kubernetes.podspec-securitycontext",
    "kubernetes.podspec-persistent-volume-claim",
)
# The activator and autoscaler serve Prometheus metrics on their `metrics` port (9090).
METRICS_PORT_NAME = "metrics"
_LABELS = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/managed-by": PART_OF}


def knative_namespaces() -> list[dict[str, Any]]:
    """The namespaces of Knative Serving and of the Kourier gateway."""
    return [
        api_object("v1", "Namespace", metadata(name, _LABELS, namespace=None), {})
        for name in (names.KNATIVE_SERVING_NAMESPACE, names.KOURIER_NAMESPACE)
    ]


def knative_serving(system: NodePool) -> dict[str, Any]:
    """The ``KnativeServing`` of the platform (see the module's docstring), on ``system``."""
    placement = {"nodeSelector": system.node_selector(), "tolerations": system.tolerations()}
    return api_object(
        KNATIVE_OPERATOR_API_VERSION,
        "KnativeServing",
        metadata(KNATIVE_SERVING_NAME, _LABELS, namespace=names.KNATIVE_SERVING_NAMESPACE),
        {
            "spec": {
                "version": versions.KNATIVE_SERVING_VERSION,
                "ingress": {"kourier": {"enabled": True, "service-type": "ClusterIP"}},
                "config": {
                    "network": {"ingress-class": KOURIER_INGRESS_CLASS},
                    "features": dict.fromkeys(REVISION_FEATURES, "enabled"),
                    "autoscaler": {
                        "enable-scale-to-zero": "true",
                        "allow-zero-initial-scale": "true",
                    },
                    "defaults": {"max-revision-timeout-seconds": str(MAX_REQUEST_TIMEOUT_S)},
                    "observability": {
                        "metrics-protocol": "prometheus",
                        "request-metrics-protocol": "prometheus",
                    },
                    "deployment": {"registries-skipping-tag-resolving": "index.docker.io"},
                },
                "registry": {"override": {"kourier-gateway": versions.KOURIER_GATEWAY_IMAGE}},
                "workloads": [{"name": name, **placement} for name in KNATIVE_WORKLOADS],
            }
        },
    )


def knative_pod_monitor() -> dict[str, Any]:
    """A PodMonitor of Knative's activator and autoscaler (in ``knative-serving``).

    Their per-revision series carry the Knative Service (``kn_service_name``); a series of a
    KServe predictor in the inference namespace (``<deployment>-predictor``) also gets the
    deployment's :data:`~eks_inference.observability.signals.DEPLOYMENT_LABEL`, by which every
    query of the platform selects a deployment.
    """
    predictor = names.kserve_predictor_name("(.+)")
    return api_object(
        "monitoring.coreos.com/v1",
        "PodMonitor",
        metadata("knative-serving", _LABELS, namespace=names.KNATIVE_SERVING_NAMESPACE),
        {
            "spec": {
                "selector": {
                    "matchExpressions": [
                        {
                            "key": "app",
                            "operator": "In",
                            "values": [
                                names.KNATIVE_ACTIVATOR_LABELS["app"],
                                names.KNATIVE_AUTOSCALER_LABELS["app"],
                            ],
                        }
                    ]
                },
                "podMetricsEndpoints": [
                    {
                        "port": METRICS_PORT_NAME,
                        "interval": seconds(SCRAPE_INTERVAL_SECONDS),
                        "metricRelabelings": [
                            {
                                "action": "replace",
                                "sourceLabels": ["k8s_namespace_name", "kn_service_name"],
                                "regex": f"{names.INFERENCE_NAMESPACE};{predictor}",
                                "targetLabel": DEPLOYMENT_LABEL,
                                "replacement": "$1",
                            }
                        ],
                    }
                ],
            }
        },
    )
