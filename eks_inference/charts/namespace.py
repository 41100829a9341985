"""The namespace every deployment's objects live in."""

from __future__ import annotations

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from eks_inference.charts.common import PART_OF
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.versions import KUBERNETES_VERSION


class NamespaceChart(cdk8s.Chart):
    """The ``inference`` namespace, shared by all deployments; apply it before their charts.

    Pod Security Admission enforces the ``baseline`` profile, pinned to the cluster's
    Kubernetes version: model servers need no host access or privileges, so a pod asking for
    them is refused. ``restricted`` is not possible: the vLLM and Neuron images run as root.
    """

    role = "namespace"

    def __init__(self, scope: Construct, id: str = "inference-namespace") -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.inference_namespace = kplus.Namespace(
            self,
            "namespace",
            metadata=cdk8s.ApiObjectMetadata(
                name=INFERENCE_NAMESPACE,
                labels={
                    "app.kubernetes.io/part-of": PART_OF,
                    "app.kubernetes.io/managed-by": PART_OF,
                    "pod-security.kubernetes.io/enforce": "baseline",
                    "pod-security.kubernetes.io/enforce-version": f"v{KUBERNETES_VERSION}",
                },
            ),
        )
