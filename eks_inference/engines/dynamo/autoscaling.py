"""A Dynamo graph that scales: KEDA scales each worker group's scaling adapter on its own load.

With ``scaling.autoscale``, every worker component of the graph sets ``scalingAdapter: {}``,
so the operator creates a ``DynamoGraphDeploymentScalingAdapter`` ``<graph>-<component>`` for
it (:func:`eks_inference.engines.dynamo.graph.adapter_name`), which owns the component's
replicas and exposes them as a scale subresource. One KEDA ScaledObject per group
(``<graph>-<component>``) scales that adapter through the Horizontal Pod Autoscaler KEDA
manages, the same loop as standalone vLLM's (:mod:`eks_inference.charts.autoscaling`).

Every group scales between ``scaling.min_replicas`` and ``scaling.max_replicas``: the spec has
one range, and the ratio of prefill to decode workers a workload needs is what the two
signals find at run time, so neither group is given a share of it in advance. On the signal
that shows each group's own load, read from its workers (the pods' group label is copied onto
their series as :data:`GROUP_SERIES_LABEL`):

- aggregated ``worker``: the deployment's queue depth (vLLM's and the frontend's) and
  average KV-cache use, as standalone vLLM;
- ``prefill``: requests waiting at the prefill workers (``vllm:num_requests_waiting``), which
  is where the time to first token grows when prefill is short of GPUs; a prefill worker
  keeps no KV cache past the hand-over, so its KV use says nothing of its load;
- ``decode``: requests running per decode worker (``vllm:num_requests_running``, against
  ``scaling.target_ongoing_requests``) and the decode workers' average KV-cache use
  (``vllm:kv_cache_usage_perc``): decode holds every sequence's KV cache until it ends, so it
  runs out of batch slots or KV cache first, while its queue stays short.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eks_inference import metrics
from eks_inference.charts.autoscaling import (
    KV_CACHE_TRIGGER,
    QUEUE_TRIGGER,
    prometheus_trigger,
)
from eks_inference.charts.serving import ScaleTarget
from eks_inference.engines.dynamo import graph as dgd
from eks_inference.observability.signals import DEPLOYMENT_LABEL, matchers, signals_of

if TYPE_CHECKING:
    from eks_inference.charts.pod import Json
    from eks_inference.specification.deployment import ModelDeploymentSpec

#: The series label a worker's metrics carry its group under (the pod label
#: ``names.DYNAMO_WORKER_ROLE_LABEL``, copied by its PodMonitor).
GROUP_SERIES_LABEL = "dynamo_component"
RUNNING_TRIGGER = "running-requests"


def group_selector(spec: ModelDeploymentSpec, component: str) -> str:
    """PromQL matchers of the series of ``component``'s workers of ``spec``."""
    return matchers(**{DEPLOYMENT_LABEL: spec.name, GROUP_SERIES_LABEL: component})


def group_triggers(spec: ModelDeploymentSpec, component: str) -> tuple[Json, ...] | None:
    """KEDA's triggers for ``component`` (see the module); ``None`` for the aggregated
    workers, which take the deployment's own queue and KV-cache triggers."""
    if component == dgd.AGGREGATED_WORKER:
        return None
    selector = group_selector(spec, component)
    if component == dgd.PREFILL:
        waiting = f"sum({metrics.VLLM_REQUESTS_WAITING.one()}{selector})"
        return (
            prometheus_trigger(
                QUEUE_TRIGGER, "AverageValue", waiting, signals_of(spec).queue_per_replica
            ),
        )
    running = f"sum({metrics.VLLM_REQUESTS_RUNNING.one()}{selector})"
    kv_cache = f"avg({metrics.VLLM_KV_CACHE_USAGE.one()}{selector})"
    return (
        prometheus_trigger(RUNNING_TRIGGER, "AverageValue", running, spec.target_ongoing_requests),
        prometheus_trigger(
            KV_CACHE_TRIGGER, "Value", kv_cache, signals_of(spec).kv_cache_scale_target
        ),
    )


def scale_targets(spec: ModelDeploymentSpec) -> tuple[ScaleTarget, ...]:
    """One ScaledObject's target per worker group: the group's scaling adapter."""
    scaling = spec.scaling
    return tuple(
        ScaleTarget(
            dgd.adapter_name(spec, component),
            dgd.ADAPTER_API_VERSION,
            dgd.ADAPTER_KIND,
            dgd.adapter_name(spec, component),
            scaling.min_replicas,
            scaling.max_replicas,
            group_triggers(spec, component),
        )
        for component, _ in dgd.worker_groups(spec)
    )
