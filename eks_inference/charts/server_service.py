"""The Service and PodDisruptionBudget in front of a Deployment of model servers.

Every engine whose servers are one ``apps/v1`` Deployment with the OpenAI API on
:data:`~eks_inference.charts.model_server.OPENAI_PORT` (standalone vLLM, Triton) exposes them the
same way: a ClusterIP Service named after the deployment, whose one port is the one the load
balancer's target group, the other pods' clients and Prometheus reach, and a budget that lets
node drains evict one replica at a time.
"""

from __future__ import annotations

from collections.abc import Mapping

from eks_inference.charts.metadata import api_object, metadata
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.pod import Json
from eks_inference.specification.deployment import ModelDeploymentSpec

# The servers' one port: the OpenAI API and, on the same port, the engine's /metrics.
HTTP_PORT_NAME = "http"


def service_and_disruption_budget(
    spec: ModelDeploymentSpec, labels: Mapping[str, str], selector: Mapping[str, str]
) -> tuple[Json, Json]:
    """The Service ``<deployment>`` on port 8000 and its PodDisruptionBudget, both selecting
    the server pods by ``selector``.

    The budget allows one unavailable replica, so a drain proceeds one replica at a time,
    and lets unhealthy pods be evicted (``AlwaysAllow``): a replica that never became ready
    (a model that does not load) must not block a node's drain forever.
    """
    service = api_object(
        "v1",
        "Service",
        metadata(spec.name, labels),
        {
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": HTTP_PORT_NAME, "port": OPENAI_PORT, "targetPort": OPENAI_PORT}],
            }
        },
    )
    disruption_budget = api_object(
        "policy/v1",
        "PodDisruptionBudget",
        metadata(spec.name, labels),
        {
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": selector},
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            }
        },
    )
    return service, disruption_budget
