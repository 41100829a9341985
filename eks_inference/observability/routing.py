"""How a deployment's endpoint picker (``routing``) is watched: decisions, cache hits, fall-back.

The picker counts its scheduling attempts by outcome and, with the prefix-cache scorer, how
much of each prompt's prefix it found on the replica it looked up; the proxy counts the
requests it sent where the picker said and those it sent round robin because the picker
named no endpoint (down, or not answering in time, under ``fail_open``). Names in
:mod:`eks_inference.metrics`, read at the pinned releases. These become one alert and a
dashboard row of every engine that stands behind a picker.
"""

from __future__ import annotations

from eks_inference import metrics, names
from eks_inference.observability.observed import EngineAlert, EnginePanel
from eks_inference.observability.signals import DEPLOYMENT_LABEL, RATE_WINDOW, matchers
from eks_inference.specification.deployment import ModelDeploymentSpec

# The fall-back is the picker failing open: any request sent round robin for five minutes.
_FAIL_OPEN_FOR_S = 300


def _picks(spec: ModelDeploymentSpec) -> bool:
    return spec.routing is not None and spec.routing.picks


def _cluster_rate(spec: ModelDeploymentSpec, cluster: str) -> str:
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name, "envoy_cluster_name": cluster})
    return f"sum(rate({metrics.ENVOY_CLUSTER_REQUESTS.one()}{selector}[{RATE_WINDOW}]))"


def alerts(spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
    """The picker failing open: requests going round robin (none without a picker)."""
    if not _picks(spec):
        return ()
    return (
        EngineAlert(
            "InferencePickerFailingOpen",
            f"{_cluster_rate(spec, names.FALLBACK_CLUSTER)} > 0",
            _FAIL_OPEN_FOR_S,
            "warning",
            f"{spec.name}: requests bypass the endpoint picker and go round robin",
            "The proxy gets no endpoint from the picker (failure_mode: fail_open), so "
            "requests are served without prefix or load affinity; look at the picker's pod "
            f"({names.picker_service_name(spec.name)}) and its log.",
        ),
    )


def panels(spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
    """The picker's decisions, its prefix-cache hit ratio, and the fall-back's share."""
    if not _picks(spec):
        return ()
    where = matchers(**{DEPLOYMENT_LABEL: spec.name})
    attempts = metrics.EPP_SCHEDULER_ATTEMPTS.one()
    ratio = metrics.EPP_PREFIX_HIT_RATIO
    hits = f"sum(rate({ratio.name}_sum{where}[{RATE_WINDOW}]))"
    lookups = f"sum(rate({ratio.name}_count{where}[{RATE_WINDOW}]))"
    picked = _cluster_rate(spec, names.PICKED_CLUSTER)
    fallback = _cluster_rate(spec, names.FALLBACK_CLUSTER)
    return (
        EnginePanel(
            "Endpoint picker decisions",
            "Scheduling attempts per second, by outcome, and the replica each success chose.",
            "reqps",
            (
                (f"sum by (status) (rate({attempts}{where}[{RATE_WINDOW}]))", "{{status}}"),
                (
                    f"sum by (endpoint_name) (rate({attempts}"
                    f"{matchers(**{DEPLOYMENT_LABEL: spec.name, 'status': 'success'})}"
                    f"[{RATE_WINDOW}]))",
                    "to {{endpoint_name}}",
                ),
            ),
        ),
        EnginePanel(
            "Prefix-cache hit ratio",
            "Average share of a prompt's prefix the picker found cached where it looked.",
            "percentunit",
            ((f"{hits} / ({lookups} > 0)", "hit ratio"),),
        ),
        EnginePanel(
            "Picked and fall-back requests",
            "Requests per second the proxy sent where the picker said, and round robin "
            "because it named no endpoint.",
            "reqps",
            ((picked, "picked"), (fallback, "fall-back (round robin)")),
        ),
    )
