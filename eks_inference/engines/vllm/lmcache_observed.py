"""How a vLLM deployment with ``kv_cache`` (LMCache) is watched beyond every deployment's signals.

LMCache 0.5.6 counts the prompt tokens vLLM asks it for (``lmcache:num_requested_tokens``)
and those it reads back from a tier (``lmcache:num_hit_tokens``), over its tiers together: no
series of that release says which tier a hit came from, so the hit ratio is the tiers'
together, and each tier shows what it holds (``lmcache:local_cache_usage``, the CPU tier;
``lmcache:local_storage_usage``, the disk tier), in bytes. They reach the server's own
``/metrics`` through the multiprocess directory :mod:`eks_inference.charts.kv_offload` sets.

The alert fires when the hit ratio has fallen below half of what it was an hour before, and
stayed there fifteen minutes, while prompts still come: the tiers were lost (the CPU tier
goes with its pod), the workload stopped sharing prefixes, or the tiers fail to store.
"""

from __future__ import annotations

from eks_inference import metrics
from eks_inference.observability.observed import EngineAlert, EnginePanel
from eks_inference.observability.signals import DEPLOYMENT_LABEL, matchers
from eks_inference.specification.deployment import ModelDeploymentSpec

HIT_RATIO_COLLAPSED = "LmcacheHitRatioCollapsed"
# The window of the ratio, long enough to hold many requests; the hour it is compared with;
# the fall that counts as a collapse, and the ratio it must have had for that to mean anything.
_WINDOW = "10m"
_BEFORE = "1h"
_FALL = 0.5
_WAS_AT_LEAST = 0.2
_FOR_S = 900


def _rate(spec: ModelDeploymentSpec, metric: metrics.Metric, offset: str = "") -> str:
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    shifted = f" offset {offset}" if offset else ""
    return f"sum(rate({metric.one()}{selector}[{_WINDOW}]{shifted}))"


def hit_ratio(spec: ModelDeploymentSpec, offset: str = "") -> str:
    """The share of requested prompt tokens LMCache read back, over the last ten minutes
    (``offset`` earlier)."""
    hits = _rate(spec, metrics.LMCACHE_HIT_TOKENS, offset)
    return f"({hits} / {_rate(spec, metrics.LMCACHE_REQUESTED_TOKENS, offset)})"


def alerts(spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
    """With ``kv_cache``: the hit ratio collapsing while prompts come."""
    if spec.kv_cache is None:
        return ()
    requested = _rate(spec, metrics.LMCACHE_REQUESTED_TOKENS)
    before = hit_ratio(spec, _BEFORE)
    return (
        EngineAlert(
            HIT_RATIO_COLLAPSED,
            f"{hit_ratio(spec)} < {_FALL} * {before} and {before} > {_WAS_AT_LEAST} "
            f"and {requested} > 0",
            _FOR_S,
            "warning",
            f"{spec.name}: LMCache reads back less than half the prompt tokens it did an hour ago",
            "Prompts still come, but their prefixes are no longer found in the KV-cache "
            "tiers: the replicas restarted (the CPU tier goes with its pod), the workload "
            "stopped sharing prefixes, or the tiers fail to store; the server's log shows "
            "LMCache's errors, the tier panels what each tier holds.",
        ),
    )


def panels(spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
    """With ``kv_cache``: the hit ratio, and what each tier holds per replica."""
    offload = spec.kv_cache
    if offload is None:
        return ()
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    tiers = [
        (
            f"sum by (pod) ({metrics.LMCACHE_CPU_TIER_BYTES.one()}{selector})",
            f"{{{{pod}}}} CPU tier (of {offload.cpu_gib} GiB)",
        )
    ]
    if offload.disk_gib is not None:
        tiers.append(
            (
                f"sum by (pod) ({metrics.LMCACHE_DISK_TIER_BYTES.one()}{selector})",
                f"{{{{pod}}}} disk tier (of {offload.disk_gib} GiB)",
            )
        )
    return (
        EnginePanel(
            "LMCache hit ratio",
            "Share of the prompt tokens asked of LMCache that a tier held (its tiers "
            "together: LMCache 0.5.6 does not count hits per tier).",
            "percentunit",
            ((hit_ratio(spec), "hit ratio"),),
        ),
        EnginePanel(
            "LMCache tiers",
            "Bytes each KV-cache tier holds, per replica.",
            "bytes",
            tuple(tiers),
        ),
    )
