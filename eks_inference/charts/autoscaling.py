"""Servers that scale on their queue: a KEDA ScaledObject on the queue depth and KV cache.

For a deployment with ``scaling.autoscale`` on an engine that autoscales on its queue (standalone
vLLM, Triton, and a Dynamo graph's worker groups through their scaling adapters, each on its
own signal: :mod:`eks_inference.engines.dynamo.autoscaling`; Ray Serve and Knative scale by
themselves). The loop: each vLLM pod exports
``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` on its ``/metrics`` (a Triton pod
``nv_inference_pending_request_count``, and no KV-cache gauge); Prometheus scrapes them
through the deployment's PodMonitor (:mod:`eks_inference.charts.monitoring`) and labels them
with the deployment; KEDA queries Prometheus every 15 s and feeds the Horizontal Pod
Autoscaler it manages, which sets the Deployment's replicas between ``min_replicas`` and
``max_replicas``; a pod that does not fit stays pending until the Cluster Autoscaler adds a
node to the pool.
"""

from __future__ import annotations

from typing import Any

from eks_inference import names
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import api_object, metadata, object_labels
from eks_inference.charts.pod import Json
from eks_inference.charts.record import ChartRecord, deployment_chart
from eks_inference.charts.serving import serving_engine
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.observability.signals import SCRAPE_INTERVAL_SECONDS, Signals, signals_of
from eks_inference.specification.deployment import ModelDeploymentSpec

KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALEDOBJECT_CRD = "scaledobjects.keda.sh"
ROLE = "autoscaling"
QUEUE_TRIGGER = "queue-depth"
KV_CACHE_TRIGGER = "kv-cache"
# The Horizontal Pod Autoscaler accepts a stabilization window of at most an hour and a
# policy period of at most 30 minutes (autoscaling/v2 HPAScalingRules).
_MAX_STABILIZATION_SECONDS = 3600
_MAX_POLICY_PERIOD_SECONDS = 1800


def scale_in_behavior(signals: Signals) -> dict[str, Any]:
    """HPA scale-down rules: slower than a model load, one replica at a time.

    The window is the rollout budget (node launch, image pull, model load, at most the
    HPA's hour): a replica is removed only after load stayed low that long, since getting it
    back costs as much. Then one replica per model-load period at most. Scale-up keeps the
    HPA's default: immediate, doubling at most every 15 s.
    """
    return {
        "stabilizationWindowSeconds": min(
            signals.scale_in_window_seconds, _MAX_STABILIZATION_SECONDS
        ),
        "selectPolicy": "Min",
        "policies": [
            {
                "type": "Pods",
                "value": 1,
                "periodSeconds": min(signals.load_budget_seconds, _MAX_POLICY_PERIOD_SECONDS),
            }
        ],
    }


def prometheus_trigger(name: str, metric_type: str, query: str, threshold: float) -> Json:
    """One KEDA Prometheus trigger on the cluster's Prometheus.

    ``AverageValue``: replicas = ceil(``query`` / ``threshold``), the per-replica allowance.
    ``Value``: replicas = ceil(current replicas x ``query`` / ``threshold``), for an average.
    """
    return {
        "type": "prometheus",
        "name": name,
        "metricType": metric_type,
        "metadata": {
            "serverAddress": names.prometheus_url(),
            "query": query,
            "threshold": str(threshold),
        },
    }


def triggers(signals: Signals) -> list[Json]:
    """KEDA's Prometheus triggers: queue depth per replica, and average KV-cache use, for an
    engine that exports it. The HPA takes the larger of the two."""
    queue = prometheus_trigger(
        QUEUE_TRIGGER, "AverageValue", signals.requests_waiting, signals.queue_per_replica
    )
    if signals.kv_cache_usage_avg is None:
        # An engine that exports no KV-cache gauge (Triton's vLLM backend) scales on its queue.
        return [queue]
    kv_cache = prometheus_trigger(
        KV_CACHE_TRIGGER, "Value", signals.kv_cache_usage_avg, signals.kv_cache_scale_target
    )
    return [queue, kv_cache]


def autoscaling_chart(spec: ModelDeploymentSpec) -> ChartRecord:
    """The KEDA ScaledObjects of an autoscaled deployment, one per object its engine scales
    (:meth:`~eks_inference.charts.serving.ServingEngine.scale_targets`: standalone vLLM's
    Deployment ``<deployment>``; each worker group's scaling adapter of a Dynamo graph).

    Each has its target's ``minReplicaCount`` and ``maxReplicaCount``, polls Prometheus every
    15 s (the scrape interval) and scales in as :func:`scale_in_behavior` says. Its needs name
    KEDA's CRD. The scaled object leaves its replica count out of its manifest (or, for a
    Dynamo graph, the adapter owns it), so applying it again never resets what the autoscaler
    chose.
    """
    if not spec.scaling.autoscale:
        raise ValueError(
            f"deployment {spec.name!r}: a ScaledObject is only rendered for a deployment "
            "that asks for one (scaling.autoscale: true, on an engine that autoscales on its "
            "queue)"
        )
    signals = signals_of(spec)
    scaled_objects = [
        api_object(
            KEDA_API_VERSION,
            "ScaledObject",
            metadata(target.name, object_labels(spec, ROLE)),
            {
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": target.api_version,
                        "kind": target.kind,
                        "name": target.target,
                    },
                    "minReplicaCount": target.min_replicas,
                    "maxReplicaCount": target.max_replicas,
                    "pollingInterval": SCRAPE_INTERVAL_SECONDS,
                    "advanced": {
                        "horizontalPodAutoscalerConfig": {
                            "behavior": {"scaleDown": scale_in_behavior(signals)}
                        }
                    },
                    "triggers": (
                        triggers(signals) if target.triggers is None else list(target.triggers)
                    ),
                }
            },
        )
        for target in serving_engine(spec).scale_targets(spec)
    ]
    return deployment_chart(
        spec,
        ROLE,
        scaled_objects,
        PlatformNeeds(namespaces=(INFERENCE_NAMESPACE,), custom_resources=(SCALEDOBJECT_CRD,)),
    )
