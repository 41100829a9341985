"""The namespace every deployment's objects live in."""

from __future__ import annotations

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import PART_OF, api_object, metadata
from eks_inference.charts.network_policy import namespace_default_deny
from eks_inference.charts.record import ChartRecord
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.versions import KUBERNETES_VERSION


def namespace_chart() -> ChartRecord:
    """The ``inference`` namespace, shared by all deployments; apply it before their charts.

    Pod Security Admission enforces the ``baseline`` profile, pinned to the cluster's
    Kubernetes version: model servers need no host access or privileges, so a pod asking for
    them is refused. ``restricted`` is not possible: the vLLM and Neuron images run as root.
    Its NetworkPolicy ``default-deny`` isolates every pod in it; each deployment's policies
    allow its own flows (:mod:`eks_inference.charts.network_policy`).
    """
    labels = {
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": PART_OF,
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": f"v{KUBERNETES_VERSION}",
    }
    namespace = api_object(
        "v1", "Namespace", metadata(INFERENCE_NAMESPACE, labels, namespace=None), {"spec": {}}
    )
    return ChartRecord(
        chart_id="inference-namespace",
        role="namespace",
        objects=(namespace, namespace_default_deny()),
        needs=PlatformNeeds(),
    )
