"""How a Triton deployment is watched beyond every deployment's signals: its own counters.

Triton counts each model's successful and failed requests and the microseconds they spend in
its queue and in the backend, and reports the GPUs it sees (names in
:mod:`eks_inference.metrics`, read at the pinned release). These become two alerts and a
dashboard row of :class:`~eks_inference.engines.triton.engine.TritonEngine`.
"""

from __future__ import annotations

from eks_inference import metrics
from eks_inference.observability.observed import EngineAlert, EnginePanel
from eks_inference.observability.signals import DEPLOYMENT_LABEL, RATE_WINDOW, matchers
from eks_inference.specification.deployment import ModelDeploymentSpec

# Alerts on Triton's own counters: more than 5 % of requests failing, or requests waiting in
# Triton's scheduling queue more than a second on average, for ten minutes.
FAILURE_RATIO_ALERT = 0.05
QUEUE_SECONDS_ALERT = 1.0
_OWN_ALERT_FOR_S = 600
_MICROSECONDS = 1_000_000


def _per_model_rate(metric: metrics.Metric, selector: str) -> str:
    return f"sum by (model) (rate({metric.one()}{selector}[{RATE_WINDOW}]))"


def alerts(spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
    """Requests failing, and requests waiting long in Triton's queue, per model."""
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    success = _per_model_rate(metrics.TRITON_REQUEST_SUCCESS, selector)
    failure = _per_model_rate(metrics.TRITON_REQUEST_FAILURE, selector)
    queued = _per_model_rate(metrics.TRITON_QUEUE_DURATION, selector)
    requests = f"({success} + {failure})"
    return (
        EngineAlert(
            "TritonRequestsFailing",
            f"({failure} / ({requests} > 0)) > {FAILURE_RATIO_ALERT}",
            _OWN_ALERT_FOR_S,
            "warning",
            f"{spec.name}: more than {FAILURE_RATIO_ALERT:.0%} of a model's requests fail",
            "Triton counts failed requests per model (nv_inference_request_failure); the "
            "server's log names the error.",
        ),
        EngineAlert(
            "TritonQueueSlow",
            f"({queued} / ({requests} > 0)) / {_MICROSECONDS} > {QUEUE_SECONDS_ALERT}",
            _OWN_ALERT_FOR_S,
            "warning",
            f"{spec.name}: requests wait over {QUEUE_SECONDS_ALERT:g} s in Triton's queue",
            "A model's instances cannot keep up: add instances (instance_groups), raise "
            "max_batch_size, or add replicas.",
        ),
    )


def panels(spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
    """Requests, queue and compute time per model, and GPU use, as Triton reports them."""
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    success = _per_model_rate(metrics.TRITON_REQUEST_SUCCESS, selector)
    failure = _per_model_rate(metrics.TRITON_REQUEST_FAILURE, selector)
    queued = _per_model_rate(metrics.TRITON_QUEUE_DURATION, selector)
    compute = _per_model_rate(metrics.TRITON_COMPUTE_DURATION, selector)
    requests = f"({success} + {failure})"
    gpu = matchers(**{DEPLOYMENT_LABEL: spec.name})
    used = f"sum({metrics.TRITON_GPU_MEMORY_USED.one()}{gpu})"
    total = f"sum({metrics.TRITON_GPU_MEMORY_TOTAL.one()}{gpu})"
    return (
        EnginePanel(
            "Triton requests by model",
            "Requests per second each model answered and failed.",
            "reqps",
            ((success, "{{model}} ok"), (failure, "{{model}} failed")),
        ),
        EnginePanel(
            "Triton queue and compute time",
            "Seconds per request in Triton's queue and in the backend, by model.",
            "s",
            (
                (f"{queued} / ({requests} > 0) / {_MICROSECONDS}", "{{model}} queue"),
                (f"{compute} / ({requests} > 0) / {_MICROSECONDS}", "{{model}} compute"),
            ),
        ),
        EnginePanel(
            "Triton GPU use",
            "GPU utilization and the share of GPU memory in use, as Triton reports them.",
            "percentunit",
            (
                (f"avg({metrics.TRITON_GPU_UTILIZATION.one()}{gpu})", "utilization"),
                (f"{used} / ({total} > 0)", "memory"),
            ),
        ),
    )
