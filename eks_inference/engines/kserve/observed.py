"""How a KServe deployment's cold starts are watched: how many, and how long each takes.

Knative's autoscaler reports, per revision, the pods it asks for
(``kn_revision_pods_requested``) and the pods ready (``kn_revision_pods_count``; names in
:mod:`eks_inference.metrics`, read at the pinned release). Summed over the deployment's
revisions:

- **a cold start** is the pods asked for going from 0 to more: a request arrived while the
  deployment was at zero (a new revision beside a serving one is no cold start: the sum
  never was 0). Counted by comparing each scrape with the one before, over a window.
- **its duration** is how long pods are asked for while none is ready: node launch, image
  pull, model load, with the first requests held in Knative's activator meanwhile. The time a
  window spent so, over the cold starts in it, is their mean duration.

The activator's own request histogram (``http.server.request.duration`` of otelhttp) would
time the first request, but its buckets end at 10 s, far below any cold start, and while a
revision has less spare capacity than Knative's target burst capacity (211 concurrent
requests by default, more than a GPU replica's batch) the activator proxies warm requests
too, so its latency is not the cold start's.

These become two alerts and a dashboard row of
:class:`~eks_inference.engines.kserve.engine.KServeEngine`, both beside the alert every
deployment at zero has (no ready replica while requests wait, for the rollout budget).
"""

from __future__ import annotations

import math

from eks_inference import metrics
from eks_inference.observability.observed import EngineAlert, EnginePanel
from eks_inference.observability.signals import (
    DEPLOYMENT_LABEL,
    SCRAPE_INTERVAL_SECONDS,
    matchers,
    seconds,
)
from eks_inference.specification.cold_start import cold_start
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.startup_budget import ESTIMATE_MARGIN

# More than one cold start an hour for six hours: the idle gaps barely outlast the retention
# period, so clients keep waiting for cold starts that save little node time.
FREQUENT_WINDOW = "6h"
FREQUENT_COLD_STARTS = 6
# The window the dashboard counts and averages cold starts over.
PANEL_WINDOW = "1h"
_STEP = seconds(SCRAPE_INTERVAL_SECONDS)


def slow_cold_start_seconds(spec: ModelDeploymentSpec) -> int:
    """How long a cold start may take before it is called slow: the margin the load budget
    allows the plan's estimate
    (:data:`~eks_inference.specification.startup_budget.ESTIMATE_MARGIN`)."""
    return math.ceil(ESTIMATE_MARGIN * cold_start(spec).total_seconds)


def _sum(metric: metrics.Metric, spec: ModelDeploymentSpec, offset: str = "") -> str:
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    return f"sum({metric.one()}{selector}{f' offset {offset}' if offset else ''})"


def cold_starts(spec: ModelDeploymentSpec, window: str) -> str:
    """PromQL: the cold starts of ``spec`` in the last ``window``."""
    now = _sum(metrics.KNATIVE_PODS_REQUESTED, spec)
    before = _sum(metrics.KNATIVE_PODS_REQUESTED, spec, _STEP)
    return f"sum_over_time(((({now} > bool 0) - ({before} > bool 0)) > 0)[{window}:{_STEP}])"


def starting(spec: ModelDeploymentSpec) -> str:
    """PromQL, a series while pods are asked for and none is ready (a cold start is on)."""
    wanted = _sum(metrics.KNATIVE_PODS_REQUESTED, spec)
    ready = _sum(metrics.KNATIVE_PODS_READY, spec)
    return f"({wanted} > 0) and on() (({ready} or vector(0)) < 1)"


def starting_seconds(spec: ModelDeploymentSpec, window: str) -> str:
    """PromQL: the seconds of the last ``window`` spent in a cold start."""
    return f"count_over_time(({starting(spec)})[{window}:{_STEP}]) * {SCRAPE_INTERVAL_SECONDS}"


def alerts(spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
    """A cold start far slower than planned, and cold starts more often than hourly."""
    slow = slow_cold_start_seconds(spec)
    expected = cold_start(spec).total_seconds
    return (
        EngineAlert(
            "KServeColdStartSlow",
            starting(spec),
            slow,
            "warning",
            f"{spec.name}: a cold start has taken over {slow} s ({ESTIMATE_MARGIN} x the "
            f"{expected:.0f} s planned)",
            "Replicas are asked for and none is ready; the first requests wait in Knative's "
            "activator. A node that does not come (capacity), a slow image pull or a slow "
            "model load: see the pending pod's events and the replica's log.",
        ),
        EngineAlert(
            "KServeColdStartsFrequent",
            f"({cold_starts(spec, FREQUENT_WINDOW)}) > {FREQUENT_COLD_STARTS}",
            0,
            "warning",
            f"{spec.name}: more than {FREQUENT_COLD_STARTS} cold starts in {FREQUENT_WINDOW}",
            "Traffic stops just longer than the retention period and comes back: clients "
            "wait for a cold start each time, for little node time saved. Raise "
            "scaling.serverless.retention_seconds, or set scaling.min_replicas to 1.",
        ),
    )


def panels(spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
    """Cold starts per hour, and their mean duration against the plan's estimate."""
    count = cold_starts(spec, PANEL_WINDOW)
    expected = cold_start(spec).total_seconds
    return (
        EnginePanel(
            "Cold starts",
            f"Scale-ups from zero in the last {PANEL_WINDOW} (Knative's autoscaler asking for "
            "pods while none were asked for), and pods asked for and ready.",
            "short",
            (
                (count, f"cold starts, last {PANEL_WINDOW}"),
                (_sum(metrics.KNATIVE_PODS_REQUESTED, spec), "pods asked for"),
                (_sum(metrics.KNATIVE_PODS_READY, spec), "pods ready"),
            ),
        ),
        EnginePanel(
            "Cold start duration",
            f"Mean seconds from pods asked for to one ready, over the last {PANEL_WINDOW}'s "
            "cold starts; the plan's estimate, and where the slow-start alert begins.",
            "s",
            (
                (f"({starting_seconds(spec, PANEL_WINDOW)}) / (({count}) > 0)", "mean"),
                (f"vector({expected:.0f})", "planned (eks-inference plan)"),
                (f"vector({slow_cold_start_seconds(spec)})", "alert above"),
            ),
        ),
    )
